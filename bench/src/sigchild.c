// Child for the signal-forward latency case: `sigchild FIFO`.
// Opens FIFO for writing, installs a SIGTERM handler, writes 'R'; the handler writes the
// CLOCK_MONOTONIC time (int64 ns) at which it ran and exits.
#include "common.h"

static int out_fd = -1;

static void on_term(int sig) {
    (void)sig;
    int64_t t = now_ns();
    (void)write(out_fd, &t, sizeof t);
    _exit(0);
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    out_fd = open(argv[1], O_WRONLY);
    if (out_fd < 0) die("open fifo");
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (write_all(out_fd, "R", 1) != 0) die("write ready");
    for (;;) pause();
}
