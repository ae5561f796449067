// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/spawner.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/userdb.hpp"
namespace lastcall {

const char* to_string(SpawnStage stage) {
    switch (stage) {
        case SpawnStage::Setsid:
            return "setsid";
        case SpawnStage::Setpgid:
            return "setpgid";
        case SpawnStage::Cgroup:
            return "cgroup placement";
        case SpawnStage::Rlimit:
            return "setrlimit(RLIMIT_NOFILE)";
        case SpawnStage::OomScoreAdj:
            return "oom_score_adj";
        case SpawnStage::Chdir:
            return "chdir";
        case SpawnStage::Pdeathsig:
            return "prctl(PR_SET_PDEATHSIG)";
        case SpawnStage::Setgroups:
            return "setgroups";
        case SpawnStage::Setgid:
            return "setgid";
        case SpawnStage::Setuid:
            return "setuid";
        case SpawnStage::VerifyIds:
            return "credential check";
        case SpawnStage::Capabilities:
            return "capability drop";
        case SpawnStage::NoNewPrivs:
            return "prctl(PR_SET_NO_NEW_PRIVS)";
        case SpawnStage::Dup:
            return "dup2";
        case SpawnStage::CloseFds:
            return "close_range";
        case SpawnStage::Exec:
            return "exec";
    }
    return "?";
}

int SpawnFailure::exit_code() const {
    if (stage != SpawnStage::Exec) return 1;
    if (err == ENOENT || err == ENOTDIR) return 127;
    return 126;
}

std::string SpawnFailure::message() const {
    std::string m = stage == SpawnStage::Exec ? "cannot execute " + path
                    : stage == SpawnStage::Chdir
                        ? "working directory " + path
                        : std::string(to_string(stage)) + " failed for " + path;
    if (!detail.empty()) return m + ": " + detail;
    return m + ": " + std::strerror(err);
}

namespace {

// ENOENT from execve of a file that exists: its #! interpreter is what is missing. Read in the
// parent, after the failure (the child must not allocate).
void explain_missing_interpreter(SpawnFailure& f, const std::vector<std::string>& candidates) {
    for (const auto& c : candidates) {
        UniqueFd fd(::open(c.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
        struct stat st {};
        if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        char head[256];
        ssize_t n = ::read(fd.get(), head, sizeof head - 1);
        if (n < 3 || head[0] != '#' || head[1] != '!') return;
        std::string line(head + 2, static_cast<std::size_t>(n - 2));
        line = line.substr(0, line.find('\n'));
        auto start = line.find_first_not_of(" \t");
        if (start == std::string::npos) return;
        std::string interpreter = line.substr(start, line.find_first_of(" \t", start) - start);
        f.path = c;
        f.detail = "its interpreter " + interpreter + " does not exist (#! line)";
        return;
    }
}

std::string env_lookup(const std::vector<std::string>& env, std::string_view key) {
    for (const auto& kv : env)
        if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
            return kv.substr(key.size() + 1);
    return {};
}

struct ChildReport {
    int stage;
    int err;
    int candidate;  // the command_candidates() entry an exec failure is about; -1: the name
};

// Async-signal-safe: write(2) only. The pipe is CLOEXEC, so a successful exec closes it.
[[noreturn]] void fail(int report_fd, SpawnStage stage, int candidate = -1) {
    ChildReport r{static_cast<int>(stage), errno, candidate};
    [[maybe_unused]] auto n = ::write(report_fd, &r, sizeof r);
    ::_exit(127);
}

// execvp's search over the prepared candidates, under the credentials the child now has. Like
// execvp, a file the kernel cannot execute (ENOEXEC: a script without a #! line) runs under
// /bin/sh: `shell_argv` is {"/bin/sh", <slot>, argv[1]...}, prepared before the clone, and the
// slot gets the candidate (a store: async-signal-safe). tini and dumb-init run such a script.
[[noreturn]] void exec_first(char* const* candidates, std::size_t count, char* const* argv,
                             char** shell_argv, char** envp, int report_fd) {
    int eacces = -1;
    for (std::size_t i = 0; i < count; ++i) {
        ::execve(candidates[i], argv, envp);
        if (errno == ENOEXEC) {
            shell_argv[1] = candidates[i];
            ::execve(shell_argv[0], shell_argv, envp);
            errno = ENOEXEC;  // report the script's own failure, not the shell's
        }
        switch (errno) {
            case ENOENT:
            case ENOTDIR:
            case ESTALE:
            case ENODEV:
            case ETIMEDOUT:
                continue;
            case EACCES:
                if (eacces < 0) eacces = static_cast<int>(i);
                continue;
            default:
                fail(report_fd, SpawnStage::Exec, static_cast<int>(i));
        }
    }
    if (eacces >= 0) {
        errno = EACCES;
        fail(report_fd, SpawnStage::Exec, eacces);
    }
    errno = ENOENT;
    fail(report_fd, SpawnStage::Exec, count == 1 ? 0 : -1);
}

// Async-signal-safe decimal formatting for LISTEN_PID.
void write_decimal(char* out, long v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (int i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
    out[n] = '\0';
}

// The steps of the child between fork and exec, in their order. Only async-signal-safe calls
// (the child may share lastcall's memory, spawn_sharing_memory), each fails through fail().
// Inlined into child_main: the hot-symbol list (packaging/hot-symbols.txt) places that one
// function with the start's code, and a step out of line would sit elsewhere, a page fault
// more per spawn.

// Its own session (or group), and the terminal's foreground where it had it.
[[gnu::always_inline]] inline void enter_session(const SpawnSpec& spec, int report_fd) {
    using Session = SpawnSpec::Session;
    if (spec.session == Session::NewSession) {
        if (::setsid() < 0) fail(report_fd, SpawnStage::Setsid);
        // Best effort: a terminal that already is another session's controlling tty (lastcall run
        // from an interactive shell) refuses with EPERM; signals then come through forwarding.
        if (spec.take_tty) ::ioctl(STDIN_FILENO, TIOCSCTTY, 0);
    } else if (spec.session == Session::NewGroup) {
        // As tini does: a new group that was started from the terminal's foreground takes the
        // foreground over, so an interactive command reads the tty and gets ^C and ^Z itself.
        // SIGTTOU is still blocked here, so tcsetpgrp works from the new (background) group.
        bool foreground = spec.take_tty && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
        if (::setpgid(0, 0) < 0) fail(report_fd, SpawnStage::Setpgid);
        if (foreground) ::tcsetpgrp(STDIN_FILENO, ::getpid());
    }
}

[[gnu::always_inline]] inline void join_cgroup(const SpawnSpec& spec, bool born_in_cgroup,
                                               int report_fd) {
    if (spec.cgroup_fd >= 0 && !born_in_cgroup) {
        // "0" moves the writing process: the command is in the cgroup before its first instruction.
        int procs = ::openat(spec.cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (procs < 0 || ::write(procs, "0", 1) != 1) fail(report_fd, SpawnStage::Cgroup);
        ::close(procs);
    }
}

// Limits, credentials, working directory and the parent-death signal, in that order.
[[gnu::always_inline]] inline void take_identity(const SpawnSpec& spec, int report_fd) {
    // The soft descriptor limit and the oom_score_adj lastcall itself was started with, not the
    // ones it raised and lowered for itself (process/limits.hpp). Before the privilege drop: a
    // process whose credentials changed is no longer dumpable, and its /proc/self files belong
    // to root.
    if (spec.limits) {
        if (!restore_nofile(*spec.limits)) fail(report_fd, SpawnStage::Rlimit);
        if (!restore_oom_score_adj(*spec.limits)) fail(report_fd, SpawnStage::OomScoreAdj);
    }
    // The one privilege-drop path (credentials.cpp), for every unit and helper alike.
    SpawnStage failed{};
    if (spec.credentials) {
        if (!drop_privileges(*spec.credentials, spec.no_new_privs, failed)) fail(report_fd, failed);
    } else if (spec.no_new_privs && !set_no_new_privs(failed)) {
        fail(report_fd, failed);
    }
    // After the drop: the unit enters its working directory with its own rights, not root's.
    if (!spec.workdir.empty() && ::chdir(spec.workdir.c_str()) < 0)
        fail(report_fd, SpawnStage::Chdir);
    if (spec.pdeathsig > 0) {
        if (::prctl(PR_SET_PDEATHSIG, spec.pdeathsig) < 0) fail(report_fd, SpawnStage::Pdeathsig);
    }
}

// Output, and which descriptors reach the command.
[[gnu::always_inline]] inline void set_up_fds(const SpawnSpec& spec, int report_fd) {
    if (spec.stdout_fd >= 0) {
        if (::dup2(spec.stdout_fd, STDOUT_FILENO) < 0 || ::dup2(spec.stdout_fd, STDERR_FILENO) < 0)
            fail(report_fd, SpawnStage::Dup);
    }
    // Nothing of lastcall's (signalfd, epoll, cgroup files, sockets) reaches the command. The
    // report pipe is CLOEXEC and stays open until the exec itself.
    unsigned first = 3 + static_cast<unsigned>(spec.keep_fds);
    if (::close_range(first, ~0U, CLOSE_RANGE_CLOEXEC) < 0) fail(report_fd, SpawnStage::CloseFds);
    if (spec.keep_fds > 0) {
        for (int fd = 3; fd < 3 + spec.keep_fds; ++fd) {
            int flags = ::fcntl(fd, F_GETFD);
            if (flags >= 0) ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
        }
    }
}

[[gnu::always_inline]] inline void restore_signals(const SpawnSpec& spec,
                                                   const SignalBits& ignored) {
    // Dispositions first, then the mask: a signal already pending is then delivered with its
    // default action, as if lastcall had never been in between. Exec resets every handler to
    // the default and keeps only SIG_IGN, and lastcall ignores nothing it did not inherit
    // (`ignored`, read before the fork): only those are reset, and not in tini mode, whose child
    // inherits them. None in the common case; a reset of all 64 cost a start-up 64 system calls.
    // The raw system call (kernel_sigaction): an ignored 32 or 33 inherited from whoever
    // started lastcall would otherwise reach the command.
    const KernelSigaction dfl;
    const InheritedSignals* in = spec.inherited_signals;
    for (int sig = 1; sig < NSIG; ++sig) {
        if (!ignored.has(sig)) continue;
        if (in && in->ignored.has(sig)) continue;  // passed on, as tini does
        kernel_sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, in ? &in->mask : &none, nullptr);
}

[[noreturn]] void run_child(const SpawnSpec& spec, char* const* candidates,
                            std::size_t candidate_count, char* const* argv, char** shell_argv,
                            char** envp, char* listen_pid_slot, int report_fd, pid_t parent,
                            bool born_in_cgroup, const SignalBits& ignored) {
    enter_session(spec, report_fd);
    join_cgroup(spec, born_in_cgroup, report_fd);
    take_identity(spec, report_fd);
    set_up_fds(spec, report_fd);
    if (listen_pid_slot) write_decimal(listen_pid_slot, ::getpid());
    restore_signals(spec, ignored);
    // PR_SET_PDEATHSIG fires on the death of the parent *thread*; if lastcall died between fork
    // and prctl, the signal will never come, so check by hand (prctl(2)).
    // kill(getpid()), not raise(): after a raw clone3 glibc's cached thread id is the parent's.
    if (spec.pdeathsig > 0 && ::getppid() != parent) ::kill(::getpid(), spec.pdeathsig);
    exec_first(candidates, candidate_count, argv, shell_argv, envp, report_fd);
}

// struct clone_args of <linux/sched.h>, spelled out: that header collides with glibc's <sched.h>.
struct CloneArgs {
    std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};
constexpr std::uint64_t kCloneIntoCgroup = 0x200000000ULL;

// Like fork(), but the child starts life in the cgroup. -1 if the kernel refuses (ENOSYS,
// E2BIG, EINVAL, seccomp): the caller then forks. Only called from the loop's thread; the child's
// glibc state is a copy of lastcall's, so it believes in threads it does not have (the ledger
// worker's): it makes only system calls that glibc passes straight through, and changes its
// credentials with the raw calls (drop_privileges), never glibc's setxid broadcast.
pid_t clone_into_cgroup(int cgroup_dir_fd) {
    CloneArgs args{};
    args.flags = kCloneIntoCgroup;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<std::uint64_t>(cgroup_dir_fd);
    long r = ::syscall(SYS_clone3, &args, sizeof args);
    return r < 0 ? -1 : static_cast<pid_t>(r);
}

// What run_child needs, passed through the clone to a child that shares lastcall's memory.
struct ChildArgs {
    const SpawnSpec* spec;
    char* const* candidates;
    std::size_t candidate_count;
    char* const* argv;
    char** shell_argv;
    char** envp;
    char* listen_pid_slot;
    int report_fd;
    pid_t parent;
    bool born_in_cgroup;
    const SignalBits* ignored;
};

int child_main(void* p) {
    const auto& a = *static_cast<const ChildArgs*>(p);
    run_child(*a.spec, a.candidates, a.candidate_count, a.argv, a.shell_argv, a.envp,
              a.listen_pid_slot, a.report_fd, a.parent, a.born_in_cgroup, *a.ignored);
}

// The child shares lastcall's memory until its exec (CLONE_VM | CLONE_VFORK, as posix_spawn
// does), instead of a copy of it. A fork copies the page tables (0.4-0.5 ms on the
// paravirtualised VM of bench/results, catatonit's fork costs the same), and write-protects
// every private page, so that each page lastcall writes afterwards costs it one more fault.
// Safe because the spawning thread is suspended until the child's exec or _exit (so the child's
// writes, errno and the LISTEN_PID slot, race nothing: the ledger worker's thread, the only
// other one, touches neither), the child takes no lock (only system calls), and the child runs
// on a stack of its own (g_child_stack): on lastcall's
// stack it would overwrite the frames lastcall returns through. Not under
// AddressSanitizer: its shadow memory would be shared too, and left poisoned by the child's
// frames.
#if defined(__SANITIZE_ADDRESS__)
#define LASTCALL_SHARED_MEMORY_SPAWN 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LASTCALL_SHARED_MEMORY_SPAWN 0
#endif
#endif
#ifndef LASTCALL_SHARED_MEMORY_SPAWN
#define LASTCALL_SHARED_MEMORY_SPAWN 1
#endif

// The child's stack: run_child makes only system calls, a few frames deep (glibc's posix_spawn
// gives its child 32 KiB too).
constexpr std::size_t kChildStack = 32 * 1024;
// Static, not in spawn()'s frame: one buffer serves every spawn (only the loop's thread spawns, and
// CLONE_VFORK holds it until the child has left the buffer by its exec or _exit). In the frame
// it pushed everything spawn() calls 32 KiB further down lastcall's stack, two fresh pages
// (two page faults, ~15 us each on a paravirtualised VM) on every start; here the child touches
// only the buffer's top page.
alignas(16) char g_child_stack[kChildStack];

#if LASTCALL_SHARED_MEMORY_SPAWN && defined(__x86_64__)
// clone3 with a stack of the child's own, on x86-64: the child cannot return from the system
// call into C++ (its stack is empty), so this trampoline calls fn(arg) on the new stack and
// exits with its result. glibc 2.36 has a clone() with a stack but no clone3() for
// CLONE_INTO_CGROUP. fn and arg travel in r8/r9, which the system call preserves (it clobbers
// rax, rcx and r11 only) in both processes. Returns the child's pid or -errno. In a section of
// its own, as -ffunction-sections would put it: the link orders it with the hot functions.
static_assert(SYS_clone3 == 435 && SYS_exit == 60, "x86-64 system call numbers");
extern "C" long lastcall_clone3_on_stack(CloneArgs* args, std::size_t size, int (*fn)(void*),
                                         void* arg);
asm(R"(
    .pushsection .text.lastcall_clone3_on_stack, "ax", @progbits
    .globl lastcall_clone3_on_stack
    .hidden lastcall_clone3_on_stack
    .type lastcall_clone3_on_stack, @function
    .p2align 4
lastcall_clone3_on_stack:
    movq %rdx, %r8
    movq %rcx, %r9
    movl $435, %eax
    syscall
    testq %rax, %rax
    jz 1f
    ret
1:
    xorl %ebp, %ebp
    movq %r9, %rdi
    callq *%r8
    movl %eax, %edi
    movl $60, %eax
    syscall
    hlt
    .size lastcall_clone3_on_stack, .-lastcall_clone3_on_stack
    .popsection
)");

// The child born in the cgroup and sharing lastcall's memory; -1 where the kernel or a seccomp
// filter refuses clone3 (Docker's default profile answers ENOSYS).
pid_t spawn_into_cgroup_sharing_memory(int cgroup_dir_fd, char* stack, ChildArgs& child) {
    CloneArgs args{};
    args.flags = CLONE_VM | CLONE_VFORK | kCloneIntoCgroup;
    args.exit_signal = SIGCHLD;
    args.stack = reinterpret_cast<std::uint64_t>(stack);
    args.stack_size = kChildStack;
    args.cgroup = static_cast<std::uint64_t>(cgroup_dir_fd);
    long r = lastcall_clone3_on_stack(&args, sizeof args, child_main, &child);
    return r < 0 ? -1 : static_cast<pid_t>(r);
}
#else
pid_t spawn_into_cgroup_sharing_memory(int, char*, ChildArgs&) {
    return -1;
}
#endif

// Without a cgroup to be born in: glibc's clone() switches to the child's stack itself, on
// every architecture. -1 if it fails; the caller then forks.
pid_t spawn_sharing_memory(char* stack, ChildArgs& child) {
    if (!LASTCALL_SHARED_MEMORY_SPAWN) return -1;
    return ::clone(child_main, stack + kChildStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &child);
}

}  // namespace

std::vector<std::string> command_candidates(const std::string& name,
                                            const std::vector<std::string>& env) {
    if (name.find('/') != std::string::npos) return {name};
    // Unset: the usual directories. Set but empty: one empty entry, the working directory, as
    // execvp (and so tini and dumb-init) reads it.
    bool has_path = std::any_of(env.begin(), env.end(),
                                [](const std::string& kv) { return kv.rfind("PATH=", 0) == 0; });
    std::string path = has_path ? env_lookup(env, "PATH")
                                : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find(':', start);
        if (end == std::string::npos) end = path.size();
        std::string dir = path.substr(start, end - start);
        if (dir.empty()) dir = ".";
        out.push_back(dir + "/" + name);
        start = end + 1;
    }
    return out;
}

namespace {

// What the child is handed, built before the fork: the child must not allocate. Neither copied
// nor moved: the pointers point into the strings.
struct ExecVectors {
    explicit ExecVectors(const SpawnSpec& spec);
    ExecVectors(const ExecVectors&) = delete;
    ExecVectors& operator=(const ExecVectors&) = delete;

    std::vector<std::string> candidates;
    std::vector<char*> candidate_ptrs;
    std::vector<char*> argv;
    std::vector<char*> shell_argv;
    std::vector<char*> envp;
    std::string listen_pid;
    char* listen_pid_slot = nullptr;
};

ExecVectors::ExecVectors(const SpawnSpec& spec) {
    // Only the candidates are computed here, as root; which of them exists and may be executed
    // is decided in the child, under the unit's own credentials.
    candidates = command_candidates(spec.argv[0], spec.env);
    for (auto& c : candidates) candidate_ptrs.push_back(c.data());

    // Build argv/envp before fork: the child must not allocate.
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    static char kShell[] = "/bin/sh";
    shell_argv = {kShell, nullptr};  // [1]: the script, set by the child
    shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
    // The environment as given (execve does not write to it), except for LISTEN_PID, whose
    // slot the child fills in with its own pid.
    envp.reserve(spec.env.size() + 2);
    for (const auto& kv : spec.env)
        if (!(spec.set_listen_pid && kv.rfind("LISTEN_PID=", 0) == 0))
            envp.push_back(const_cast<char*>(kv.c_str()));
    if (spec.set_listen_pid) {
        listen_pid = "LISTEN_PID=" + std::string(22, '\0');
        envp.push_back(listen_pid.data());
        listen_pid_slot = listen_pid.data() + 11;
    }
    envp.push_back(nullptr);
}

// The child reported the step that failed before its exec, and exited: reaped here, and its
// report said as a SpawnFailure.
SpawnFailure failed_spawn(const ChildReport& report, pid_t pid, const SpawnSpec& spec,
                          const std::vector<std::string>& candidates) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    // The failed step's own object: the directory for chdir, else the program.
    std::string about =
        static_cast<SpawnStage>(report.stage) == SpawnStage::Chdir ? spec.workdir
        : report.candidate >= 0 && static_cast<std::size_t>(report.candidate) < candidates.size()
            ? candidates[static_cast<std::size_t>(report.candidate)]
            : spec.argv[0];
    SpawnFailure failure{static_cast<SpawnStage>(report.stage), report.err, about, {}};
    if (failure.stage == SpawnStage::Exec && report.err == ENOENT)
        explain_missing_interpreter(failure, candidates);
    return failure;
}

}  // namespace

SpawnResult spawn(const SpawnSpec& spec) {
    SpawnResult result;
    if (spec.argv.at(0).empty()) {
        result.failure = SpawnFailure{SpawnStage::Exec, ENOENT, spec.argv[0], {}};
        return result;
    }
    ExecVectors exec(spec);

    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
        result.error = sys_error("pipe2", errno);
        return result;
    }
    UniqueFd report_read(pipefd[0]), report_write(pipefd[1]);
    pid_t parent = ::getpid();
    const SignalBits& ignored = ignored_dispositions();  // read here: the child must not allocate
    ChildArgs in_child{&spec,
                       exec.candidate_ptrs.data(),
                       exec.candidate_ptrs.size(),
                       exec.argv.data(),
                       exec.shell_argv.data(),
                       exec.envp.data(),
                       exec.listen_pid_slot,
                       report_write.get(),
                       parent,
                       false,
                       &ignored};
    bool born_in_cgroup = false;
    pid_t pid = -1;
    if (spec.cgroup_fd >= 0) {
        // clone3(CLONE_INTO_CGROUP): the child is created inside the cgroup. Migrating it
        // afterwards (a write to cgroup.procs) waits for an RCU grace period: milliseconds on
        // every start. Kernels or sandboxes without it (Docker's seccomp profile answers
        // ENOSYS) fall back below to clone(CLONE_VM|CLONE_VFORK) or fork, and the child moves
        // itself with an openat of cgroup.procs and a write.
        in_child.born_in_cgroup = true;
        pid = spawn_into_cgroup_sharing_memory(spec.cgroup_fd, g_child_stack, in_child);
        if (pid < 0) pid = clone_into_cgroup(spec.cgroup_fd);
        if (pid == 0) child_main(&in_child);  // in a copy of lastcall's memory
        born_in_cgroup = pid >= 0;
        in_child.born_in_cgroup = born_in_cgroup;
    }
    if (!born_in_cgroup) {
        pid = spawn_sharing_memory(g_child_stack, in_child);
        if (pid < 0) pid = ::fork();
        if (pid == 0) child_main(&in_child);  // in a copy of lastcall's memory
    }
    if (pid < 0) {
        result.error = sys_error("fork " + spec.argv[0], errno);
        return result;
    }
    report_write.reset();

    ChildReport report{};
    ssize_t n;
    do {
        n = ::read(report_read.get(), &report, sizeof report);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof report)) {
        result.failure = failed_spawn(report, pid, spec, exec.candidates);
        return result;
    }
    Spawned child;
    child.pid = pid;
    // The child is not reaped until lastcall waits for it, so this pid cannot have been reused.
    child.pidfd.reset(pidfd_open(pid));
    result.child = std::move(child);
    return result;
}

}  // namespace lastcall
