// SPDX-License-Identifier: Apache-2.0
/* once_term: behaves like a Node.js app with process.once('SIGTERM', ...): the first SIGTERM
 * starts a graceful exit (0 after 300 ms) and restores the default action, so a second SIGTERM
 * kills it (exit status 143 to its parent). Reports "started" and "term" on $EVENTS. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got_term;

static void report(const char* what) {
    const char* path = getenv("EVENTS");
    if (!path) return;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    (void)!write(fd, what, strlen(what));
    close(fd);
}

static void on_term(int sig) {
    (void)sig;
    signal(SIGTERM, SIG_DFL); /* once: the listener is gone after the first call */
    got_term = 1;
}

int main(void) {
    /* SIGTERM stays blocked except inside sigsuspend: one arriving between the check of
     * got_term and the wait would otherwise be handled before pause() and never wake it. */
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigdelset(&waiting, SIGTERM);
    signal(SIGTERM, on_term);
    report("started\n");
    while (!got_term) sigsuspend(&waiting);
    sigprocmask(SIG_UNBLOCK, &term, NULL);
    report("term\n");
    struct timespec graceful = {0, 300 * 1000 * 1000};
    while (nanosleep(&graceful, &graceful) != 0) {
    }
    return 0;
}
