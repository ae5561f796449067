// Orphan maker for the reaping case: `orphans N`, run as the child of an init that is PID 1.
// Double-forks N grandchildren that block on a pipe, so that when the write end closes all N
// exit at once and become orphaned zombies of PID 1. Measures from that moment until /proc of
// the PID namespace shows only PID 1 and this process, and prints
// "reaped N NS" (nanoseconds) on stdout.
#include <dirent.h>
#include <sys/wait.h>

#include "common.h"

static int count_pids(void) {
    DIR* d = opendir("/proc");
    if (!d) die("opendir /proc");
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)))
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9') ++n;
    closedir(d);
    return n;
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    long n = atol(argv[1]);
    int p[2];
    if (pipe(p) != 0) die("pipe");
    for (long i = 0; i < n; ++i) {
        pid_t mid = fork();
        if (mid < 0) die("fork");
        if (mid == 0) {
            pid_t g = fork();
            if (g < 0) _exit(1);
            if (g == 0) {
                close(p[1]);
                char c;
                while (read(p[0], &c, 1) < 0 && errno == EINTR) {
                }
                _exit(0);
            }
            _exit(0);
        }
        int st;
        while (waitpid(mid, &st, 0) < 0 && errno == EINTR) {
        }
    }
    int before = count_pids();
    int64_t t0 = now_ns();
    close(p[1]);
    int left;
    while ((left = count_pids()) > 2) sleep_ns(500000);
    int64_t t1 = now_ns();
    printf("reaped %ld %lld pids_before %d\n", n, (long long)(t1 - t0), before);
    fflush(stdout);
    return 0;
}
