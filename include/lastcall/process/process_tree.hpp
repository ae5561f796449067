// SPDX-License-Identifier: Apache-2.0
// The supervised process tree: who belongs to it, how to signal all of it, how to reap it.
//
// A process group is not a tree: shells, npm and daemons call setsid or double-fork. Two trackers
// find the whole tree behind one interface:
//  - CgroupTracker: one cgroup v2 child group per supervised command. The kernel keeps every
//    descendant inside it whatever it does with sessions and groups; cgroup.kill ends all of them
//    atomically (no fork can race it); cgroup.events says when it is empty.
//  - ProcTracker: no writable cgroup (an unprivileged container). lastcall is PID 1 or a child
//    subreaper, so every descendant stays below it; a walk of /proc finds them, and pidfds make
//    sure a recycled pid is never signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

struct ProcInfo {
    pid_t pid = 0;
    pid_t ppid = 0;
    pid_t pgid = 0;
    pid_t sid = 0;                 // session: services are told apart by it (service_manager)
    unsigned long long start = 0;  // start time in clock ticks: (pid, start) names one process
    char state = '?';              // R, S, D, Z (zombie: exited, waiting to be reaped), ...
    long threads = 0;              // num_threads; 0 when unknown
    std::string comm;
};

// Parses /proc/<pid>/stat. Works for zombies too (comm and pgrp are kept until the reap).
std::optional<ProcInfo> read_proc_stat(pid_t pid);
// The parser behind it: the text of a /proc/<pid>/stat file.
std::optional<ProcInfo> parse_proc_stat(pid_t pid, std::string_view text);
// /proc/<pid>/cmdline with NULs turned into spaces; empty for zombies and kernel threads.
std::string read_cmdline(pid_t pid);
// /proc/<pid>/wchan: the kernel function the process sleeps in ("0" or empty when running or
// gone); names why a process outlived SIGKILL (__refrigerator: a v1 freezer).
std::string read_wchan(pid_t pid);
// Is there anything left to signal? Not for a zombie, except a zombie leader whose other threads
// still run (it called pthread_exit): the process lives on and a signal still reaches it.
bool is_alive(const ProcInfo& p);

// Decides, for each member found, whether to signal it now (false: already done).
using MemberFilter = std::function<bool(const ProcInfo&)>;

// A cgroup held frozen (cgroup.freeze) while the stop signal goes out; thawed when destroyed.
// Frozen, no member can fork, and a fork under way completes into a frozen child first: one
// enumeration lists every member, and each handles the signal before it runs a single instruction
// of its own after the thaw. So a process born after the thaw was forked by a process that had
// already been told to stop: a cleanup helper, not a member that slipped through a fork race.
// A cgroup that someone else froze stays frozen and is not thawed by lastcall.
//
// Without a cgroup (the /proc tracker) a process group can be held with SIGSTOP instead (see
// stopped_group): one kill() stops every member, and a fork racing it fails and is retried only
// after the stop has acted. Visible to a parent that asks for stops (waitpid WUNTRACED), so it
// is used only when the walk would otherwise be starved (a fork bomb; docs/design.md).
class FreezeHold {
  public:
    FreezeHold() = default;
    FreezeHold(UniqueFd freeze, bool complete) : fd_(std::move(freeze)), complete_(complete) {}
    // A process group that kill(kill_target, SIGSTOP) has stopped (kill_target is -pgid, or -1
    // as PID 1): thawed with SIGCONT to the same target.
    static FreezeHold stopped_group(pid_t kill_target);
    FreezeHold(FreezeHold&& other) noexcept { *this = std::move(other); }
    FreezeHold& operator=(FreezeHold&& other) noexcept {
        if (this != &other) {
            thaw();
            fd_ = std::move(other.fd_);
            complete_ = other.complete_;
            stopped_ = std::exchange(other.stopped_, 0);
        }
        return *this;
    }
    ~FreezeHold() { thaw(); }
    // The kernel reported every member frozen (cgroup.events "frozen 1") in time.
    bool complete() const { return complete_; }
    // Is p held by this hold's SIGSTOP? Its SIGCONT then comes with the thaw: one sent before
    // would let it run, and fork, while the passes still walk.
    bool holds(const ProcInfo& p) const {
        return stopped_ == -1 || (stopped_ < 0 && p.pgid == -stopped_);
    }
    void thaw();

  private:
    UniqueFd fd_;  // cgroup.freeze to write "0" to, or none
    bool complete_ = false;
    pid_t stopped_ = 0;  // the kill() target to send SIGCONT to, or 0
};

// The running count of /proc/loadavg against the online CPUs: one small read.
bool run_queue_crowded();

// The processes of one unit of work (a service instance, a job run), nested in the instance's
// tree. With cgroup v2 it is a child cgroup of the instance's (membership recursive: every
// process in its subtree of cgroups); without, the /proc walk attributes each descendant of
// lastcall to the unit by ancestry (the leader's descendants), session (units are spawned with
// setsid) and memory (a member seen once stays one while it lives, so an orphan reparented to
// lastcall is still found).
class UnitScope {
  public:
    virtual ~UnitScope() = default;
    virtual std::string_view kind() const = 0;
    // Live members (zombies excluded, but a zombie leader whose threads still run is a member).
    virtual std::vector<ProcInfo> members() = 0;
    // The cgroup's directory for the spawn (CLONE_INTO_CGROUP, or openat of its cgroup.procs), or
    // -1.
    virtual int spawn_cgroup_fd() const { return -1; }
    // Freezes the unit for step 1 of the stop primitive (see FreezeHold); empty without cgroups.
    virtual FreezeHold freeze() { return {}; }
    // The unit's leader, once spawned: the /proc scope attributes by it.
    virtual void started(pid_t leader) { (void)leader; }
    // Step 4 of the stop primitive: SIGKILL to every member, atomically against forks where the
    // kernel can (cgroup.kill). record(p) sees each member alive when it went out; returns how
    // many that were.
    virtual int kill(const MemberFilter& record) = 0;
    // The irreversible step once the unit is over (rmdir of its cgroup). Errors are returned.
    virtual Status remove() { return Ok{}; }
};

class Tracker {
  public:
    virtual ~Tracker() = default;
    virtual std::string_view name() const = 0;
    // Live members of the whole tree (lastcall itself and zombies excluded): every unit's, and
    // every descendant of lastcall, also one that left lastcall's cgroup.
    virtual std::vector<ProcInfo> members() = 0;
    // The same, or the part of it found before out_of_time() said so: for the stop signal's
    // passes, which must give the loop back at their budget (a fork storm leaves lastcall a
    // sliver of CPU, and a whole /proc walk then takes seconds). The force enumerates in full.
    virtual std::vector<ProcInfo> members_within(const std::function<bool()>& out_of_time) {
        (void)out_of_time;
        return members();
    }
    using Visit = std::function<void(const ProcInfo&)>;
    // The same, handing each member to listed() as soon as the walk may let it go: once its own
    // children are listed (the /proc walk), so that a kill can go out while the walk goes on,
    // and the kernel ends the first members while the last are being found.
    virtual std::vector<ProcInfo> members_listing(const Visit& listed) {
        auto all = members();
        for (const auto& p : all) listed(p);
        return all;
    }
    // Signals every member the filter accepts; enumerates again until a pass finds nobody new (at
    // most max_passes: a fork storm must not hold the event loop past a deadline). Returns how
    // many it signalled. For the stop signal, use send_stop_signal (process/stop.hpp).
    virtual int signal_all(int sig, const MemberFilter& filter, int max_passes = 3);
    // SIGKILL to everyone: first the filter sees each member (to record who had to be forced).
    // max_passes: 1 when the tree is held still (FreezeHold::stopped_group), where a second
    // walk finds nobody new and would double the force's time under a fork bomb.
    virtual int kill_all(const MemberFilter& filter, int max_passes = 3) {
        return signal_all(SIGKILL_, filter, max_passes);
    }
    // The main command's leaf cgroup directory for its spawn, or -1.
    virtual int spawn_cgroup_fd() const { return -1; }
    // The pids of the tree's members as the tracker's own listing has them, without a /proc
    // read for each (the cgroup tracker: cgroup.procs of the instance's cgroups), or none where
    // it has no such listing (the /proc tracker). Not the descendants that left the cgroups
    // (namespace_descendants_outside).
    virtual std::optional<std::vector<pid_t>> listed_pids() { return std::nullopt; }
    // Freezes every unit of the tree for the stop signal (see FreezeHold); empty without cgroups.
    virtual FreezeHold freeze() { return {}; }
    // Whether freeze() can hold the tree still (a cgroup with cgroup.freeze, kernel >= 5.2).
    virtual bool freezes() const { return false; }
    // A new scope for one unit of work, named uniquely within the instance ("svc-web.3").
    virtual Result<std::unique_ptr<UnitScope>> make_scope(const std::string& unit) = 0;
    // An fd that reports EPOLLPRI when the tree may have emptied (cgroup.events), or -1.
    virtual int watch_fd() const { return -1; }
    virtual void consume_watch() {}
    // True while the kernel still counts members (cgroup.events). Trackers without that
    // knowledge say false and rely on the reaper's ECHILD alone: lastcall is PID 1 or a subreaper,
    // so "no children left" means "no descendants left".
    virtual bool populated() { return false; }
    // The instance's cgroup directory ("" for the /proc tracker), for logs and tests.
    virtual std::string where() const { return {}; }
    // The irreversible step at exit (rmdir of the instance's cgroups, leaves first). Errors are
    // returned, not logged.
    virtual Status remove() { return Ok{}; }

  protected:
    static constexpr int SIGKILL_ = 9;
};

// The scope of a new unit of work. Where the tracker cannot make one (its cgroup could not be
// created), says so in the log and falls back to the /proc attribution: the unit still runs,
// stops and is reaped; only the kernel's help (atomic kill) is lost.
std::unique_ptr<UnitScope> make_unit_scope(Tracker& tracker, const std::string& unit);

enum class TrackerKind { Auto, Cgroup, Proc };

struct TrackerChoice {
    std::unique_ptr<Tracker> tracker;
    std::string reason;  // logged: why this tracker is in use
};

// auto: cgroup when a writable cgroup2 hierarchy is mounted, else proc. cgroup explicitly
// requested but impossible is an error. With cgroups, the instance gets its own cgroup
// "lastcall-<instance>" next to lastcall's, created exclusively (mkdir fails on an existing name:
// an instance never adopts another's cgroup). With main_leaf (services or jobs will have
// cgroups of their own inside it) the main command gets a leaf "main" beside them; without, it
// is the only unit and runs in the instance's cgroup itself: the leaf would separate it from
// nothing, and its mkdir and rmdir were ~35 us of every start (issue 18).
Result<TrackerChoice> make_tracker(TrackerKind kind, const std::string& instance, bool main_leaf);

// Removes the instance cgroups ("lastcall-*" in `base`, other than `own`) that a lastcall killed
// with SIGKILL (the OOM killer, kill -9) left behind: nobody else removes them, and every
// killed instance left one more. One is stale when no live lastcall holds its lock (the flock a
// lastcall takes on its cgroup.events for its life; the kernel drops it at death), it is older
// than `min_age` (its lastcall may be between its mkdir and the lock) and nothing runs in it
// any more (a process the killed lastcall left behind keeps it).
struct StaleSweep {
    int removed = 0;
    int failed = 0;           // stale ones that could not be removed
    std::string first_error;  // why the first of those could not
};
StaleSweep remove_stale_instance_cgroups(const std::string& base, const std::string& own,
                                         std::chrono::seconds min_age = std::chrono::seconds(10));

// Finds the cgroup2 mount in /proc/self/mountinfo and lastcall's own cgroup directory in it.
Result<std::string> own_cgroup_dir();
// The same for a controller of a v1 hierarchy ("memory" of a hybrid host: systemd's legacy
// mode, older Docker hosts); "" where lastcall is in none.
std::string own_v1_cgroup_dir(std::string_view controller);

// Lists every descendant of `root` by walking /proc: /proc/<pid>/task/<tid>/children where the
// kernel has it (CONFIG_PROC_CHILDREN), else one scan of /proc/[0-9]*/stat building the parent map.
// With out_of_time: a walk that stops early once it says so (checked every 16 processes) and
// returns what it found so far; a fork storm must not hold the loop in one walk.
// With listed: called for each descendant once its own children have been listed (they are
// on the walk's list, and were not yet visited), so that it may kill the process: its children,
// reparented to lastcall, are still reached.
std::vector<ProcInfo> descendants_of(pid_t root, const std::function<bool()>& out_of_time = {},
                                     const std::function<void(const ProcInfo&)>& listed = {});

// As PID 1 of its pid namespace: lastcall's live descendants that are not among `listed` (the
// pids of the instance's cgroups). /proc lists every process of the namespace, so one listing
// finds them, and only a process not in `listed` is read: a descendant is a child of lastcall,
// of a listed process or of another such descendant; a process entered from outside (setns:
// `docker exec`) has parent 0 here and is not one, nor are its children. Where the walk of
// descendants_of reads two /proc files for every process of a 10,000-process tree, this reads
// the few that left the instance's cgroups.
std::vector<ProcInfo> namespace_descendants_outside(const std::vector<pid_t>& listed);

// Whether lastcall is PID 1 of the pid namespace this /proc shows (so /proc lists that
// namespace, and descendants_of(getpid()) reads one file per process instead of two).
bool proc_lists_own_namespace();

// Live processes (other than lastcall) whose environment holds every one of `entries`
// ("NAME=value", exact): the processes of a unit that a previous lastcall left behind, found by
// the variables it gave them when it is no longer there to ask.
std::vector<ProcInfo> processes_with_environment(const std::vector<std::string>& entries);
// The same, with the values of the variables named in `read` ("" when a process has none).
struct FoundProcess {
    ProcInfo info;
    std::vector<std::string> values;  // in the order of `read`
};
std::vector<FoundProcess> processes_with_environment(const std::vector<std::string>& entries,
                                                     const std::vector<std::string>& read);

// One reaped process.
struct Reaped {
    pid_t pid;
    int status;                    // waitpid status
    std::optional<ProcInfo> info;  // read from the zombie before the reap, when asked for
};

// Reaps every child that has exited, until waitpid says there is nothing more (ECHILD or 0).
// want_info(pid) says whether to read the zombie's /proc/<pid>/stat before the reap (null: never).
// Returns true when lastcall has no children left at all (ECHILD).
bool reap_all(const std::function<bool(pid_t)>& want_info,
              const std::function<void(const Reaped&)>& on_reaped);

// "exited with code 3", "was killed by SIGKILL": a wait status for the log.
std::string describe_wait_status(int status);

// Exit code of a wait status: the code, or 128+N for signal N.
int exit_code_of(int status);

// prctl(PR_SET_CHILD_SUBREAPER): orphans of the tree come back to lastcall instead of PID 1.
Status become_subreaper();

}  // namespace lastcall
