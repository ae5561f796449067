// SPDX-License-Identifier: Apache-2.0
// The cgroup tracker and its unit scopes, the freeze, the sweep of stale instances' cgroups.
#include "lastcall/process/process_tree.hpp"
#include "process_tree_internal.hpp"

#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/process/process_ref.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

namespace lastcall {

using proctree::for_each_entry;
using proctree::kill_each;
using proctree::parse_pids;
using proctree::read_kernel_file;

namespace {

// Every live process listed in `dir`/cgroup.procs and in the cgroup.procs of every cgroup below
// it: membership of a scope is recursive, so a process moved into a sub-cgroup is still a member.
// The pids of the subtree (cgroup.procs of dir and of every cgroup below): no /proc reads.
void cgroup_pids(const std::string& dir, std::vector<pid_t>& out) {
    auto pids = parse_pids(read_kernel_file(dir + "/cgroup.procs"));
    out.insert(out.end(), pids.begin(), pids.end());
    for_each_entry(dir, [&](const dirent& e) {
        if (e.d_type == DT_DIR && e.d_name[0] != '.') cgroup_pids(dir + "/" + e.d_name, out);
    });
}

// The live members of the subtree not in `seen` yet, each read from /proc; out_of_time is
// checked every 16 reads.
void cgroup_members(const std::string& dir, std::vector<ProcInfo>& out, std::set<pid_t>& seen,
                    const std::function<bool()>& out_of_time = {}) {
    std::vector<pid_t> pids;
    cgroup_pids(dir, pids);
    std::size_t reads = 0;
    for (pid_t pid : pids) {
        if (!seen.insert(pid).second) continue;
        if (out_of_time && ++reads % 16 == 0 && out_of_time()) return;
        if (auto info = read_proc_stat(pid); info && is_alive(*info)) out.push_back(*info);
    }
}

// How many processes the subtree holds: pids only, no /proc reads (cheap for 10,000). Read just
// before a cgroup.kill, it is the count of processes the kill reaches: the list read after the
// kill misses those the kernel has already taken out of the cgroup (an exiting task leaves
// cgroup.procs at once), and a log line "SIGKILL to 0" for a kill that ended a process is wrong.
std::size_t cgroup_pid_count(const std::string& dir) {
    std::vector<pid_t> pids;
    cgroup_pids(dir, pids);
    return pids.size();
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
    UniqueFd kill(open_with_reserve(
        [&] { return ::open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC); }));
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
    UniqueFd freeze(open_with_reserve(
        [&] { return ::open((dir + "/cgroup.freeze").c_str(), O_RDWR | O_CLOEXEC); }));
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

    std::vector<ProcInfo> members() override { return members_within({}); }
    // The walk of lastcall's descendants first, then the cgroups' pids it did not find. The walk
    // reads each descendant's stat anyway, and every member of the instance's cgroups is a
    // descendant unless it was moved in from outside: listed first, each member of the cgroups
    // was read twice (10,000 members: three /proc reads each per enumeration, and the cgroup
    // half had no budget: a first round of 1.25 s that signalled 16 of them, issue 42).
    std::vector<ProcInfo> members_within(const std::function<bool()>& out_of_time) override {
        auto out = descendants_of(::getpid(), out_of_time);
        std::set<pid_t> seen;
        for (const auto& p : out) seen.insert(p.pid);
        cgroup_members(dir_, out, seen, out_of_time);
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

    std::optional<std::vector<pid_t>> listed_pids() override {
        std::vector<pid_t> pids;
        cgroup_pids(dir_, pids);
        return pids;
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

}  // namespace

namespace proctree {

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

}  // namespace proctree

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

// The first line of `rest` (without its newline), which then starts after it.
std::string_view take_line(std::string_view& rest) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return line;
}

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
        std::string_view line = take_line(rest);
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
        std::string_view line = take_line(rest);
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

}  // namespace lastcall
