// SPDX-License-Identifier: Apache-2.0
/* orphan_maker N: double-forks N short-lived orphans (each intermediate exits at once, so the
 * grandchild is reparented to the nearest subreaper or PID 1), then reports on $EVENTS and waits
 * for SIGTERM. Used to prove that lastcall reaps what it did not spawn. */
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

int main(int argc, char** argv) {
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
