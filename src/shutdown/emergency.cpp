// SPDX-License-Identifier: Apache-2.0
#include "lastcall/shutdown/emergency.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "lastcall/core/safe_path.hpp"

namespace lastcall {

namespace {

// Fixed storage, filled at set-up: nothing here allocates once the emergency runs. What every
// start writes comes first (the fields, then a cgroup path of some 60 bytes): the buffers after
// it stay unwritten, and a start without --report writes one page of the plan instead of two.
struct Plan {
    // The report's directory, opened at set-up the way every other write as root reaches it
    // (open_dir_safely: no link followed), and the two names in it. The emergency writes through
    // it: by a path, a link the app planted at the fixed temporary name made root truncate any
    // file, and a FIFO there blocked the teardown for good.
    int report_dir_fd = -1;
    int cgroup_kill_fd = -1;
    pid_t main_pid = -1;
    bool main_reaped = false;
    bool running = false;
    int main_status = 0;
    char cgroup_dir[PATH_MAX] = {};
    char report_name[NAME_MAX + 1] = {};
    char report_tmp[NAME_MAX + 32] = {};
    char json[2048] = {};
};

Plan g_plan;

void say(const char* text) noexcept {
    ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
    (void)n;
}

// ppid of /proc/PID/stat, or -1; the comm field may hold spaces and parentheses, so the last ')'.
pid_t parent_of(const char* pid) noexcept {
    char path[300];  // d_name is at most 255 bytes
    std::snprintf(path, sizeof path, "/proc/%.255s/stat", pid);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[1024];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    char* close_paren = std::strrchr(buf, ')');
    if (!close_paren) return -1;
    char state = 0;
    int ppid = -1;
    if (std::sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2) return -1;
    return ppid;
}

// SIGKILL to every live child of lastcall: they are unreaped, so their pids cannot be reused.
void kill_children() noexcept {
    int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    pid_t self = ::getpid();
    alignas(8) char buf[8192];
    for (;;) {
        long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            auto* d = reinterpret_cast<struct dirent64*>(buf + off);
            off += d->d_reclen;
            if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
            if (parent_of(d->d_name) == self)
                ::kill(static_cast<pid_t>(std::atoi(d->d_name)), SIGKILL);
        }
    }
    ::close(dir);
}

int exit_code_of_status(int st) noexcept {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return kEmergencyExit;
}

void terminate_handler() {
    const char* what = "std::terminate";
    // The exception in flight, if any, names the cause (rethrow and catch need no allocation
    // beyond what the in-flight exception already holds).
    try {
        if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
        what = e.what();
    } catch (...) {
    }
    ::_exit(emergency_teardown(what));
}

}  // namespace

namespace {

// dst = a + b, or empty (false) if that does not fit: a cut path would name another file. Not
// snprintf: it is the only printf of a plain start, and would map glibc's vfprintf for it.
template <std::size_t N>
bool copy_joined(char (&dst)[N], std::string_view a, std::string_view b = {}) {
    if (a.size() + b.size() >= N) {
        dst[0] = '\0';
        return false;
    }
    // string_view::copy, not memcpy: an empty view's data() may be null, and memcpy from null
    // is undefined even for no bytes (UBSan stopped the sanitized suite on it).
    std::size_t n = a.copy(dst, a.size());
    n += b.copy(dst + n, b.size());
    dst[n] = '\0';
    return true;
}

}  // namespace

void emergency_prepare(const char* report_path, const char* cgroup_dir) {
    if (report_path && *report_path) {
        std::string path(report_path);
        auto slash = path.rfind('/');
        std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
        std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
        static constexpr char kSuffix[] = ".emergency.tmp";
        static_assert(sizeof kSuffix - 1 <= kLongestTempSuffix, "check_output_dir allows for it");
        auto fd = open_dir_safely(dir);
        if (fd && name.size() <= NAME_MAX) {
            if (g_plan.report_dir_fd >= 0) ::close(g_plan.report_dir_fd);
            g_plan.report_dir_fd = fd->release();
            copy_joined(g_plan.report_name, name);
            copy_joined(g_plan.report_tmp, name, kSuffix);
        }
    }
    // The instance's cgroup (all its units below it): cgroup.kill there ends every one of them.
    if (cgroup_dir && *cgroup_dir) {
        // Opened now, while allocating is fine (the path is a heap string, not another 4 KiB
        // of stack on a start's deepest frame): the teardown only writes to the fd.
        if (g_plan.cgroup_kill_fd >= 0) ::close(g_plan.cgroup_kill_fd);
        g_plan.cgroup_kill_fd =
            copy_joined(g_plan.cgroup_dir, cgroup_dir)
                ? ::open((std::string(cgroup_dir) + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC)
                : -1;
    }
}

void emergency_main_started(pid_t pid) {
    g_plan.main_pid = pid;
}

void emergency_main_reaped(int wait_status) {
    g_plan.main_reaped = true;
    g_plan.main_status = wait_status;
}

int emergency_teardown(const char* what) noexcept {
    if (g_plan.running) return kEmergencyExit;  // a failure inside the teardown itself
    g_plan.running = true;
    say("lastcall: emergency teardown: ");
    say(what ? what : "unknown error");
    say(": killing the whole tree\n");
    if (g_plan.cgroup_kill_fd >= 0) {
        ssize_t n = ::write(g_plan.cgroup_kill_fd, "1", 1);
        (void)n;
    }
    if (::getpid() == 1)
        ::kill(-1, SIGKILL);
    else if (g_plan.main_pid > 0 && !g_plan.main_reaped)
        ::kill(-g_plan.main_pid, SIGKILL);
    // Kill and reap until no child is left: each killed child's orphans are reparented to
    // lastcall (PID 1 or a subreaper) and killed on the next pass. Bounded: a process that
    // SIGKILL cannot end (D state) is left after 5 s rather than hang the exit.
    timespec start{}, now{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    int reaped = 0;
    for (;;) {
        kill_children();
        int st = 0;
        pid_t pid;
        bool none_left = false;
        while ((pid = ::waitpid(-1, &st, WNOHANG)) != 0) {
            if (pid < 0) {
                none_left = errno == ECHILD;
                break;
            }
            ++reaped;
            if (pid == g_plan.main_pid) emergency_main_reaped(st);
        }
        if (none_left) break;
        ::clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= 5) {
            say("lastcall: emergency teardown: processes survived SIGKILL for 5s; leaving them\n");
            break;
        }
        timespec pause{0, 5'000'000};
        ::nanosleep(&pause, nullptr);
    }
    if (g_plan.cgroup_dir[0]) ::rmdir(g_plan.cgroup_dir);
    int code = g_plan.main_reaped ? exit_code_of_status(g_plan.main_status) : kEmergencyExit;
    if (g_plan.report_dir_fd >= 0) {
        // Minimal, from fixed storage: what happened and how it ended. `what` is escaped only of
        // the characters JSON forbids; exception texts are short ASCII.
        char reason[256];
        std::size_t r = 0;
        for (const char* p = what ? what : ""; *p && r + 1 < sizeof reason; ++p)
            reason[r++] =
                (*p == '"' || *p == '\\' || static_cast<unsigned char>(*p) < 0x20) ? '?' : *p;
        reason[r] = '\0';
        int n = std::snprintf(g_plan.json, sizeof g_plan.json,
                              "{\"schema\":1,\"lastcall_pid\":%d,\"emergency\":true,"
                              "\"reason\":\"%s\",\"verdict\":\"forced\",\"main_reaped\":%s,"
                              "\"reaped_in_teardown\":%d,\"exit_code\":%d}\n",
                              static_cast<int>(::getpid()), reason,
                              g_plan.main_reaped ? "true" : "false", reaped, code);
        // Whatever sits at the temporary name goes (unlinkat removes a link, never its target),
        // then a file of our own: O_EXCL | O_NOFOLLOW refuses anything planted meanwhile, and
        // O_NONBLOCK keeps a FIFO from blocking the open.
        int dir = g_plan.report_dir_fd;
        ::unlinkat(dir, g_plan.report_tmp, 0);
        int fd = ::openat(dir, g_plan.report_tmp,
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        bool ok = fd >= 0 && n > 0 && ::write(fd, g_plan.json, static_cast<std::size_t>(n)) == n &&
                  ::fsync(fd) == 0;
        if (fd >= 0) ::close(fd);
        if (ok) ok = ::renameat(dir, g_plan.report_tmp, dir, g_plan.report_name) == 0;
        if (ok) ::fsync(dir);
        if (!ok) say("lastcall: emergency teardown: the report was not written\n");
    }
    say("lastcall: emergency teardown done\n");
    return code;
}

void emergency_install_terminate_handler() {
    std::set_terminate(terminate_handler);
}

}  // namespace lastcall
