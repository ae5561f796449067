// SPDX-License-Identifier: Apache-2.0
// rtcount: counts how many copies of a forwarded signal reach each process, exactly.
//
//   rtcount ROLE [--fork ROLE2]
//
// Real-time signals queue (two sends are two deliveries), so SIGRTMIN+1 is the signal counted.
// Each process reports "ROLE ready PID", then "ROLE rt-seen" at the first SIGRTMIN+1. On SIGUSR1
// it takes every SIGRTMIN+1 still queued and reports "ROLE rt N" (N: all it received). SIGTERM
// ends it with status 0. A sender that signals a process twice is caught as soon as the test
// sends SIGUSR1 after "rt-seen": the second copy was queued before the first was even read.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char* events_path;

static void report(const char* line) {
    int fd = open(events_path, O_WRONLY);
    if (fd < 0 || write(fd, line, strlen(line)) != (ssize_t)strlen(line)) {
        perror("rtcount: $EVENTS");
        exit(2);
    }
    close(fd);
}

static int run(const char* role) {
    int rt = SIGRTMIN + 1;
    sigset_t set, rt_only;
    sigemptyset(&set);
    sigaddset(&set, rt);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigemptyset(&rt_only);
    sigaddset(&rt_only, rt);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return 2;
    char line[128];
    snprintf(line, sizeof line, "%s ready %d\n", role, (int)getpid());
    report(line);
    int count = 0;
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig < 0) continue;
        if (sig == rt) {
            if (++count == 1) {
                snprintf(line, sizeof line, "%s rt-seen\n", role);
                report(line);
            }
        } else if (sig == SIGUSR1) {
            struct timespec zero = {0, 0};
            while (sigtimedwait(&rt_only, NULL, &zero) == rt) ++count;
            snprintf(line, sizeof line, "%s rt %d\n", role, count);
            report(line);
        } else if (sig == SIGTERM) {
            return 0;
        }
    }
}

int main(int argc, char** argv) {
    events_path = getenv("EVENTS");
    if (argc < 2 || !events_path) {
        fprintf(stderr, "usage: EVENTS=FIFO rtcount ROLE [--fork ROLE2]\n");
        return 2;
    }
    if (argc == 4 && strcmp(argv[2], "--fork") == 0) {
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) return run(argv[3]);
    }
    return run(argv[1]);
}
