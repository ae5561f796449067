// SPDX-License-Identifier: Apache-2.0
/* forker: ignores SIGTERM and forks a new child every 10 ms; every child ignores SIGTERM too and
 * sleeps. A tree that keeps growing during the drain: only SIGKILL of the whole tree ends it. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGCHLD, SIG_IGN); /* children reap themselves: no zombies from us */
    const char* path = getenv("EVENTS");
    if (path) {
        int fd = open(path, O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, "forking\n", 8);
            close(fd);
        }
    }
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    for (;;) {
        if (fork() == 0) {
            for (;;) pause();
        }
        nanosleep(&ten_ms, NULL);
    }
}
