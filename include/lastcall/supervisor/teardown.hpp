// SPDX-License-Identifier: Apache-2.0
// The teardown of the whole tree: what the shutdown state machine's states ask for
// (ShutdownActions), carried out over the units (process/unit.hpp). The main unit is stopped
// first, the components (services in reverse dependency order, job runs) are told of each state
// change and stop their own units, the root unit's pass gives the rest of the tree its stop
// signal once, and at the grace one kill of the root ends whatever is left; a process that
// outlives SIGKILL is named, not passed off as killed.
//
// The teardown owns the shutdown's state machine and its record (the process book, the force
// facts, the root's record of stop signals in UnitTree). It touches the world only through
// TeardownHost: in lastcall that is the Supervisor (the event loop, the main child's pidfd,
// kill(2), waitid, /proc); in the unit tests it is FakeHost (tests/unit/fake_host.hpp), whose
// processes exit when the test says so and whose clock moves only when the test advances it.
// The whole shutdown, main command, services and job runs together, is then tested with the
// code lastcall runs and a fake clock instead of sleeps.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lastcall/cli/options.hpp"
#include "lastcall/core/clock.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/unit.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/shutdown/report.hpp"
#include "lastcall/shutdown/shutdown.hpp"

namespace lastcall {

class SupervisorComponent;

// What waitid(WNOHANG | WNOWAIT) says of lastcall's children, reaping none: no child left
// (ECHILD: as PID 1 or a subreaper, no descendant either), one waiting to be reaped, or only
// running ones.
enum class Children { None, Exited, Running };

// What the teardown needs of the world.
class TeardownHost {
  public:
    virtual ~TeardownHost() = default;
    virtual const Clock& clock() const = 0;
    virtual Admission& admission() = 0;
    virtual Tracker& tracker() = 0;
    // Runs `task` on the loop after the current event: a stop round the budget cut goes on
    // there, after the loop had its turn (a second signal, the grace timer).
    virtual void post(std::function<void()> task) = 0;
    virtual Children peek_children() const = 0;
    // A signal to a process through its (pid, start time) identity (process_ref.hpp).
    virtual bool signal_exact(const ProcInfo& p, int sig) = 0;
    // The same, its identity proved by the namespace's last pid where it can be (signal_listed:
    // `listed_after` is the last pid read before the listing that found p); `first`: a signal
    // through the same pidfd just before sig (0: none).
    virtual bool signal_listed(const ProcInfo& p, int sig, pid_t listed_after, int first) = 0;
    // kill(2): a pid that cannot have been reused (a stopped member), or a whole group
    // (whole_group_target).
    virtual bool kill(pid_t target, int sig) = 0;
    // The kill() target that reaches the whole tree in one call: -1 as PID 1, the main child's
    // process group while it is unreaped; none otherwise.
    virtual std::optional<pid_t> whole_group_target() const = 0;
    virtual bool run_queue_crowded() const = 0;
    virtual std::string wchan(pid_t pid) const = 0;
    virtual std::optional<ProcInfo> proc_stat(pid_t pid) const = 0;
    // lastcall is PID 1 of its namespace (/proc lists the whole tree and nothing above it).
    virtual bool is_pid1() const = 0;
    // As PID 1: lastcall's live descendants not among `listed` (namespace_descendants_outside).
    virtual std::vector<ProcInfo> descendants_outside(const std::vector<pid_t>& listed) = 0;
    // /proc lists lastcall's own namespace: lastcall is its PID 1 (proc_lists_own_namespace).
    virtual bool proc_lists_namespace() const = 0;
    // The namespace's last pid handed out (/proc/sys/kernel/ns_last_pid), for the birth line.
    virtual UniqueFd open_last_pid() = 0;
    // Intake has closed: from here on every exit wakes the loop and the tree's events are
    // watched.
    virtual void shutdown_begun() = 0;
    virtual void readiness_off() = 0;
    virtual void start_pre_stop() = 0;
    virtual void forward(int sig, Scope scope) = 0;

    // -- the main command (its unit is the supervisor's: its stop signal is on the hot path)
    virtual pid_t main_pid() const = 0;
    // The kill scope, widened to the tree once the main child is gone.
    virtual Scope effective_scope() const = 0;
    // Its unit is running and it can be signalled (its pidfd is held).
    virtual bool main_alive() const = 0;
    // It had its stop signal (the fast path gave it before the state machine ran).
    virtual bool main_signalled() const = 0;
    // Its stop: the birth line drawn, the signal through its pidfd. False if not signalled.
    virtual bool stop_main(int sig, MonoTime deadline) = 0;
    // lastcall's own units the one kill at the grace marks Killed: the main unit, the pre-stop
    // hook's. (Services and job runs mark theirs in before_force.)
    virtual std::vector<Unit*> own_units() = 0;
};

class Teardown final : public ShutdownActions {
  public:
    Teardown(ShutdownConfig config, const Clock& clock, TeardownHost& host,
             const std::vector<SupervisorComponent*>& components);

    Shutdown& shutdown() { return shutdown_; }
    const Shutdown& shutdown() const { return shutdown_; }
    ProcessBook& book() { return book_; }
    const ProcessBook& book() const { return book_; }
    // The root of every unit: the one record of stop signals and the birth line.
    UnitTree& units() { return units_; }
    const UnitTree& units() const { return units_; }
    // The whole tree as the root unit; once the tracker exists.
    void make_root_unit();
    // A fact that makes the shutdown forced (a service's grace kill, a job's timeout kill);
    // outside the shutdown it is not the shutdown's doing and is not recorded.
    void record_force(ForceKind kind, std::string source, int count);
    const std::vector<ForceFact>& force_facts() const { return force_facts_; }
    // Processes outlived SIGKILL past the force limit, and lastcall stopped waiting for them.
    bool gave_up() const { return gave_up_; }
    // A reaped process: on the record (`forcing`: reaped during the force), told to every
    // component.
    void reaped(const Reaped& r, bool forcing);
    // The tree is empty once lastcall has no child left: the shutdown ends.
    void check_tree_gone();

    // ShutdownActions
    void state_changed(State from, State to, Event why) override;
    void readiness_off() override { host_.readiness_off(); }
    void start_pre_stop() override { host_.start_pre_stop(); }
    void signal_tree(int sig) override;
    void kill_tree() override;
    void forward_extra(int sig) override;

  private:
    // The root's policy (UnitPolicy::admits): p is in the kill scope, is no cleanup helper of
    // the stop (the birth line), belongs to no helper or other unit being stopped, and has not
    // had a stop signal yet.
    bool root_admits(const ProcInfo& p);
    // The root's record of a stop signal that p gets (UnitTree::record): during the shutdown
    // the report itemises it, and no process gets a second one. False when p already had one.
    bool record_stop_signal(const ProcInfo& p, int sig);
    bool send_stop_and_mark(const ProcInfo& p, int sig);
    // The root unit's members for a pass: the bulk listing when the pass runs on it, else the
    // tracker's enumeration; listed_after_ is read just before either.
    std::vector<ProcInfo> root_members(const Unit::OutOfTime& out_of_time);
    // Whether the whole tree's stop may run on the bulk listing (see the .cpp): PID 1 (for the
    // /proc tracker, of the namespace /proc shows), no unit but the main one, a tree of
    // kBulkStopMembers or more. Decided once, at the root's stop.
    bool bulk_stop_fits();
    // The cgroup tracker's: the instance's pids from cgroup.procs as members without a /proc
    // read, where that is exact; the main child and whoever was born after the birth line read
    // from /proc as before; the descendants outside the cgroups (bulk_outsiders). Nothing where
    // nobody_new_since_last_listing.
    std::vector<ProcInfo> bulk_members();
    // A bulk pass has nobody left to find (see the .cpp): no listing is made.
    bool nobody_new_since_last_listing() const;
    // The descendants outside the cgroups that are not `known`, when a pass must list them.
    std::vector<ProcInfo> bulk_outsiders(std::vector<pid_t> known);
    // The /proc tracker's: one read of each process of the namespace that was not signalled
    // already (namespace_members in the .cpp).
    std::vector<ProcInfo> namespace_members();
    // A record of a process signalled during this stop whose pid was not handed out since the
    // first bulk listing: the pid still names that process, which needs no read.
    bool signalled_and_unchanged(const ProcessRecord& r) const;
    // A round the budget cut goes on in a later turn of the loop.
    void after_root_round();
    // Holds the tree still for the stop passes: the cgroup freezer, or (the /proc tracker, a
    // crowded run queue) SIGSTOP to the main group. Empty when neither applies.
    FreezeHold hold_tree_still();
    // `sig` to whole_group_target() in one call.
    bool signal_whole_groups(int sig);
    void give_up();

    TeardownHost& host_;
    const Clock& clock_;
    const std::vector<SupervisorComponent*>& components_;
    Shutdown shutdown_;
    ProcessBook book_;
    UnitTree units_{[this](const ProcInfo& p, int sig) { return record_stop_signal(p, sig); }};
    std::unique_ptr<Unit> root_unit_;
    Scope stop_scope_ = Scope::Tree;  // the root's kill scope (its policy), at its stop
    // The namespace's last pid read just before the root's last enumeration (0: unknown): a pid
    // not handed out since names the process listed (signal_listed).
    pid_t listed_after_ = 0;
    bool bulk_ = false;            // the root's passes run on the bulk listing (bulk_members)
    pid_t bulk_listed_after_ = 0;  // listed_after_ at the shutdown's first bulk listing
    // The instance's cgroups as bulk_stop_fits listed them, with the namespace's last pid read
    // before: the first pass's listing, unless a pid was handed out since.
    struct Listing {
        std::vector<pid_t> pids;
        pid_t listed_after = 0;
    };
    std::optional<Listing> first_listing_;
    // The namespace's last pid read before the last bulk listing, and whether this pass follows
    // a whole pass of its round (nobody_new_since_last_listing).
    pid_t last_listing_after_ = 0;
    bool round_begins_ = false;
    bool pass_follows_whole_pass_ = false;
    // Whether the next bulk pass lists the descendants outside the cgroups (bulk_outsiders):
    // the first does, and each after one that found somebody there not signalled yet.
    enum class Outside { Due, Done };
    Outside outside_ = Outside::Due;
    Event force_cause_ = Event::GraceExpired;  // the event that began Forcing
    std::optional<MonoTime> last_kill_walk_;   // when the force last walked the tree
    long long reaped_at_last_look_ = 0;        // the reaped count when the force last looked
    std::vector<ForceFact> force_facts_;
    bool gave_up_ = false;
};

}  // namespace lastcall
