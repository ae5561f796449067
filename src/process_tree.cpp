#include "lastcall/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

namespace lastcall {

namespace {

std::string read_small_file(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return {};
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
}

std::vector<pid_t> numeric_entries(const std::string& dir) {
    std::vector<pid_t> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        long v = std::strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
    }
    ::closedir(d);
    return out;
}

// A zombie has already exited: there is nothing left to signal, only a status to reap.
bool alive(const ProcInfo& p) { return p.state != 'Z' && p.state != 'X'; }

bool have_proc_children() {
    static const bool have = [] {
        std::string p = "/proc/self/task/" + std::to_string(::getpid()) + "/children";
        return ::access(p.c_str(), R_OK) == 0;
    }();
    return have;
}

// Sends sig to the process (pid, start) through a pidfd. Checking the start time *after*
// pidfd_open proves the pidfd refers to the process we enumerated, not a successor on that pid.
bool signal_exact(const ProcInfo& p, int sig) {
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0)));
    if (!pidfd) {
        // Out of descriptors (someone lowered RLIMIT_NOFILE under us): a plain kill() is better
        // than leaving the tree running. The pid was seen alive a moment ago; reuse within that
        // window would need the whole pid space to wrap.
        if (errno == EMFILE || errno == ENFILE) return ::kill(p.pid, sig) == 0;
        return false;  // already gone (and reaped)
    }
    auto now = read_proc_stat(p.pid);
    if (!now || now->start != p.start) return false;
    return ::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0) == 0;
}

class ProcTracker final : public Tracker {
public:
    std::string_view name() const override { return "proc"; }
    std::vector<ProcInfo> members() override { return descendants_of(::getpid()); }
};

class CgroupTracker final : public Tracker {
public:
    CgroupTracker(std::string dir, UniqueFd procs, UniqueFd events)
        : dir_(std::move(dir)), procs_(std::move(procs)), events_(std::move(events)) {}
    ~CgroupTracker() override { (void)remove(); }

    std::string_view name() const override { return "cgroup"; }

    std::vector<ProcInfo> members() override {
        std::vector<ProcInfo> out;
        std::istringstream in(read_small_file(dir_ + "/cgroup.procs"));
        pid_t pid;
        while (in >> pid)
            if (auto info = read_proc_stat(pid); info && alive(*info)) out.push_back(*info);
        return out;
    }

    int kill_all(const MemberFilter& filter) override {
        // The kill goes first: one write ends every member, including any forked meanwhile
        // (cgroup.kill holds off forks for its duration), and 10,000 members must not wait for
        // 10,000 /proc reads. Then the list is read for the record: members still listed were
        // alive when SIGKILL went out; those already gone are recorded when they are reaped.
        UniqueFd kill(::open((dir_ + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
        if (!kill || ::write(kill.get(), "1", 1) != 1) return Tracker::kill_all(filter);
        int n = 0;
        for (const auto& p : members())
            if (filter(p)) ++n;
        return n;
    }

    int spawn_cgroup_fd() const override { return procs_.get(); }
    int watch_fd() const override { return events_.get(); }
    void consume_watch() override {
        // kernfs re-arms the notification when the file is read again.
        char buf[256];
        [[maybe_unused]] auto n = ::pread(events_.get(), buf, sizeof buf, 0);
    }

    bool populated() override {
        std::string events = read_small_file(dir_ + "/cgroup.events");
        return events.find("populated 1") != std::string::npos;
    }

    Status remove() override {
        if (removed_) return Ok{};
        procs_.reset();
        events_.reset();
        if (::rmdir(dir_.c_str()) != 0 && errno != ENOENT)
            return sys_error("rmdir " + dir_, errno);
        removed_ = true;
        return Ok{};
    }

private:
    std::string dir_;
    UniqueFd procs_;
    UniqueFd events_;
    bool removed_ = false;
};

Result<std::unique_ptr<Tracker>> make_cgroup_tracker(const std::string& name_hint) {
    auto base = own_cgroup_dir();
    if (!base) return base.error();
    std::string dir = *base + "/" + name_hint;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("mkdir " + dir, errno);
    if (::access((dir + "/cgroup.kill").c_str(), W_OK) != 0) {
        int err = errno;
        ::rmdir(dir.c_str());
        return sys_error("cgroup.kill in " + dir + " (kernel older than 5.14?)", err);
    }
    UniqueFd procs(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!procs) {
        int err = errno;
        ::rmdir(dir.c_str());
        return sys_error("open " + dir + "/cgroup.procs", err);
    }
    // cgroup.events signals a change of "populated" to pollers with EPOLLPRI (kernfs_notify):
    // no polling. A plain fd, not inotify: closing an inotify instance waits for an SRCU grace
    // period, which cost ~10 ms on every exit.
    UniqueFd events(::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
    if (!events) {
        int err = errno;
        ::rmdir(dir.c_str());
        return sys_error("open " + dir + "/cgroup.events", err);
    }
    return std::unique_ptr<Tracker>(new CgroupTracker(dir, std::move(procs), std::move(events)));
}

}  // namespace

std::optional<ProcInfo> read_proc_stat(pid_t pid) {
    std::string s = read_small_file("/proc/" + std::to_string(pid) + "/stat");
    // comm may contain spaces and parentheses: it ends at the *last* ')'.
    auto open = s.find('('), close = s.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
    ProcInfo info;
    info.pid = pid;
    info.comm = s.substr(open + 1, close - open - 1);
    std::istringstream rest(s.substr(close + 2));
    std::string state;
    long ppid, pgrp, session, field;
    rest >> state >> ppid >> pgrp >> session;
    // Fields 7..21 sit between session (6) and starttime (22).
    for (int i = 7; i <= 21; ++i) rest >> field;
    unsigned long long start = 0;
    rest >> start;
    if (!rest) return std::nullopt;
    info.state = state.empty() ? '?' : state[0];
    info.ppid = static_cast<pid_t>(ppid);
    info.pgid = static_cast<pid_t>(pgrp);
    info.sid = static_cast<pid_t>(session);
    info.start = start;
    return info;
}

std::string read_cmdline(pid_t pid) {
    std::string s = read_small_file("/proc/" + std::to_string(pid) + "/cmdline");
    while (!s.empty() && s.back() == '\0') s.pop_back();
    for (char& c : s)
        if (c == '\0') c = ' ';
    return s;
}

std::vector<ProcInfo> descendants_of(pid_t root) {
    std::vector<ProcInfo> out;
    if (have_proc_children()) {
        std::vector<pid_t> stack{root};
        std::set<pid_t> seen{root};
        while (!stack.empty()) {
            pid_t p = stack.back();
            stack.pop_back();
            for (pid_t tid : numeric_entries("/proc/" + std::to_string(p) + "/task")) {
                std::istringstream in(read_small_file("/proc/" + std::to_string(p) + "/task/" +
                                                      std::to_string(tid) + "/children"));
                pid_t c;
                while (in >> c) {
                    if (!seen.insert(c).second) continue;
                    if (auto info = read_proc_stat(c); info && alive(*info)) out.push_back(*info);
                    stack.push_back(c);
                }
            }
        }
        return out;
    }
    // Without the children files: one pass over /proc builds the parent map.
    std::multimap<pid_t, ProcInfo> by_parent;
    for (pid_t pid : numeric_entries("/proc"))
        if (auto info = read_proc_stat(pid)) by_parent.emplace(info->ppid, *info);
    std::vector<pid_t> stack{root};
    while (!stack.empty()) {
        pid_t p = stack.back();
        stack.pop_back();
        auto [lo, hi] = by_parent.equal_range(p);
        for (auto it = lo; it != hi; ++it) {
            if (alive(it->second)) out.push_back(it->second);
            stack.push_back(it->second.pid);
        }
    }
    return out;
}

int Tracker::signal_all(int sig, const MemberFilter& filter, int max_passes) {
    int total = 0;
    for (int pass = 0; pass < max_passes; ++pass) {
        int signalled = 0;
        for (const auto& p : members()) {
            if (!filter(p)) continue;
            if (signal_exact(p, sig)) ++signalled;
        }
        total += signalled;
        if (signalled == 0) break;
    }
    return total;
}

namespace {

// The next space-separated word of `line` from `pos` (mountinfo escapes spaces inside a field).
std::string_view next_word(std::string_view line, std::size_t& pos) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    std::size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view word = line.substr(pos, end - pos);
    pos = end;
    return word;
}

}  // namespace

Result<std::string> own_cgroup_dir() {
    // Plain string_view scanning: this runs on every start, and string streams cost ~100,000
    // instructions here (callgrind, bench/results/2026-12-03.md).
    // "0::/path" is the cgroup2 line of /proc/self/cgroup.
    std::string rel;
    {
        std::string text = read_small_file("/proc/self/cgroup");
        std::string_view rest(text);
        while (!rest.empty()) {
            std::size_t nl = rest.find('\n');
            std::string_view line = rest.substr(0, nl);
            rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
            if (line.starts_with("0::")) rel = std::string(line.substr(3));
        }
    }
    if (rel.empty()) return Error{"no cgroup2 entry in /proc/self/cgroup"};
    // mountinfo: id parent major:minor root mountpoint options... - fstype source superopts
    std::string text = read_small_file("/proc/self/mountinfo");
    std::string_view rest(text);
    while (!rest.empty()) {
        std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        auto dash = line.find(" - ");
        if (dash == std::string_view::npos) continue;
        std::size_t tail = dash + 3;
        if (next_word(line, tail) != "cgroup2") continue;
        std::size_t head = 0;
        for (int i = 0; i < 3; ++i) next_word(line, head);  // id, parent, major:minor
        std::string root(next_word(line, head));
        std::string mountpoint(next_word(line, head));
        // The mount shows the hierarchy from `root` down; our path must be inside it.
        if (root != "/" && rel.rfind(root, 0) != 0) continue;
        std::string inside = root == "/" ? rel : rel.substr(root.size());
        if (inside == "/") inside.clear();
        return mountpoint + inside;
    }
    return Error{"no cgroup2 filesystem in /proc/self/mountinfo"};
}

Result<TrackerChoice> make_tracker(TrackerKind kind, const std::string& name_hint) {
    if (kind != TrackerKind::Proc) {
        auto cg = make_cgroup_tracker(name_hint);
        if (cg) {
            auto reason = kind == TrackerKind::Cgroup ? std::string("requested")
                                                      : std::string("writable cgroup2 hierarchy");
            return TrackerChoice{std::move(*cg), reason};
        }
        if (kind == TrackerKind::Cgroup) return Error{"--tracker cgroup: " + cg.error().message};
        return TrackerChoice{std::make_unique<ProcTracker>(),
                             "no usable cgroup2 (" + cg.error().message + ")"};
    }
    return TrackerChoice{std::make_unique<ProcTracker>(), "requested"};
}

bool reap_all(const std::function<bool(pid_t)>& want_info,
              const std::function<void(const Reaped&)>& on_reaped) {
    for (;;) {
        pid_t pid;
        std::optional<ProcInfo> info;
        if (want_info) {
            // Peek first (WNOWAIT) so /proc/<pid>/stat of the zombie can still be read.
            siginfo_t si{};
            if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
                if (errno == EINTR) continue;
                return errno == ECHILD;
            }
            if (si.si_pid == 0) return false;
            pid = si.si_pid;
            if (want_info && want_info(pid)) info = read_proc_stat(pid);
        } else {
            pid = -1;
        }
        int status = 0;
        pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno == ECHILD;
        }
        if (got == 0) return false;
        on_reaped(Reaped{got, status, std::move(info)});
    }
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 255;
}

Status become_subreaper() {
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        return sys_error("prctl(PR_SET_CHILD_SUBREAPER)", errno);
    return Ok{};
}

}  // namespace lastcall
