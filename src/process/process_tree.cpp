// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/process_tree.hpp"
#include "lastcall/core/signals.hpp"

#include "lastcall/core/read_file.hpp"
#include "lastcall/process/process_ref.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

namespace lastcall {

namespace {

// Out of memory is not "nothing there": a /proc or cgroup listing that failed for lack of memory
// would make a live tree look empty, and lastcall would stop waiting for processes it never
// signalled. It becomes std::bad_alloc, which the emergency teardown handles (cgroup.kill or
// SIGKILL to every pid, reap, a minimal report).
void throw_if_out_of_memory(int err) {
    if (err == ENOMEM) throw std::bad_alloc();
}

// "12 345 6789 ": the pids of a children file or of cgroup.procs, without a string stream (a
// walk parses one such file per process).
std::vector<pid_t> parse_pids(std::string_view text) {
    std::vector<pid_t> out;
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
        if (*p < '0' || *p > '9') {
            ++p;
            continue;
        }
        pid_t pid = 0;
        auto [next, ec] = std::from_chars(p, end, pid);
        if (ec == std::errc{}) out.push_back(pid);
        p = next;
    }
    return out;
}

// A /proc or cgroup file: empty when the process or cgroup is gone (or was never ours to read).
std::string read_kernel_file(const std::string& path) {
    auto text = read_file(path);
    if (text) return std::move(*text);
    throw_if_out_of_memory(text.error().code);
    return {};
}

template <typename F>
void for_each_entry(const std::string& dir, F&& f) {
    // Closed however the walk ends: a callback may throw (out of memory, read_kernel_file).
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
    if (!d) {
        throw_if_out_of_memory(errno);
        return;
    }
    while (dirent* e = ::readdir(d.get())) f(*e);
}

std::vector<pid_t> numeric_entries(const std::string& dir) {
    std::vector<pid_t> out;
    for_each_entry(dir, [&](const dirent& e) {
        char* end = nullptr;
        long v = std::strtol(e.d_name, &end, 10);
        if (end != e.d_name && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
    });
    return out;
}

bool have_proc_children() {
    static const bool have = [] {
        std::string p = "/proc/self/task/" + std::to_string(::getpid()) + "/children";
        return ::access(p.c_str(), R_OK) == 0;
    }();
    return have;
}

// Every live process listed in `dir`/cgroup.procs and in the cgroup.procs of every cgroup below
// it: membership of a scope is recursive, so a process moved into a sub-cgroup is still a member.
void cgroup_members(const std::string& dir, std::vector<ProcInfo>& out, std::set<pid_t>& seen) {
    for (pid_t pid : parse_pids(read_kernel_file(dir + "/cgroup.procs")))
        if (seen.insert(pid).second)
            if (auto info = read_proc_stat(pid); info && is_alive(*info)) out.push_back(*info);
    for_each_entry(dir, [&](const dirent& e) {
        if (e.d_type == DT_DIR && e.d_name[0] != '.')
            cgroup_members(dir + "/" + e.d_name, out, seen);
    });
}

// How many processes the subtree holds: pids only, no /proc reads (cheap for 10,000). Read just
// before a cgroup.kill, it is the count of processes the kill reaches: the list read after the
// kill misses those the kernel has already taken out of the cgroup (an exiting task leaves
// cgroup.procs at once), and a log line "SIGKILL to 0" for a kill that ended a process is wrong.
std::size_t cgroup_pid_count(const std::string& dir) {
    std::size_t n = parse_pids(read_kernel_file(dir + "/cgroup.procs")).size();
    for_each_entry(dir, [&](const dirent& e) {
        if (e.d_type == DT_DIR && e.d_name[0] != '.') n += cgroup_pid_count(dir + "/" + e.d_name);
    });
    return n;
}

// Leaves first: a cgroup with children cannot be removed (EBUSY). The rmdir is tried first, and
// the directory listed only when it fails: a cgroup usually has no child left by now, and the
// listing (opendir's 32 KiB buffer, five system calls) ran twice on every exit.
Status remove_cgroup_tree(const std::string& dir) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return Ok{};
    if (errno != EBUSY) return sys_error("rmdir " + dir, errno);
    for_each_entry(dir, [&](const dirent& e) {
        if (e.d_type == DT_DIR && e.d_name[0] != '.')
            (void)remove_cgroup_tree(dir + "/" + e.d_name);
    });
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return sys_error("rmdir " + dir, errno);
    return Ok{};
}

// cgroup.kill SIGKILLs every process of the cgroup and of its descendants, and holds off forks
// while it does: nothing can escape it. False where the kernel lacks it (before 5.14).
bool write_cgroup_kill(const std::string& dir) {
    UniqueFd kill(::open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
    return kill && ::write(kill.get(), "1", 1) == 1;
}

// cgroup.kill passes over a process whose leader thread has exited (state Z) while its other
// threads run: the kernel's iterator lists it in cgroup.procs, but the kill skips the dead leader
// task. A signal to the process through its pidfd reaches the whole thread group.
void kill_zombie_leader(const ProcInfo& p) {
    if (p.state == 'Z') signal_exact(p, SIGKILL);
}

// How long a freeze may take to settle before the stop signal goes out anyway. A member in
// uninterruptible sleep (D: disk, NFS) freezes only when it wakes; the stop must not wait on it.
// Without a complete freeze the passes of the stop primitive close the fork race as before.
constexpr std::chrono::milliseconds kFreezeWait{100};

// Writes "1" to dir/cgroup.freeze and waits, bounded, for cgroup.events to say "frozen 1".
// The kernel notifies pollers of cgroup.events with POLLPRI, but at most once per 10 ms per file
// (CGROUP_FILE_NOTIFY_MIN_INTV): a change within 10 ms of the last notification (the populated
// one at the spawn, the previous freeze) is announced only when that window ends. A freeze
// settles in 50-200 us, and the notification came 10-12 ms later: the main child's stop signal,
// sent frozen, waited for it (8 ms of forward latency against the peers' 0.2 ms). So the file is
// also read again after a short timeout that doubles from 50 us; the notification only ends a
// longer wait sooner.
FreezeHold freeze_cgroup(const std::string& dir) {
    UniqueFd freeze(::open((dir + "/cgroup.freeze").c_str(), O_RDWR | O_CLOEXEC));
    if (!freeze) return {};
    char was = '0';
    // Frozen by someone else (an operator, a checkpoint): the members are already held still;
    // leave the freeze as it is, and the thaw to whoever set it.
    if (::pread(freeze.get(), &was, 1, 0) == 1 && was == '1') return FreezeHold({}, true);
    if (::pwrite(freeze.get(), "1", 1, 0) != 1) return {};
    UniqueFd events(::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
    bool frozen = false;
    auto deadline = std::chrono::steady_clock::now() + kFreezeWait;
    std::chrono::nanoseconds recheck = std::chrono::microseconds(50);
    while (events) {
        // Reading the file re-arms its notification; the poll after it cannot miss the change.
        char buf[256];
        ssize_t n = ::pread(events.get(), buf, sizeof buf - 1, 0);
        if (n <= 0) break;
        buf[n] = '\0';
        if ((frozen = std::strstr(buf, "frozen 1") != nullptr)) break;
        auto left = deadline - std::chrono::steady_clock::now();
        if (left.count() <= 0) break;
        auto wait = std::min<std::chrono::nanoseconds>(left, recheck);
        recheck = std::min<std::chrono::nanoseconds>(recheck * 2, std::chrono::milliseconds(5));
        timespec ts{static_cast<time_t>(wait.count() / 1'000'000'000),
                    static_cast<long>(wait.count() % 1'000'000'000)};
        pollfd pfd{events.get(), POLLPRI, 0};
        if (::ppoll(&pfd, 1, &ts, nullptr) < 0 && errno != EINTR) break;
    }
    return FreezeHold(std::move(freeze), frozen);
}

int kill_each(const std::vector<ProcInfo>& members, const MemberFilter& record) {
    int n = 0;
    for (const auto& p : members) {
        if (!record(p)) continue;
        if (signal_exact(p, SIGKILL)) ++n;
    }
    return n;
}

// Without cgroups: a unit is its leader's descendants, its session (units are spawned with
// setsid) or process group (probes), and whatever was once seen as a member and is still alive with
// the same start time (an orphan reparented to lastcall is no longer the leader's descendant), plus
// their descendants. A process that both left the session and lost its parent before it was ever
// seen is not attributed to the unit; the whole-tree stop still reaches it.
class ProcScope final : public UnitScope {
  public:
    std::string_view kind() const override { return "proc"; }
    void started(pid_t leader) override { leader_ = sid_ = leader; }

    std::vector<ProcInfo> members() override {
        std::vector<ProcInfo> out;
        if (leader_ <= 0) return out;
        auto tree = descendants_of(::getpid());
        std::map<pid_t, const ProcInfo*> by_pid;
        std::multimap<pid_t, const ProcInfo*> by_parent;
        for (const auto& p : tree) {
            by_pid[p.pid] = &p;
            by_parent.emplace(p.ppid, &p);
        }
        std::set<pid_t> chosen;
        std::vector<pid_t> stack;
        auto take = [&](const ProcInfo& p) {
            if (!chosen.insert(p.pid).second) return;
            out.push_back(p);
            stack.push_back(p.pid);
        };
        if (auto it = by_pid.find(leader_); it != by_pid.end()) take(*it->second);
        // The leader's session (a unit spawned with setsid) or its process group (a probe,
        // spawned as a group leader in lastcall's session): after the leader's reap, the group
        // is how its background children are still found. Neither number can name another
        // process while a member of that session or group lives (the kernel keeps it in use).
        for (const auto& p : tree)
            if (p.sid == sid_ || p.pgid == sid_) take(p);
        for (const auto& [pid, start] : known_)
            if (auto it = by_pid.find(pid); it != by_pid.end() && it->second->start == start)
                take(*it->second);
        while (!stack.empty()) {
            pid_t p = stack.back();
            stack.pop_back();
            auto [lo, hi] = by_parent.equal_range(p);
            for (auto it = lo; it != hi; ++it) take(*it->second);
        }
        known_.clear();
        for (const auto& p : out) known_.insert({p.pid, p.start});
        return out;
    }

    int kill(const MemberFilter& record) override { return kill_each(members(), record); }

  private:
    pid_t leader_ = -1;
    pid_t sid_ = -1;
    std::set<std::pair<pid_t, unsigned long long>> known_;
};

class CgroupScope final : public UnitScope {
  public:
    CgroupScope(std::string dir, UniqueFd dir_fd)
        : dir_(std::move(dir)), dir_fd_(std::move(dir_fd)) {}
    ~CgroupScope() override { (void)remove(); }

    std::string_view kind() const override { return "cgroup"; }
    int spawn_cgroup_fd() const override { return dir_fd_.get(); }
    FreezeHold freeze() override { return freeze_cgroup(dir_); }

    std::vector<ProcInfo> members() override {
        std::vector<ProcInfo> out;
        std::set<pid_t> seen;
        cgroup_members(dir_, out, seen);
        return out;
    }

    int kill(const MemberFilter& record) override {
        // The kill covers the subtree; the list read after it is the record (the members it
        // still shows), the pid count read just before it is how many it reached.
        std::size_t reached = cgroup_pid_count(dir_);
        if (!write_cgroup_kill(dir_)) return kill_each(members(), record);
        int n = 0;
        for (const auto& p : members())
            if (record(p)) {
                ++n;
                kill_zombie_leader(p);
            }
        return std::max(n, static_cast<int>(reached));
    }

    Status remove() override {
        if (removed_) return Ok{};
        dir_fd_.reset();
        // EBUSY: a member is still there (or its exit is not accounted yet); the instance's
        // removal at exit, after every process is reaped, takes it with the rest.
        if (auto st = remove_cgroup_tree(dir_); !st) return st;
        removed_ = true;
        return Ok{};
    }

  private:
    std::string dir_;
    UniqueFd dir_fd_;  // for the spawn: CLONE_INTO_CGROUP, or openat of its cgroup.procs
    bool removed_ = false;
};

class ProcTracker final : public Tracker {
  public:
    std::string_view name() const override { return "proc"; }
    std::vector<ProcInfo> members() override { return descendants_of(::getpid()); }
    std::vector<ProcInfo> members_within(const std::function<bool()>& out_of_time) override {
        return descendants_of(::getpid(), out_of_time);
    }
    std::vector<ProcInfo> members_listing(const Visit& listed) override {
        return descendants_of(::getpid(), {}, listed);
    }
    Result<std::unique_ptr<UnitScope>> make_scope(const std::string&) override {
        return std::unique_ptr<UnitScope>(new ProcScope);
    }
};

// Whether anything runs in the cgroup or below it, from its open cgroup.events; none where it
// cannot be read.
std::optional<bool> populated_in(int events_fd) {
    char buf[256];
    ssize_t n = ::pread(events_fd, buf, sizeof buf, 0);
    if (n <= 0) return std::nullopt;
    std::string_view events(buf, static_cast<std::size_t>(n));
    if (events.find("populated 1") != std::string_view::npos) return true;
    if (events.find("populated 0") != std::string_view::npos) return false;
    return std::nullopt;
}

// The same through a file of its own: reading the tracker's watched fd would consume the
// notification its poller waits for (kernfs re-arms it per open file, on each read).
std::optional<bool> cgroup_populated(const std::string& dir) {
    UniqueFd events(::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
    if (!events) return std::nullopt;
    return populated_in(events.get());
}

}  // namespace

StaleSweep remove_stale_instance_cgroups(const std::string& base, const std::string& own,
                                         std::chrono::seconds min_age) {
    StaleSweep sweep;
    auto failed = [&](std::string message) {
        if (sweep.failed++ == 0) sweep.first_error = std::move(message);
    };
    for_each_entry(base, [&](const dirent& e) {
        std::string_view name = e.d_name;
        if (e.d_type != DT_DIR || name.substr(0, 9) != "lastcall-" || name == own) return;
        std::string dir = base + "/" + e.d_name;
        // Created a moment ago: its lastcall may be between its mkdir and its lock. Looked at
        // before the lock: a sweep that held the lock of so young a cgroup would make its
        // lastcall's own lock fail.
        struct stat st {};
        if (::stat(dir.c_str(), &st) != 0) return;  // gone meanwhile
        auto age =
            std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime);
        if (age < min_age) return;
        UniqueFd events(::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
        if (!events) {
            if (errno != ENOENT) failed(sys_error("open " + dir + "/cgroup.events", errno).message);
            return;
        }
        if (::flock(events.get(), LOCK_EX | LOCK_NB) != 0) return;  // its lastcall lives
        // Nothing may run in the whole instance: a process the killed lastcall left keeps it for
        // a later sweep. (remove_cgroup_tree alone would take its empty cgroups leaf by leaf.)
        if (auto busy = populated_in(events.get()); !busy || *busy) return;
        // Removed with the lock held: another sweep leaves it alone meanwhile.
        if (auto removed = remove_cgroup_tree(dir); removed)
            ++sweep.removed;
        else
            failed(removed.error().message);
    });
    return sweep;
}

namespace {

// A cgroup's directory, opened as the target of clone3(CLONE_INTO_CGROUP).
Result<UniqueFd> open_cgroup(const std::string& dir) {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return sys_error("open " + dir, errno);
    // A cgroup nobody may move a process into (an LSM, a read-only delegation) fails here, at
    // set-up, where --tracker auto still falls back to /proc, not at the first spawn.
    if (::faccessat(fd.get(), "cgroup.procs", W_OK, 0) != 0)
        return sys_error("cgroup.procs in " + dir, errno);
    return fd;
}

// mkdir that never adopts: an existing directory is an error, not a cgroup to share. Returns
// the new cgroup's directory, opened for the spawns into it.
Result<UniqueFd> make_cgroup(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0755) != 0) return sys_error("mkdir " + dir, errno);
    auto fd = open_cgroup(dir);
    if (!fd) ::rmdir(dir.c_str());
    return fd;
}

// The instance's cgroup: <lastcall's cgroup>/lastcall-<instance>/, each unit of work in its own
// child cgroup, the main command in the leaf "main" beside them, or in the instance's cgroup
// itself when it is the only unit (see make_tracker). Membership of the tree is the whole subtree
// plus every descendant of lastcall found by the /proc walk (a process that moved itself out of
// lastcall's cgroup is still lastcall's to stop and reap).
class CgroupTracker final : public Tracker {
  public:
    // main: the leaf's scope, or null (the main command spawns into instance_fd's cgroup).
    CgroupTracker(std::string dir, std::unique_ptr<CgroupScope> main, UniqueFd instance_fd,
                  UniqueFd events)
        : dir_(std::move(dir)),
          main_(std::move(main)),
          instance_fd_(std::move(instance_fd)),
          events_(std::move(events)),
          created_(std::chrono::steady_clock::now()) {}
    ~CgroupTracker() override { (void)remove(); }

    std::string_view name() const override { return "cgroup"; }
    std::string where() const override { return dir_; }

    std::vector<ProcInfo> members() override {
        std::vector<ProcInfo> out;
        std::set<pid_t> seen;
        cgroup_members(dir_, out, seen);
        for (auto& p : outside(seen)) out.push_back(std::move(p));
        return out;
    }

    int kill_all(const MemberFilter& filter, int max_passes) override {
        // The kill goes first: one write ends every member of the subtree, including any forked
        // meanwhile (cgroup.kill holds off forks for its duration), and 10,000 members must not
        // wait for 10,000 /proc reads. Then the list is read for the record: members still
        // listed were alive when SIGKILL went out; those already gone are recorded when reaped.
        // Descendants that left the cgroup get SIGKILL one by one.
        std::size_t reached = cgroup_pid_count(dir_);  // see cgroup_pid_count
        if (!write_cgroup_kill(dir_)) return Tracker::kill_all(filter, max_passes);
        std::vector<ProcInfo> inside;
        std::set<pid_t> seen;
        cgroup_members(dir_, inside, seen);
        int n = 0;
        for (const auto& p : inside)
            if (filter(p)) {
                ++n;
                kill_zombie_leader(p);
            }
        return std::max(n, static_cast<int>(reached)) + kill_each(outside(seen), filter);
    }

    int spawn_cgroup_fd() const override {
        return main_ ? main_->spawn_cgroup_fd() : instance_fd_.get();
    }
    FreezeHold freeze() override { return freeze_cgroup(dir_); }
    bool freezes() const override { return ::access((dir_ + "/cgroup.freeze").c_str(), W_OK) == 0; }

    Result<std::unique_ptr<UnitScope>> make_scope(const std::string& unit) override {
        std::string dir = dir_ + "/" + unit;
        auto fd = make_cgroup(dir);
        if (!fd) return fd.error();
        return std::unique_ptr<UnitScope>(new CgroupScope(dir, std::move(*fd)));
    }

    int watch_fd() const override { return events_.get(); }
    void consume_watch() override {
        // kernfs re-arms the notification when the file is read again.
        char buf[256];
        [[maybe_unused]] auto n = ::pread(events_.get(), buf, sizeof buf, 0);
    }

    bool populated() override { return cgroup_populated(dir_).value_or(false); }

    Status remove() override {
        if (removed_) return Ok{};
        main_.reset();
        instance_fd_.reset();
        events_.reset();  // and with it the instance's lock (make_cgroup_tracker)
        if (auto st = remove_cgroup_tree(dir_); !st) return st;
        removed_ = true;
        // What killed instances left next to this one, once this one is gone. Not at start-up
        // (listing lastcall's cgroup costs 24 us, 3% of a start-up's 0.8 ms), and not after a
        // short run (`lastcall -- /bin/true` in a loop pays for its exit too).
        if (std::chrono::steady_clock::now() - created_ >= kStaleSweepAfter) {
            auto slash = dir_.rfind('/');
            auto sweep =
                remove_stale_instance_cgroups(dir_.substr(0, slash), dir_.substr(slash + 1));
            if (sweep.removed)
                spdlog::debug("removed {} cgroup(s) left by lastcall instances that were killed",
                              sweep.removed);
            if (sweep.failed)
                spdlog::debug("{} cgroup(s) left by killed lastcall instances not removed: {}",
                              sweep.failed, sweep.first_error);
        }
        return Ok{};
    }

  private:
    static constexpr std::chrono::seconds kStaleSweepAfter{1};

    // Descendants of lastcall that are not in the instance's cgroups (they moved themselves out,
    // or were never in: a unit spawned where the cgroup could not be created).
    static std::vector<ProcInfo> outside(const std::set<pid_t>& in_cgroups) {
        std::vector<ProcInfo> out;
        for (auto& p : descendants_of(::getpid()))
            if (!in_cgroups.count(p.pid)) out.push_back(std::move(p));
        return out;
    }

    std::string dir_;
    std::unique_ptr<CgroupScope> main_;
    UniqueFd instance_fd_;
    UniqueFd events_;
    std::chrono::steady_clock::time_point created_;
    bool removed_ = false;
};

// A cgroup directory just made, removed again unless kept: every failure on the way to the
// tracker that takes it over leaves nothing behind. Declared before what is made inside it, so
// that those go first (rmdir fails on a cgroup with children).
class NewCgroupDir {
  public:
    explicit NewCgroupDir(std::string dir) : dir_(std::move(dir)) {}
    NewCgroupDir(const NewCgroupDir&) = delete;
    NewCgroupDir& operator=(const NewCgroupDir&) = delete;
    ~NewCgroupDir() {
        if (!kept_) ::rmdir(dir_.c_str());
    }
    void keep() { kept_ = true; }

  private:
    std::string dir_;
    bool kept_ = false;
};

Result<std::unique_ptr<Tracker>> make_cgroup_tracker(const std::string& instance, bool main_leaf) {
    auto base = own_cgroup_dir();
    if (!base) return base.error();
    std::string dir = *base + "/lastcall-" + instance;
    // Exclusive: an existing group of that name belongs to another instance (or a crashed one
    // whose processes may still run); sharing it would let one instance kill the other's tree.
    auto instance_fd = make_cgroup(dir);
    if (!instance_fd) return instance_fd.error();
    NewCgroupDir made(dir);
    if (::faccessat(instance_fd->get(), "cgroup.kill", W_OK, 0) != 0) {
        int err = errno;  // before the message's allocations
        return sys_error("cgroup.kill in " + dir + " (kernel older than 5.14?)", err);
    }
    std::unique_ptr<CgroupScope> main;  // its own directory goes before the instance's
    if (main_leaf) {
        auto main_dir = make_cgroup(dir + "/main");
        if (!main_dir) return main_dir.error();
        main = std::make_unique<CgroupScope>(dir + "/main", std::move(*main_dir));
    }
    // cgroup.events signals a change of "populated" (of the whole subtree) to pollers with
    // EPOLLPRI (kernfs_notify): no polling. A plain fd, not inotify: closing an inotify instance
    // waits for an SRCU grace period, which cost ~10 ms on every exit.
    UniqueFd events(::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));
    if (!events) {
        int err = errno;
        return sys_error("open " + dir + "/cgroup.events", err);
    }
    // The instance's lock, held for its life on the open cgroup.events (flock locks the open
    // file, and the kernel drops the lock when lastcall dies, however it dies): a locked
    // instance cgroup belongs to a live lastcall (remove_stale_instance_cgroups). Nobody else
    // holds it: a sweep does not lock a cgroup this young.
    if (::flock(events.get(), LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        return sys_error("flock " + dir + "/cgroup.events", err);
    }
    std::unique_ptr<Tracker> tracker(
        new CgroupTracker(dir, std::move(main), std::move(*instance_fd), std::move(events)));
    made.keep();  // the tracker removes it from here on (CgroupTracker::remove)
    return tracker;
}

}  // namespace

FreezeHold FreezeHold::stopped_group(pid_t kill_target) {
    FreezeHold hold;
    hold.stopped_ = kill_target;
    return hold;
}

void FreezeHold::thaw() {
    // A failed thaw would leave the unit frozen until its kill; there is no better fallback
    // than trying, and the kill at grace end works on frozen processes.
    if (fd_) (void)::pwrite(fd_.get(), "0", 1, 0);
    fd_.reset();
    if (stopped_ != 0) (void)::kill(std::exchange(stopped_, 0), SIGCONT);
}

bool run_queue_crowded() {
    // "0.52 0.58 0.59 3/412 12345": the fourth field is runnable/total scheduling entities.
    std::string text = read_kernel_file("/proc/loadavg");
    std::size_t field = 0, pos = 0;
    while (field < 3 && (pos = text.find(' ', pos)) != std::string::npos) ++field, ++pos;
    if (field < 3) return false;
    long running = std::strtol(text.c_str() + pos, nullptr, 10);
    // 16 runnable per CPU: lastcall, one of them, gets a few milliseconds of CPU per scheduler
    // period, and each period is 16 time slices long or more; a walk of thousands of /proc
    // files then spans many periods. A fork bomb at ulimit -u 2000 shows ~2,000.
    long cpus = std::max(::sysconf(_SC_NPROCESSORS_ONLN), 1L);
    return running > 16 * cpus;
}

std::optional<ProcInfo> read_proc_stat(pid_t pid) {
    // One open, one read, one close, no allocation but comm: a walk of a fork bomb reads this
    // file for each of its thousands of processes while the grace runs out. The file is one
    // seq_file record produced whole, and the fields parsed (through 22, starttime) end within
    // its first ~500 bytes (19 numbers of at most 20 digits after a comm of at most 64), so the
    // first read has them: the read that would return 0 at the end is not made. 1 KiB, not 4:
    // the buffer lies on the stop path's deepest frame, and every stack page is a fault.
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd) {
        throw_if_out_of_memory(errno);
        return std::nullopt;
    }
    char buf[1024];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    return parse_proc_stat(pid, std::string_view(buf, static_cast<std::size_t>(n)));
}

std::optional<ProcInfo> parse_proc_stat(pid_t pid, std::string_view s) {
    // comm may contain spaces and parentheses: it ends at the *last* ')'.
    auto open = s.find('('), close = s.rfind(')');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
        close + 2 >= s.size())
        return std::nullopt;
    ProcInfo info;
    info.pid = pid;
    info.comm = std::string(s.substr(open + 1, close - open - 1));
    // Field 3 (state) follows ") "; the numeric fields after it are separated by one space.
    info.state = s[close + 2];
    const char* p = s.data() + close + 3;
    const char* end = s.data() + s.size();
    // Fields 4 (ppid), 5 (pgrp), 6 (session), 20 (num_threads) and 22 (starttime).
    long long fields[23] = {};
    for (int i = 4; i <= 22; ++i) {
        if (p >= end || *p != ' ') return std::nullopt;
        ++p;
        auto [next, ec] = std::from_chars(p, end, fields[i]);
        if (ec != std::errc{}) return std::nullopt;
        p = next;
    }
    info.ppid = static_cast<pid_t>(fields[4]);
    info.pgid = static_cast<pid_t>(fields[5]);
    info.sid = static_cast<pid_t>(fields[6]);
    info.threads = static_cast<long>(fields[20]);
    info.start = static_cast<unsigned long long>(fields[22]);
    return info;
}

std::string read_cmdline(pid_t pid) {
    std::string s = read_kernel_file("/proc/" + std::to_string(pid) + "/cmdline");
    while (!s.empty() && s.back() == '\0') s.pop_back();
    for (char& c : s)
        if (c == '\0') c = ' ';
    return s;
}

std::string read_wchan(pid_t pid) {
    return read_kernel_file("/proc/" + std::to_string(pid) + "/wchan");
}

std::unique_ptr<UnitScope> make_unit_scope(Tracker& tracker, const std::string& unit) {
    auto scope = tracker.make_scope(unit);
    if (scope) return std::move(*scope);
    spdlog::warn("{}: tracking {} by /proc instead", scope.error().message, unit);
    return std::unique_ptr<UnitScope>(new ProcScope);
}

bool is_alive(const ProcInfo& p) {
    if (p.state == 'X') return false;
    if (p.state != 'Z') return true;
    // A zombie leader with live threads. The kernel counts a thread group's threads until each
    // is released, so the stat file of a true zombie says 1 (the leader itself) and that of a
    // leader whose other threads run says more: no listing of /proc/<pid>/task for each of the
    // zombies a force leaves behind. Unknown (0): /proc/<pid>/task lists the live threads.
    if (p.threads > 0) return p.threads > 1;
    return numeric_entries("/proc/" + std::to_string(p.pid) + "/task").size() > 1;
}

std::vector<FoundProcess> processes_with_environment(const std::vector<std::string>& entries,
                                                     const std::vector<std::string>& read) {
    std::vector<FoundProcess> out;
    pid_t self = ::getpid();
    for (pid_t pid : numeric_entries("/proc")) {
        if (pid == self) continue;
        std::string env = read_kernel_file("/proc/" + std::to_string(pid) + "/environ");
        if (env.empty()) continue;  // gone, a kernel thread, or not ours to read
        std::size_t found = 0;
        std::vector<std::string> values(read.size());
        for (std::size_t pos = 0; pos < env.size();) {
            std::size_t end = env.find('\0', pos);
            if (end == std::string::npos) end = env.size();
            std::string_view var(env.data() + pos, end - pos);
            for (const auto& e : entries) found += var == e;
            for (std::size_t i = 0; i < read.size(); ++i)
                if (var.size() > read[i].size() && var.substr(0, read[i].size()) == read[i] &&
                    var[read[i].size()] == '=')
                    values[i] = std::string(var.substr(read[i].size() + 1));
            pos = end + 1;
        }
        if (found < entries.size()) continue;
        if (auto info = read_proc_stat(pid); info && is_alive(*info))
            out.push_back({*info, std::move(values)});
    }
    return out;
}

std::vector<ProcInfo> processes_with_environment(const std::vector<std::string>& entries) {
    std::vector<ProcInfo> out;
    for (auto& f : processes_with_environment(entries, {})) out.push_back(f.info);
    return out;
}

std::vector<ProcInfo> descendants_of(pid_t root, const std::function<bool()>& out_of_time,
                                     const std::function<void(const ProcInfo&)>& listed) {
    std::vector<ProcInfo> out;
    std::size_t reads = 0;
    if (have_proc_children()) {
        // (pid, single-threaded, index in out): a single-threaded process's children are all in
        // its main thread's file, which saves listing its task directory (5 system calls of ~13
        // per process; 2,000 processes of a fork bomb are walked while the grace runs out). Not
        // for a zombie leader: its one live thread is another task, which holds the children.
        struct Next {
            pid_t pid;
            bool single;
            std::size_t index;  // in out; kRoot: nobody to hand over (the root, a dead child)
        };
        constexpr std::size_t kRoot = static_cast<std::size_t>(-1);
        std::vector<Next> stack{{root, false, kRoot}};
        std::set<pid_t> seen{root};
        while (!stack.empty()) {
            // Every 16 /proc reads (a process's children files, a child's stat): the budget
            // is checked in the middle of a deep tree and of a flat one alike.
            if (out_of_time && ++reads % 16 == 0 && out_of_time()) return out;
            auto [p, single, index] = stack.back();
            stack.pop_back();
            auto tids = single ? std::vector<pid_t>{p}
                               : numeric_entries("/proc/" + std::to_string(p) + "/task");
            for (pid_t tid : tids) {
                std::string children = read_kernel_file("/proc/" + std::to_string(p) + "/task/" +
                                                        std::to_string(tid) + "/children");
                for (pid_t c : parse_pids(children)) {
                    if (!seen.insert(c).second) continue;
                    // A flat tree (orphans reparented to lastcall) comes from one file.
                    if (out_of_time && ++reads % 16 == 0 && out_of_time()) return out;
                    auto info = read_proc_stat(c);
                    bool alive = info && is_alive(*info);
                    if (alive) out.push_back(*info);
                    // A true zombie has no children: its threads' exits gave them away.
                    if (info && !alive) continue;
                    stack.push_back({c, info && info->threads == 1 && info->state != 'Z',
                                     alive ? out.size() - 1 : kRoot});
                }
            }
            if (listed && index != kRoot) listed(out[index]);
        }
        return out;
    }
    // Without the children files: one pass over /proc builds the parent map.
    std::multimap<pid_t, ProcInfo> by_parent;
    for (pid_t pid : numeric_entries("/proc")) {
        if (out_of_time && ++reads % 16 == 0 && out_of_time()) break;
        if (auto info = read_proc_stat(pid)) by_parent.emplace(info->ppid, *info);
    }
    std::vector<pid_t> stack{root};
    while (!stack.empty()) {
        pid_t p = stack.back();
        stack.pop_back();
        auto [lo, hi] = by_parent.equal_range(p);
        for (auto it = lo; it != hi; ++it) {
            if (is_alive(it->second)) out.push_back(it->second);
            stack.push_back(it->second.pid);
        }
    }
    if (listed)
        for (const auto& p : out) listed(p);
    return out;
}

int Tracker::signal_all(int sig, const MemberFilter& filter, int max_passes) {
    int total = 0;
    for (int pass = 0; pass < max_passes; ++pass) {
        int signalled = 0;
        (void)members_listing([&](const ProcInfo& p) {
            if (filter(p) && signal_exact(p, sig)) ++signalled;
        });
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

namespace {

// Is `option` one of the comma-separated `list` ("rw,memory", "cpu,cpuacct")?
bool has_option(std::string_view list, std::string_view option) {
    for (std::size_t pos = 0; pos <= list.size();) {
        std::size_t comma = std::min(list.find(',', pos), list.size());
        if (list.substr(pos, comma - pos) == option) return true;
        pos = comma + 1;
    }
    return false;
}

// lastcall's path in a hierarchy, from /proc/self/cgroup: "0::/path" for cgroup2 (controller
// empty), "N:memory:/path" for a v1 controller; "" without one.
std::string own_cgroup_path(std::string_view controller) {
    std::string text = read_kernel_file("/proc/self/cgroup");
    std::string_view rest(text);
    while (!rest.empty()) {
        std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        std::size_t a = line.find(':');
        std::size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos) continue;
        std::string_view controllers = line.substr(a + 1, b - a - 1);
        bool match =
            controller.empty() ? line.starts_with("0::") : has_option(controllers, controller);
        if (match) return std::string(line.substr(b + 1));
    }
    return {};
}

// Where `rel` of the hierarchy mounted as `fstype` (with `option` among its super options,
// unless empty) is, from /proc/self/mountinfo; "" when no such mount shows it.
std::string mounted_path(std::string_view fstype, std::string_view option, const std::string& rel) {
    // mountinfo: id parent major:minor root mountpoint options... - fstype source superopts
    std::string text = read_kernel_file("/proc/self/mountinfo");
    std::string_view rest(text);
    while (!rest.empty()) {
        std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        auto dash = line.find(" - ");
        if (dash == std::string_view::npos) continue;
        std::size_t tail = dash + 3;
        if (next_word(line, tail) != fstype) continue;
        next_word(line, tail);  // the source
        if (!option.empty() && !has_option(next_word(line, tail), option)) continue;
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
    return {};
}

}  // namespace

Result<std::string> own_cgroup_dir() {
    // Plain string_view scanning: this runs on every start, and string streams cost ~100,000
    // instructions here (callgrind, bench/results/2026-12-03.md).
    std::string rel = own_cgroup_path({});
    if (rel.empty()) return Error{"no cgroup2 entry in /proc/self/cgroup"};
    std::string dir = mounted_path("cgroup2", {}, rel);
    if (dir.empty()) return Error{"no cgroup2 filesystem in /proc/self/mountinfo"};
    return dir;
}

std::string own_v1_cgroup_dir(std::string_view controller) {
    std::string rel = own_cgroup_path(controller);
    return rel.empty() ? std::string() : mounted_path("cgroup", controller, rel);
}

Result<TrackerChoice> make_tracker(TrackerKind kind, const std::string& instance, bool main_leaf) {
    if (kind != TrackerKind::Proc) {
        auto cg = make_cgroup_tracker(instance, main_leaf);
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

std::string describe_wait_status(int status) {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
    return "changed state " + std::to_string(status);
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
