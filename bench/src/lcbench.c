// Timing driver for the lastcall benchmark (bench/run.py builds and runs it).
//
//   lcbench startup RUNS -- SPEC [@@ SPEC...]
//   lcbench sigfwd RUNS SETTLE_MS SIGCHILD FIFO -- SPEC [@@ SPEC...]
//   lcbench drain N ITERS TREE DIR -- SPEC [@@ SPEC...]
//   lcbench escalate N ITERS GRACE_MS TREE DIR -- SPEC [@@ SPEC...]
//
// A SPEC is an init's argv prefix (empty for the bare command); the driver appends the
// child's argv. The specs are alternated: run r starts with spec r % nspecs, so slow drift of
// the machine hits every init alike. One result line per measurement on stdout:
//   startup  IDX WALL_NS
//   sigfwd   IDX LATENCY_NS
//   drain    IDX TOTAL_NS SLOWEST_NS OVERHEAD_NS ALIVE_AT_EXIT RECORDS
//   escalate IDX AFTER_GRACE_NS RSS_BEFORE_KB RSS_MAX_KB HWM_KB MEMBERS
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common.h"

extern char** environ;

#define MAXSPEC 16
static char** specs[MAXSPEC];
static int spec_len[MAXSPEC];
static int nspecs;

static void parse_specs(int argc, char** argv, int start) {
    int i = start;
    while (i <= argc && nspecs < MAXSPEC) {
        specs[nspecs] = &argv[i];
        int n = 0;
        while (i + n < argc && strcmp(argv[i + n], "@@") != 0) ++n;
        spec_len[nspecs++] = n;
        i += n + 1;
    }
}

static pid_t spawn(int idx, char** child, int nchild, int quiet) {
    char* argv[256];
    int k = 0;
    for (int i = 0; i < spec_len[idx]; ++i) argv[k++] = specs[idx][i];
    for (int i = 0; i < nchild; ++i) argv[k++] = child[i];
    argv[k] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (quiet) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    }
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (err != 0) {
        errno = err;
        die(argv[0]);
    }
    return pid;
}

static int wait_pid(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return st;
}

// Reads up to n bytes within timeout_ms; returns the count read.
static size_t read_timeout(int fd, void* buf, size_t n, int timeout_ms) {
    size_t got = 0;
    int64_t end = now_ns() + (int64_t)timeout_ms * 1000000;
    while (got < n) {
        int64_t left = (end - now_ns()) / 1000000;
        if (left < 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0) continue;
        ssize_t r = read(fd, (char*)buf + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0)
            sleep_ns(100000);  // no writer yet (or any more)
    }
    return got;
}

static long status_kb(pid_t pid, const char* key) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') v = atol(line + kl + 1);
    fclose(f);
    return v;
}

static void reap_everything(pid_t pgid) {
    if (pgid > 0) kill(-pgid, SIGKILL);
    int st;
    while (waitpid(-1, &st, 0) > 0 || errno == EINTR) {
    }
}

static int cmd_startup(int runs) {
    char* child[] = {"/bin/true"};
    for (int r = 0; r < runs; ++r)
        for (int j = 0; j < nspecs; ++j) {
            int idx = (r + j) % nspecs;
            int64_t t0 = now_ns();
            pid_t pid = spawn(idx, child, 1, 1);
            int st = wait_pid(pid);
            int64_t t1 = now_ns();
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fprintf(stderr, "spec %d: status %d\n", idx, st);
            printf("startup %d %lld\n", idx, (long long)(t1 - t0));
        }
    return 0;
}

static int cmd_sigfwd(int runs, int settle_ms, char* sigchild, char* fifo) {
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) die("mkfifo");
    char* child[] = {sigchild, fifo};
    for (int r = 0; r < runs; ++r)
        for (int j = 0; j < nspecs; ++j) {
            int idx = (r + j) % nspecs;
            int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) die("open fifo");
            pid_t pid = spawn(idx, child, 2, 1);
            char c;
            if (read_timeout(fd, &c, 1, 5000) != 1) {
                fprintf(stderr, "spec %d: child not ready\n", idx);
                kill(pid, SIGKILL);
                wait_pid(pid);
                close(fd);
                continue;
            }
            sleep_ns((int64_t)settle_ms * 1000000);
            int64_t t0 = now_ns();
            kill(pid, SIGTERM);
            int64_t t1;
            size_t got = read_timeout(fd, &t1, sizeof t1, 5000);
            if (got != sizeof t1) {
                fprintf(stderr, "spec %d: no handler timestamp\n", idx);
                kill(pid, SIGKILL);
            } else {
                printf("sigfwd %d %lld\n", idx, (long long)(t1 - t0));
            }
            wait_pid(pid);
            close(fd);
            reap_everything(0);
        }
    unlink(fifo);
    return 0;
}

// Starts `tree MODE N FIFO RECORDS` under spec idx and waits until the whole tree is set up.
static pid_t start_tree(int idx, char* mode, long n, char* tree, char* dir, char* fifo, char* recs,
                        pid_t* pgid) {
    snprintf(fifo, 256, "%s/tree.fifo", dir);
    snprintf(recs, 256, "%s/tree.records", dir);
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) die("mkfifo");
    int rf = open(recs, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (rf < 0) die("records");
    close(rf);
    int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die("open fifo");
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    char* child[] = {tree, mode, nbuf, fifo, recs};
    pid_t pid = spawn(idx, child, 5, 1);
    char msg[64] = {0};
    size_t got = 0;
    int64_t end = now_ns() + 120LL * 1000000000;
    int st = 0;
    while (now_ns() < end && !memchr(msg, '\n', got)) {
        got += read_timeout(fd, msg + got, 1, 200);
        if (!memchr(msg, '\n', got) && waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "spec %d: init exited before the tree was ready (status %d)\n", idx,
                    st);
            close(fd);
            reap_everything(0);
            return -1;
        }
    }
    close(fd);
    long members = 0;
    int pg = 0;
    if (sscanf(msg, "R %ld %d", &members, &pg) != 2) {
        fprintf(stderr, "spec %d: tree not ready (%s)\n", idx, msg);
        kill(pid, SIGKILL);
        wait_pid(pid);
        return -1;
    }
    if (members != n) fprintf(stderr, "spec %d: only %ld of %ld members\n", idx, members, n);
    *pgid = pg;
    return pid;
}

static int cmd_drain(long n, int iters, char* tree, char* dir) {
    char fifo[256], recs[256];
    int64_t* rec = malloc(sizeof(int64_t) * 2 * (size_t)n);
    for (int r = 0; r < iters; ++r)
        for (int j = 0; j < nspecs; ++j) {
            int idx = (r + j) % nspecs;
            pid_t pgid = 0;
            pid_t pid = start_tree(idx, "drain", n, tree, dir, fifo, recs, &pgid);
            if (pid < 0) continue;
            sleep_ns(50 * 1000000LL);
            int64_t t0 = now_ns();
            kill(pid, SIGTERM);
            wait_pid(pid);
            int64_t t_exit = now_ns();
            // Give the members the init left behind time to finish on their own.
            struct stat sb;
            int64_t end = now_ns() + 3000000000LL;
            while (now_ns() < end && stat(recs, &sb) == 0 && sb.st_size < (off_t)(16 * n)) {
                int st;
                if (waitpid(-1, &st, WNOHANG) <= 0) sleep_ns(1000000);
            }
            reap_everything(pgid);
            int fd = open(recs, O_RDONLY);
            ssize_t bytes = read(fd, rec, sizeof(int64_t) * 2 * (size_t)n);
            close(fd);
            long count = bytes > 0 ? bytes / 16 : 0, alive = 0;
            int64_t slowest = 0;
            for (long i = 0; i < count; ++i) {
                int64_t t = rec[2 * i + 1];
                if (t > slowest) slowest = t;
                if (t > t_exit) ++alive;
            }
            alive += n - count;  // never recorded an exit: killed at the clean-up
            printf("drain %d %lld %lld %lld %ld %ld\n", idx, (long long)(t_exit - t0),
                   (long long)(slowest - t0), (long long)(t_exit - slowest), alive, count);
            fflush(stdout);
        }
    free(rec);
    return 0;
}

static int cmd_escalate(long n, int iters, int grace_ms, char* tree, char* dir) {
    char fifo[256], recs[256];
    for (int r = 0; r < iters; ++r)
        for (int j = 0; j < nspecs; ++j) {
            int idx = (r + j) % nspecs;
            pid_t pgid = 0;
            pid_t pid = start_tree(idx, "ignore", n, tree, dir, fifo, recs, &pgid);
            if (pid < 0) continue;
            sleep_ns(100 * 1000000LL);
            long before = status_kb(pid, "VmRSS");
            int64_t t0 = now_ns();
            kill(pid, SIGTERM);
            long rss_max = before, hwm = -1;
            int st = 0;
            pid_t got;
            while ((got = waitpid(pid, &st, WNOHANG)) == 0) {
                long v = status_kb(pid, "VmRSS"), h = status_kb(pid, "VmHWM");
                if (v > rss_max) rss_max = v;
                if (h > hwm) hwm = h;
                sleep_ns(20 * 1000000LL);
                if (now_ns() - t0 > 60000000000LL) {
                    fprintf(stderr, "spec %d: init still running after 60 s\n", idx);
                    kill(pid, SIGKILL);
                }
            }
            int64_t t_exit = now_ns();
            reap_everything(pgid);
            printf("escalate %d %lld %ld %ld %ld %ld\n", idx,
                   (long long)(t_exit - t0 - (int64_t)grace_ms * 1000000), before, rss_max, hwm, n);
            fflush(stdout);
        }
    return 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) return 2;
    int dd = 0;
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--") == 0) {
            dd = i;
            break;
        }
    if (!dd) return 2;
    parse_specs(argc, argv, dd + 1);
    // Whatever an init leaves behind is re-parented here and reaped here.
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    const char* mode = argv[1];
    if (!strcmp(mode, "startup")) return cmd_startup(atoi(argv[2]));
    if (!strcmp(mode, "sigfwd")) return cmd_sigfwd(atoi(argv[2]), atoi(argv[3]), argv[4], argv[5]);
    if (!strcmp(mode, "drain")) return cmd_drain(atol(argv[2]), atoi(argv[3]), argv[4], argv[5]);
    if (!strcmp(mode, "escalate"))
        return cmd_escalate(atol(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5], argv[6]);
    return 2;
}
