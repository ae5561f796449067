// Process tree for the drain and escalation cases: `tree drain|ignore N FIFO RECORDS`.
// Builds N processes (this one, sqrt(N)-ish children, the rest grandchildren), all in this
// process group. When every member is set up, writes 'R' to FIFO.
//  drain:  on SIGTERM each member sleeps a random 0-50 ms, appends {pid, CLOCK_MONOTONIC ns}
//          to RECORDS (one 16-byte O_APPEND write) and exits.
//  ignore: every member ignores SIGTERM and waits forever.
#include <math.h>
#include <sys/prctl.h>

#include "common.h"

static volatile sig_atomic_t got_term = 0;
static void on_term(int sig) {
    (void)sig;
    got_term = 1;
}

static int drain_mode;
static const char* records;
static int ready_w;

static void member(void) {
    if (drain_mode) {
        struct sigaction sa = {0};
        sa.sa_handler = on_term;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    } else {
        signal(SIGTERM, SIG_IGN);
    }
}

static void member_wait_and_exit(void) {
    if (!drain_mode)
        for (;;) pause();
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, &old);
    while (!got_term) sigsuspend(&old);
    srand((unsigned)(getpid() * 2654435761u) ^ (unsigned)now_ns());
    sleep_ns((int64_t)(rand() % 50001) * 1000);  // 0..50 ms
    int64_t rec[2] = {getpid(), now_ns()};
    int fd = open(records, O_WRONLY | O_APPEND);
    if (fd >= 0) (void)write(fd, rec, sizeof rec);
    _exit(0);
}

int main(int argc, char** argv) {
    if (argc != 5) return 2;
    drain_mode = strcmp(argv[1], "drain") == 0;
    long n = atol(argv[2]);
    records = argv[4];
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    member();
    int rp[2];
    if (pipe(rp) != 0) die("pipe");
    ready_w = rp[1];
    long rest = n - 1;
    long fan = (long)sqrt((double)rest);
    if (fan < 1) fan = 1;
    long made = 0;
    for (long i = 0; i < fan && made < rest; ++i) {
        long grand = (rest - fan) / fan + (i < (rest - fan) % fan ? 1 : 0);
        if (rest <= fan) grand = 0;
        pid_t c = fork();
        if (c < 0) die("fork");
        if (c == 0) {
            close(rp[0]);
            for (long j = 0; j < grand; ++j) {
                pid_t g = fork();
                if (g < 0) die("fork");
                if (g == 0) {
                    (void)write(ready_w, "g", 1);
                    close(ready_w);
                    member_wait_and_exit();
                }
            }
            (void)write(ready_w, "c", 1);
            close(ready_w);
            member_wait_and_exit();
        }
        made += 1 + grand;
    }
    close(rp[1]);
    char buf[4096];
    long seen = 0;
    while (seen < made) {
        ssize_t r = read(rp[0], buf, sizeof buf);
        if (r <= 0) break;
        seen += r;
    }
    close(rp[0]);
    int f = open(argv[3], O_WRONLY);
    if (f < 0) die("open fifo");
    char msg[64];
    int len = snprintf(msg, sizeof msg, "R %ld %d\n", seen + 1, (int)getpgrp());
    (void)write_all(f, msg, (size_t)len);
    close(f);
    member_wait_and_exit();
    return 0;
}
