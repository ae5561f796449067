// SPDX-License-Identifier: Apache-2.0
/* Children for the fault-injection and privilege tests (test_faults.py, test_privileges.py).
 *
 *   faultkit wait              "ready <pid>" to $EVENTS, then wait for a signal to end it
 *   faultkit close-stdio       closes its stdin, stdout and stderr first, then as `wait`
 *   faultkit count-signals     counts SIGHUP and SIGUSR1; on SIGTERM writes
 *                              "term hup=<n> usr1=<n>" to $EVENTS and exits 0
 *   faultkit forkbomb          every process forks as fast as it can (bounded by RLIMIT_NPROC)
 *   faultkit forkstorm RATE    ignores SIGTERM and forks RATE children per second, each ignoring
 *                              SIGTERM and living 200 ms; "storming" after the first second,
 *                              then "rate <forks in the last second>" every second
 *   faultkit orphan            forks a grandchild ("grandchild <pid>", then waits), then as `wait`
 *   faultkit self              prints its open fds and its credentials to stdout, exits 0
 *
 * $EVENTS is a FIFO path (lastcall closes every fd >= 3 of its child, so it is passed by name).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void event(const char* line) {
    const char* path = getenv("EVENTS");
    if (!path) return;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    /* One write of a short line into a FIFO is atomic (< PIPE_BUF). */
    if (write(fd, line, strlen(line)) < 0) {
    }
    close(fd);
}

static void eventf(const char* fmt, long a, long b) {
    char buf[128];
    snprintf(buf, sizeof buf, fmt, a, b);
    event(buf);
}

static void wait_forever(void) {
    for (;;) pause();
}

static volatile sig_atomic_t hups, usr1s, terms;
static void on_signal(int sig) {
    if (sig == SIGHUP) ++hups;
    if (sig == SIGUSR1) ++usr1s;
    if (sig == SIGTERM) terms = 1;
}

static int count_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Blocked outside sigsuspend, so a TERM between the check and the wait is not lost. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGHUP), sigaddset(&block, SIGUSR1), sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    eventf("ready %ld\n", (long)getpid(), 0);
    while (!terms) sigsuspend(&old);
    eventf("term hup=%ld usr1=%ld\n", (long)hups, (long)usr1s);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int forkstorm(long rate) {
    signal(SIGTERM, SIG_IGN); /* inherited by every child: only SIGKILL ends the storm */
    signal(SIGCHLD, SIG_IGN); /* children are reaped by the kernel, no zombies pile up */
    double start = now(), second = start;
    long forks = 0, in_second = 0;
    int announced = 0;
    for (;;) {
        double t = now();
        if (t - second >= 1.0) {
            if (!announced) event("storming\n"), announced = 1;
            eventf("rate %ld\n", in_second, 0);
            second = t;
            in_second = 0;
        }
        /* Keep to RATE per second: fork only while behind schedule. */
        if (forks >= (long)((t - start) * rate)) {
            struct timespec pause_ts = {0, 50000};
            nanosleep(&pause_ts, NULL);
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            struct timespec life = {0, 200000000};
            nanosleep(&life, NULL);
            _exit(0);
        }
        if (pid > 0) ++forks, ++in_second;
    }
}

/* A real fork bomb: every process forks as fast as it can, and so does every child; a refused
 * fork (RLIMIT_NPROC, pid_max) is retried. Only a kill that no fork can race ends it. */
static __attribute__((noreturn)) int forkbomb(void) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGCHLD, SIG_IGN);
    event("bombing\n");
    for (;;) {
        if (fork() < 0) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
}

static int orphan(void) {
    pid_t pid = fork();
    if (pid == 0) {
        eventf("grandchild %ld\n", (long)getpid(), 0);
        wait_forever();
    }
    eventf("ready %ld\n", (long)getpid(), 0);
    wait_forever();
    return 0;
}

static int self(void) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return perror("opendir /proc/self/fd"), 1;
    printf("fds:");
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d)) continue; /* the listing's own descriptor */
        char target[256] = "?";
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n >= 0) target[n] = '\0';
        printf(" %d=%s", fd, target);
    }
    printf("\n");
    closedir(d);
    FILE* status = fopen("/proc/self/status", "re");
    if (!status) return perror("/proc/self/status"), 1;
    char line[512];
    while (fgets(line, sizeof line, status)) {
        static const char* const keys[] = {
            "Uid:",    "Gid:",    "Groups:", "NoNewPrivs:", "CapEff:",
            "CapPrm:", "CapInh:", "CapBnd:", "CapAmb:"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0) fputs(line, stdout);
    }
    fclose(status);
    return 0;
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "wait") == 0) {
        eventf("ready %ld\n", (long)getpid(), 0);
        wait_forever();
    }
    if (strcmp(mode, "close-stdio") == 0) {
        close(0), close(1), close(2);
        eventf("ready %ld\n", (long)getpid(), 0);
        wait_forever();
    }
    if (strcmp(mode, "count-signals") == 0) return count_signals();
    if (strcmp(mode, "forkstorm") == 0 && argc > 2) return forkstorm(atol(argv[2]));
    if (strcmp(mode, "forkbomb") == 0) return forkbomb();
    if (strcmp(mode, "orphan") == 0) return orphan();
    if (strcmp(mode, "self") == 0) return self();
    fprintf(stderr,
            "usage: faultkit wait|close-stdio|count-signals|forkstorm RATE|forkbomb|orphan|self\n");
    return 2;
}
