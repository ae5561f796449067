// SPDX-License-Identifier: Apache-2.0
#define _GNU_SOURCE
/* prefork [max]: a pre-fork server in its own session that forks a worker every millisecond (at
 * most max, default 2000) and exits inside its SIGTERM handler, so it never forks after it was
 * told to stop: every worker is born before its parent's stop signal, and must get one of its
 * own. Workers keep SIGTERM's default action and wait. Reports "prefork PID" to $EVENTS once it
 * has forked a few workers. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char** argv) {
    int max = argc > 1 ? atoi(argv[1]) : 2000;
    signal(SIGTERM, on_term);
    setsid();
    for (int i = 0; i < max; ++i) {
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGTERM, SIG_DFL);
            for (;;) pause();
        }
        if (i == 10) {
            const char* path = getenv("EVENTS");
            int fd = path ? open(path, O_WRONLY) : -1;
            if (fd >= 0) {
                dprintf(fd, "prefork %d\n", (int)getpid());
                close(fd);
            }
        }
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    for (;;) pause();
}
