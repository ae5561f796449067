// Orphan maker for the reaping case: `orphans N`, run as the child of an init that is PID 1.
// Double-forks N grandchildren that block on a pipe, so that when the write end closes all N
// exit at once and become orphaned zombies of PID 1. Measures from that moment until every one
// of them is gone (reaped: `kill(pid, 0)` fails with ESRCH; nothing forks meanwhile, so no pid
// is reused), and prints "reaped N NS" (nanoseconds) on stdout.
//
// The probe is one cheap system call per pending pid, from the oldest on: an earlier version
// listed /proc every 0.5 ms, which at 16,384 processes cost more CPU than the init's reaping
// and made the figure the harness's (bench/results/2026-12-05-startup.md).
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

// CPU time PID 1 has used so far, in nanoseconds: what reaping costs the init itself, apart from
// the kernel's work for the exiting processes, which every init waits for. /proc/1/schedstat's
// first field is the scheduler's own count (ns); /proc/1/stat's utime+stime come in 10 ms ticks,
// too coarse for the 10-100 ms a run costs (the fallback where schedstat is not built in).
static long long init_cpu_ns(void) {
    char buf[1024];
    int fd = open("/proc/1/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        unsigned long long ns = 0;
        if (r > 0 && (buf[r] = 0, sscanf(buf, "%llu", &ns) == 1)) return (long long)ns;
    }
    fd = open("/proc/1/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open /proc/1/stat");
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) die("read /proc/1/stat");
    buf[r] = 0;
    const char* p = strrchr(buf, ')');  // the command name may hold spaces
    unsigned long long utime = 0, stime = 0;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        die("parse /proc/1/stat");
    return (long long)(utime + stime) * (1000000000LL / sysconf(_SC_CLK_TCK));
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    long n = atol(argv[1]);
    int p[2], pids[2];
    if (pipe(p) != 0 || pipe(pids) != 0) die("pipe");
    pid_t* grandchildren = calloc((size_t)n, sizeof(pid_t));
    if (!grandchildren) die("calloc");
    // Each intermediate child forks a batch of grandchildren, sends their pids in one write
    // (under PIPE_BUF: atomic) and exits: a batch is orphaned at once. Batches keep the
    // tree's creation, which dominates the run at 16,384, to one fork per orphan.
    enum { BATCH = 256 };
    for (long done = 0; done < n;) {
        long count = n - done < BATCH ? n - done : BATCH;
        pid_t mid = fork();
        if (mid < 0) die("fork");
        if (mid == 0) {
            pid_t batch[BATCH];
            for (long j = 0; j < count; ++j) {
                pid_t g = fork();
                if (g < 0) _exit(1);
                if (g == 0) {
                    close(p[1]);
                    char c;
                    while (read(p[0], &c, 1) < 0 && errno == EINTR) {
                    }
                    _exit(0);
                }
                batch[j] = g;
            }
            _exit(write_all(pids[1], batch, sizeof(pid_t) * (size_t)count) == 0 ? 0 : 1);
        }
        int st;
        while (waitpid(mid, &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("fork a batch of orphans");
        if (read_all(pids[0], &grandchildren[done], sizeof(pid_t) * (size_t)count) != 0)
            die("read grandchild pids");
        done += count;
    }
    int before = count_pids();
    long long cpu0 = init_cpu_ns();
    int64_t t0 = now_ns();
    close(p[1]);
    for (long i = 0; i < n; ++i)
        while (kill(grandchildren[i], 0) == 0) sleep_ns(100000);
    int64_t t1 = now_ns();
    long long init_cpu = init_cpu_ns() - cpu0;
    if (count_pids() > 2) {
        fprintf(stderr, "processes left in the namespace after every orphan was reaped\n");
        return 1;
    }
    printf("reaped %ld %lld pids_before %d init_cpu_ns %lld\n", n, (long long)(t1 - t0), before,
           init_cpu);
    fflush(stdout);
    return 0;
}
