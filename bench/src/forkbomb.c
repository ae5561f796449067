// A fork bomb stopped at the end of a grace (issue 14): how long an init takes from SIGTERM to
// its exit, against the kernel's own floor for ending the same bomb.
//
//   forkbomb floor UID NPROC HOLD_MS RUNS FIFO
//       The floor: a minimal subreaper starts the bomb as UID (RLIMIT_NPROC = NPROC), lets it
//       run HOLD_MS, then kill(-pgid, SIGKILL) and waitpid(-1) until ECHILD. Prints per run:
//       "floor RUN NS_FROM_KILL_TO_LAST_REAP REAPED LEFT CPU_NS RUNQUEUE_NS" (its own schedstat
//       over that time, as for an init below).
//   forkbomb init UID NPROC FIFO RUNS -- INIT ARGS...
//       INIT ARGS... SELF bomb runs as UID under RLIMIT_NPROC = NPROC (the init shares the limit,
//       as an unprivileged init would); once the bomb has started, SIGTERM to the init and wait
//       for its exit. Prints per run: "init RUN NS_FROM_SIGTERM_TO_EXIT WAIT_STATUS LEFT
//       CPU_NS RUNQUEUE_NS": the last two are the init's CPU time and its time runnable but
//       waiting for a CPU, from the grace's end (SIGTERM + 2 s) to its exit (its schedstat,
//       read at that moment and again from the zombie before the reap).
//   forkbomb init-root UID NPROC FIFO RUNS -- INIT ARGS...
//       The same with the init left root (RLIMIT_NPROC set, which binds the bomb only once the
//       init runs it as UID, e.g. `lastcall --user UID:UID`).
//   forkbomb bomb FIFO
//       The bomb: ignores SIGTERM, writes one byte to FIFO, and every process forks forever; a
//       refused fork is retried after 1 ms (tests/e2e/helpers/faultkit.c's forkbomb).
//
// LEFT counts the processes of UID still alive afterwards (any is a failure of the init; they are
// killed before the next run).
//
// In the init modes the driver waits at a real-time priority (SCHED_FIFO, reset on fork: the init
// and the bomb run at the normal one). Under 2,000 runnable processes a driver at the normal
// priority was seen to learn of the init's exit 2 s late (a hand run: 4.99 s by the driver's
// clock, 2.93 s by lastcall's own report), which the table would have charged to the init. The
// floor keeps the normal priority: it is the reaper being measured.
#include "common.h"

#include <dirent.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static __attribute__((noreturn)) void bomb(const char* fifo) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGCHLD, SIG_IGN);
    int fd = open(fifo, O_WRONLY | O_CLOEXEC);
    if (fd < 0) die("open fifo");
    (void)write_all(fd, "b", 1);
    close(fd);
    for (;;) {
        if (fork() < 0) sleep_ns(1000000);
    }
}

static void become(uid_t uid, rlim_t nproc) {
    struct rlimit r = {nproc, nproc};
    if (setrlimit(RLIMIT_NPROC, &r) != 0) die("setrlimit");
    if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0) die("setuid");
}

// Processes of uid, by /proc/PID/status (a process that changed uid is not dumpable, and its
// /proc directory belongs to root). With kill_them: SIGKILL each (cleanup between runs).
static int processes_of(uid_t uid, int kill_them) {
    int n = 0;
    DIR* d = opendir("/proc");
    if (!d) die("opendir /proc");
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (r <= 0) continue;
        buf[r] = 0;
        char* u = strstr(buf, "\nUid:");
        char* s = strstr(buf, "\nState:");
        if (!u || (s && strncmp(s, "\nState:\tZ", 9) == 0)) continue;
        if ((uid_t)strtoul(u + 5, NULL, 10) != uid) continue;
        ++n;
        if (kill_them) kill(atoi(e->d_name), SIGKILL);
    }
    closedir(d);
    return n;
}

static void clean_up(uid_t uid) {
    while (processes_of(uid, 1) > 0) sleep_ns(10000000);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

// /proc/PID/schedstat: time on a CPU and time runnable but waiting for one (ns). -1 when
// unreadable (the kernel lacks CONFIG_SCHED_INFO).
struct sched_times {
    long long cpu, wait;
};

static struct sched_times sched_times_of(pid_t pid) {
    struct sched_times t = {-1, -1};
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return t;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r > 0) {
        buf[r] = 0;
        if (sscanf(buf, "%lld %lld", &t.cpu, &t.wait) != 2) t.cpu = t.wait = -1;
    }
    return t;
}

// One result line, then the next run starts from a user with no process left.
static void report_run(const char* what, int run, int64_t ns, int value, uid_t uid,
                       struct sched_times after_grace) {
    int left = processes_of(uid, 0);
    printf("%s %d %lld %d %d %lld %lld\n", what, run, (long long)ns, value, left, after_grace.cpu,
           after_grace.wait);
    fflush(stdout);
    clean_up(uid);
}

static int floor_runs(uid_t uid, rlim_t nproc, int hold_ms, int runs, const char* fifo) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) die("prctl");
    int rd = open(fifo, O_RDWR | O_CLOEXEC);  // RDWR: the open does not wait for a writer
    if (rd < 0) die("open fifo");
    for (int run = 0; run < runs; ++run) {
        pid_t child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            setpgid(0, 0);
            become(uid, nproc);
            bomb(fifo);
        }
        setpgid(child, child);
        char c;
        if (read_all(rd, &c, 1) != 0) die("read fifo");
        sleep_ns((int64_t)hold_ms * 1000000);
        int64_t t0 = now_ns();
        struct sched_times before = sched_times_of(getpid());
        kill(-child, SIGKILL);
        int reaped = 0;
        while (waitpid(-1, NULL, 0) > 0) ++reaped;
        int64_t t1 = now_ns();
        struct sched_times after = sched_times_of(getpid());
        report_run("floor", run, t1 - t0, reaped, uid,
                   (struct sched_times){after.cpu - before.cpu, after.wait - before.wait});
    }
    return 0;
}

static int init_runs(uid_t uid, rlim_t nproc, int as_root, const char* fifo, int runs,
                     char** init) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) die("prctl");
    struct sched_param rt = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &rt) != 0)
        die("sched_setscheduler SCHED_FIFO");
    int rd = open(fifo, O_RDWR | O_CLOEXEC);
    if (rd < 0) die("open fifo");
    int argc = 0;
    while (init[argc]) ++argc;
    char** argv = calloc((size_t)argc + 4, sizeof *argv);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) die("readlink /proc/self/exe");
    self[n] = 0;
    for (int i = 0; i < argc; ++i) argv[i] = init[i];
    argv[argc] = self;
    argv[argc + 1] = "bomb";
    argv[argc + 2] = (char*)fifo;
    for (int run = 0; run < runs; ++run) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            dup2(null, 2);
            if (as_root) {
                struct rlimit r = {nproc, nproc};
                if (setrlimit(RLIMIT_NPROC, &r) != 0) die("setrlimit");
            } else {
                become(uid, nproc);
            }
            execvp(argv[0], argv);
            _exit(127);
        }
        char c;
        if (read_all(rd, &c, 1) != 0) die("read fifo");
        int64_t t0 = now_ns();
        kill(pid, SIGTERM);
        // At the grace's end (the driver's real-time priority wakes it on time), then from the
        // zombie: what the init did after the grace, and how long it could not get a CPU.
        struct timespec grace_end = {(time_t)((t0 + 2000000000LL) / 1000000000LL),
                                     (long)((t0 + 2000000000LL) % 1000000000LL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &grace_end, NULL) == EINTR) {
        }
        struct sched_times at_grace = sched_times_of(pid);
        siginfo_t info;
        while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
        }
        int64_t t1 = now_ns();
        struct sched_times at_exit = sched_times_of(pid), after = {-1, -1};
        if (at_grace.cpu >= 0 && at_exit.cpu >= 0)
            after = (struct sched_times){at_exit.cpu - at_grace.cpu, at_exit.wait - at_grace.wait};
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        report_run("init", run, t1 - t0, status, uid, after);
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "bomb") == 0) bomb(argv[2]);
    if (argc == 7 && strcmp(argv[1], "floor") == 0) {
        return floor_runs((uid_t)atoi(argv[2]), (rlim_t)atol(argv[3]), atoi(argv[4]), atoi(argv[5]),
                          argv[6]);
    }
    int as_root = argc >= 2 && strcmp(argv[1], "init-root") == 0;
    if (argc >= 8 && (as_root || strcmp(argv[1], "init") == 0) && strcmp(argv[6], "--") == 0) {
        return init_runs((uid_t)atoi(argv[2]), (rlim_t)atol(argv[3]), as_root, argv[4],
                         atoi(argv[5]), argv + 7);
    }
    fprintf(stderr,
            "usage: forkbomb floor UID NPROC HOLD_MS RUNS FIFO\n"
            "       forkbomb init|init-root UID NPROC FIFO RUNS -- INIT ARGS...\n");
    return 2;
}
