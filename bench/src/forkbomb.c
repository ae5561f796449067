// A fork bomb stopped at the end of a grace (issue 14): how long an init takes from SIGTERM to
// its exit, against the kernel's own floor for ending the same bomb.
//
//   forkbomb floor UID NPROC HOLD_MS RUNS FIFO
//       The floor: a minimal subreaper starts the bomb as UID (RLIMIT_NPROC = NPROC), lets it
//       run HOLD_MS, then kill(-pgid, SIGKILL) and waitpid(-1) until ECHILD. Prints per run:
//       "floor RUN NS_FROM_KILL_TO_LAST_REAP REAPED LEFT".
//   forkbomb init UID NPROC FIFO RUNS -- INIT ARGS...
//       INIT ARGS... SELF bomb runs as UID under RLIMIT_NPROC = NPROC (the init shares the limit,
//       as an unprivileged init would); once the bomb has started, SIGTERM to the init and wait
//       for its exit. Prints per run: "init RUN NS_FROM_SIGTERM_TO_EXIT WAIT_STATUS LEFT".
//   forkbomb init-root UID NPROC FIFO RUNS -- INIT ARGS...
//       The same with the init left root (RLIMIT_NPROC set, which binds the bomb only once the
//       init runs it as UID, e.g. `lastcall --user UID:UID`).
//   forkbomb bomb FIFO
//       The bomb: ignores SIGTERM, writes one byte to FIFO, and every process forks forever; a
//       refused fork is retried after 1 ms (tests/e2e/helpers/faultkit.c's forkbomb).
//
// LEFT counts the processes of UID still alive afterwards (any is a failure of the init; they are
// killed before the next run).
#include "common.h"

#include <dirent.h>
#include <grp.h>
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

// One result line, then the next run starts from a user with no process left.
static void report_run(const char* what, int run, int64_t ns, int value, uid_t uid) {
    int left = processes_of(uid, 0);
    printf("%s %d %lld %d %d\n", what, run, (long long)ns, value, left);
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
        kill(-child, SIGKILL);
        int reaped = 0;
        while (waitpid(-1, NULL, 0) > 0) ++reaped;
        report_run("floor", run, now_ns() - t0, reaped, uid);
    }
    return 0;
}

static int init_runs(uid_t uid, rlim_t nproc, int as_root, const char* fifo, int runs,
                     char** init) {
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) die("prctl");
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
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        report_run("init", run, now_ns() - t0, status, uid);
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
