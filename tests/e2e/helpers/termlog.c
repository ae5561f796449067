// SPDX-License-Identifier: Apache-2.0
#define _GNU_SOURCE
/* termlog [exit_code]: on SIGTERM/SIGINT/SIGQUIT/SIGHUP/SIGUSR1/SIGUSR2 writes
 * "<SIGNAME> <CLOCK_MONOTONIC ns> ready=<0|1>" to $EVENTS (ready: whether $READY_FILE exists at
 * that moment); exits with exit_code on TERM/INT/QUIT. Reports "started" first. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One flag per signal: two different signals arriving before the loop runs are both reported. */
static volatile sig_atomic_t pending[65];

static void on_signal(int sig) {
    pending[sig] = 1;
}

static void report(const char* line) {
    const char* path = getenv("EVENTS");
    if (!path) return;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return;
    (void)!write(fd, line, strlen(line));
    close(fd);
}

int main(int argc, char** argv) {
    int code = argc > 1 ? atoi(argv[1]) : 0;
    int sigs[] = {SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; ++i) sigaction(sigs[i], &sa, NULL);
    report("started\n");
    sigset_t all, old;
    sigfillset(&all);
    for (;;) {
        /* Check-then-wait without losing a signal in between: block, check, sigsuspend. */
        sigprocmask(SIG_BLOCK, &all, &old);
        int sig = 0;
        for (unsigned i = 0; i < sizeof sigs / sizeof *sigs && !sig; ++i)
            if (pending[sigs[i]]) sig = sigs[i];
        if (!sig) {
            sigsuspend(&old);
            sigprocmask(SIG_SETMASK, &old, NULL);
            continue;
        }
        pending[sig] = 0;
        sigprocmask(SIG_SETMASK, &old, NULL);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const char* rf = getenv("READY_FILE");
        int ready = rf && access(rf, F_OK) == 0;
        char line[128];
        snprintf(line, sizeof line, "%s %lld ready=%d\n",
                 sigabbrev_np(sig) ? sigabbrev_np(sig) : "?",
                 (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, ready);
        report(line);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) return code;
    }
}
