// SPDX-License-Identifier: Apache-2.0
// memfill MAX KIB [ADJ]: fills a memory-limited cgroup with many small children, as the issue's
// OOM probe did (1,000 small children, none larger than the init). Each child touches KIB KiB
// of its own and waits to be killed; the parent forks until the OOM killer has killed one of
// them (a child ended by SIGKILL: nobody else sends one here), prints "oom-killed PID" and exits
// 0. Exits 1 if MAX children were forked without a kill (MAX * KIB well above the limit). What it
// leaves behind waits in pause() for the stop signal. With ADJ, each child first writes it to its
// oom_score_adj (raising it needs no privilege): the OOM killer then chooses a child whatever
// lastcall's own score is.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int oom_killed(pid_t pid, int status) {
    if (pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        printf("oom-killed %d\n", (int)pid);
        fflush(stdout);
        return 1;
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: memfill MAX KIB [ADJ]\n");
        return 2;
    }
    long max = strtol(argv[1], NULL, 10);
    size_t bytes = (size_t)strtol(argv[2], NULL, 10) * 1024;
    for (long i = 0; i < max; ++i) {
        pid_t pid = fork();
        if (pid == 0) {
            if (argc == 4) {
                int fd = open("/proc/self/oom_score_adj", O_WRONLY);
                if (fd < 0 || write(fd, argv[3], strlen(argv[3])) < 0) _exit(3);
                close(fd);
            }
            char* p = malloc(bytes);
            if (p) memset(p, 1, bytes);
            for (;;) pause();
        }
        int status = 0;
        if (pid < 0) {
            // No memory for another child: wait for the OOM killer to take one.
            pid_t got = wait(&status);
            if (oom_killed(got, status)) return 0;
            continue;
        }
        pid_t got;
        while ((got = waitpid(-1, &status, WNOHANG)) > 0)
            if (oom_killed(got, status)) return 0;
    }
    return 1;
}
