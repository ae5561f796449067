// Main command for bench/never_waits.py: `sigstamp FIFO INDEX`.
// Opens FIFO for writing and sends one record per event, {int32 index, int32 signo, int64
// CLOCK_MONOTONIC ns, int64 pid}: signo 0 once at start (ready), then SIGUSR1 each time its
// handler runs (the handler itself takes the time and writes: no queue between the signal and
// the stamp), and SIGTERM, after which it exits 0. PR_SET_PDEATHSIG: it dies with lastcall if
// lastcall is killed. A record is 24 bytes, below PIPE_BUF, so records of several writers on one
// FIFO never interleave.
#include <sys/prctl.h>

#include "common.h"

struct record {
    int32_t index;
    int32_t signo;
    int64_t ns;
    int64_t pid;
};

static int out_fd = -1;
static int32_t my_index;

static void stamp(int sig) {
    struct record r = {my_index, sig, now_ns(), (int64_t)getpid()};
    (void)write(out_fd, &r, sizeof r);
}

static void on_usr1(int sig) {
    int saved = errno;
    stamp(sig);
    errno = saved;
}

static void on_term(int sig) {
    stamp(sig);
    _exit(0);
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    my_index = (int32_t)atoi(argv[2]);
    out_fd = open(argv[1], O_WRONLY);
    if (out_fd < 0) die("open fifo");
    struct sigaction sa = {0};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_term;
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    stamp(0);
    for (;;) pause();
}
