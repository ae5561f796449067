// SPDX-License-Identifier: Apache-2.0
/* orphan_maker N: double-forks N short-lived orphans (each intermediate exits at once, so the
 * grandchild is reparented to the nearest subreaper or PID 1), then reports on $EVENTS and waits
 * for SIGTERM. Used to prove that lastcall reaps what it did not spawn.
 *
 * orphan_maker --burst N CODE: the N orphans wait on a pipe; "ready N" on $EVENTS, then the pipe
 * closes (all N exit at once: a burst of SIGCHLDs) and orphan_maker exits with CODE as soon as
 * the first of them has been reaped, in the middle of the burst. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char* line) {
    const char* path = getenv("EVENTS");
    if (!path) return;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    (void)!write(fd, line, strlen(line));
    close(fd);
}

static int burst(int n, int code) {
    int gate[2], pids[2];
    if (pipe(gate) != 0 || pipe(pids) != 0) return 111;
    pid_t first = 0;
    for (int i = 0; i < n; ++i) {
        pid_t p = fork();
        if (p < 0) return 111;
        if (p == 0) {
            pid_t g = fork();
            if (g == 0) {
                char c;
                close(gate[1]);
                (void)!read(gate[0], &c, 1); /* until the pipe closes */
                _exit(0);
            }
            if (i == 0) (void)!write(pids[1], &g, sizeof g);
            _exit(0);
        }
        while (waitpid(p, NULL, 0) < 0) {
        }
        if (i == 0 && read(pids[0], &first, sizeof first) != sizeof first) return 111;
    }
    char line[64];
    snprintf(line, sizeof line, "ready %d\n", n);
    report(line);
    close(gate[1]);
    /* Reaped: kill(0) fails (nothing forks any more, so the pid is not reused). */
    while (kill(first, 0) == 0) usleep(100);
    return code;
}

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "--burst") == 0) return burst(atoi(argv[2]), atoi(argv[3]));
    int n = argc > 1 ? atoi(argv[1]) : 100;
    for (int i = 0; i < n; ++i) {
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            return 1;
        }
        if (p == 0) {
            if (fork() == 0) _exit(0); /* the orphan: exits at once, becomes a zombie of init */
            _exit(0);
        }
        while (waitpid(p, NULL, 0) < 0) {
        }
    }
    char line[64];
    snprintf(line, sizeof line, "made %d\n", n);
    report(line);
    pause(); /* SIGTERM (default action) ends us */
    return 0;
}
