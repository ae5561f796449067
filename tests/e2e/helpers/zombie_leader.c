// SPDX-License-Identifier: Apache-2.0
/* zombie_leader: leaves behind a process whose leader thread has exited (pthread_exit) while a
 * second thread runs: /proc shows the process as a zombie (state Z), yet it lives and holds its
 * pid. It detaches first (double fork + setsid) and ignores SIGTERM, so only a SIGKILL ends it.
 * Reports "leader <pid>" on $EVENTS; the foreground process then exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void* spin(void* arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

int main(void) {
    /* The foreground process exits only once the detached one is set up: its exit starts
     * lastcall's shutdown, whose SIGTERM must find SIGTERM already ignored. */
    int ready[2];
    if (pipe(ready) != 0) return 1;
    pid_t middle = fork();
    if (middle > 0) {
        close(ready[1]);
        char c;
        (void)!read(ready[0], &c, 1);
        waitpid(middle, NULL, 0);
        return 0;
    }
    close(ready[0]);
    setsid();
    if (fork() > 0) _exit(0);
    signal(SIGTERM, SIG_IGN);
    pthread_t t;
    if (pthread_create(&t, NULL, spin, NULL) != 0) _exit(1);
    const char* path = getenv("EVENTS");
    if (path) {
        char line[64];
        snprintf(line, sizeof line, "leader %d\n", (int)getpid());
        int fd = open(path, O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, line, strlen(line));
            close(fd);
        }
    }
    (void)!write(ready[1], "r", 1);
    close(ready[1]);
    pthread_exit(NULL);
}
