// SPDX-License-Identifier: Apache-2.0
/* npm_like: stands in for a dev server started through npm's shells. It forks a helper that
 * calls setsid (a file watcher or esbuild daemon: out of the terminal's process group, ignoring
 * SIGINT and SIGHUP as daemons do), reports "helper <pid>" and "server <pid>" on $EVENTS, and
 * waits. A runner that only signals the process group leaves the helper behind. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void report(const char* what) {
    const char* path = getenv("EVENTS");
    if (!path) return;
    char line[64];
    snprintf(line, sizeof line, "%s %d\n", what, (int)getpid());
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    (void)!write(fd, line, strlen(line));
    close(fd);
}

int main(void) {
    pid_t helper = fork();
    if (helper < 0) {
        perror("fork");
        return 1;
    }
    if (helper == 0) {
        setsid();
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        report("helper");
        for (;;) pause();
    }
    printf("listening on http://localhost:3000\n");
    fflush(stdout);
    report("server");
    for (;;) pause();
}
