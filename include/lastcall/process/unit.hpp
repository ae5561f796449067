// SPDX-License-Identifier: Apache-2.0
// A unit of work and its stop: the one lifecycle that every unit kind goes through (the main
// command, each service instance with what its earlier instances left behind, each job run,
// lastcall's own helpers, and the whole tree as the root), and the one record of who had a stop
// signal.
//
// The state model, one unit (unit_transition is the table):
//
//   Running --stop--> Stopping --kill--> Killed --gone--> Gone
//      |                  |                                 ^
//      +------kill--------)---------------------------------+ (Running/Stopping --gone--> Gone)
//   Gone --restart--> Running   (a service's next instance: the same unit, a fresh stop)
//
//   stop     its stop signal goes out once to each member, in rounds (process/stop.hpp: freeze,
//            passes until nobody new, SIGCONT), bounded by the unit's deadline;
//   kill     its grace ended, or the shutdown forced it: SIGKILL (the owner kills its scope);
//   gone     no member is left.
//
// The kinds differ only in their policy (UnitPolicy): which processes are theirs and which are
// helpers of their stop. A work unit (a service instance, a job run) takes a child born to a
// process it signalled for a cleanup helper; the main command and the root tell helpers apart by
// the tree's birth line (UnitTree::birth_line, drawn once, just before the main command's stop
// signal); a helper unit (the pre-stop hook, a job's verify) is never stopped by the tree's pass,
// only killed with the root at the grace.
//
// The tree is the root: it owns the one record of stop signals (UnitTree::record: the
// shutdown's report itemises it, and no process gets a second stop signal from another unit or
// from the tree's own pass) and knows every child unit, so the root's pass leaves alone what a
// child unit's own stop covers (UnitTree::claimed: what it signalled, the cleanup helpers its
// signalled processes start, every process of a helper unit). Owners (the supervisor, the
// service manager, the job scheduler) keep their policies (when to stop, what a kill means for
// their record); the stop itself, its record and its helper rules live here once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

enum class UnitState { Running, Stopping, Killed, Gone };
// Which of a unit's members its stop signal reaches (a service's `kill_scope`): all of them
// (tree), those in its leader's process group (group), or its leader alone (leader). The kill
// at the end of its grace reaches every member, whatever the reach.
enum class StopReach { Tree, Group, Leader };
enum class UnitEvent { Stop, Kill, Gone, Restart };
std::string_view to_string(UnitState s);
// nullopt: the event does not apply in that state (a second stop of a stopping unit, a kill of
// a killed one).
std::optional<UnitState> unit_transition(UnitState from, UnitEvent event);

class Unit;

// What kind of unit of work a Unit is: its helper rule and what the root's pass leaves to it.
enum class UnitRole {
    // A service instance or a job run: a child born to a process it signalled is a cleanup
    // helper of its stop; the root's pass leaves every member of it alone while it stops.
    Work,
    // The main command: its stop signal goes out first, through the pidfd, right after the
    // tree's birth line is drawn; the root's pass tells its cleanup helpers by that line.
    Main,
    // lastcall's own helper (the pre-stop hook, a job's verify): every process of its session is
    // its own, and the root's pass never signals it (a commit step is not the work being
    // stopped). The root's kill at the grace covers it.
    Helper,
    // The whole tree: not a child of the tree; its pass signals what no child unit claims.
    Root,
};

// A unit's stop policy beyond its signal and deadline (given to stop()).
struct UnitPolicy {
    UnitRole role = UnitRole::Work;
    // Root: whether p is a member its pass signals now (the kill scope, the birth line's helper
    // rule, the child units' claims); false leaves p alone. Null: every member is.
    std::function<bool(const ProcInfo&)> admits;
    // Helper: its session (the helper's pid: it is spawned with setsid).
    pid_t session = 0;
};

// The root unit's side: the one record of stop signals, the child units, and the tree's birth
// line.
class UnitTree {
  public:
    // The record of a stop signal that p is about to get: false if p already had one (the
    // supervisor's book during a shutdown; always true where nothing is recorded).
    using Record = std::function<bool(const ProcInfo& p, int sig)>;
    explicit UnitTree(Record record) : record_(std::move(record)) {}
    // Units may outlive the tree (the components that own them are made before the supervisor
    // and destroyed after it): they are detached, and record nothing from then on.
    ~UnitTree();
    UnitTree(const UnitTree&) = delete;
    UnitTree& operator=(const UnitTree&) = delete;

    // p gets sig from a unit's stop or the tree's pass: recorded once, false if it had one.
    bool record(const ProcInfo& p, int sig) const { return record_(p, sig); }
    // A child unit's own stop covers p (see the top): the tree's pass does not signal it.
    bool claimed(const ProcInfo& p) const;
    // p belongs to one of lastcall's own helpers (UnitRole::Helper).
    bool helper_claimed(const ProcInfo& p) const;
    // The unit p belongs to, for the report's unit column: the one that signalled it, else the
    // one whose current session it is in (set_session). Null: none known.
    const Unit* owner_of(const ProcInfo& p) const;
    std::size_t size() const { return units_.size(); }

    // -- the birth line of the whole tree's stop (process/stop.hpp: BirthLine)
    // Where the namespace's last pid is read: opened at start-up, off the path of the main
    // command's stop signal (an open is a path walk).
    void set_last_pid_source(UniqueFd fd) { last_pid_fd_ = std::move(fd); }
    bool has_last_pid_source() const { return static_cast<bool>(last_pid_fd_); }
    // The line now (nullopt where it cannot be read), and the namespace's last pid now.
    std::optional<BirthLine> read_line() const { return read_birth_line(last_pid_fd_.get()); }
    pid_t last_pid() const { return read_last_pid(last_pid_fd_.get()); }
    int last_pid_fd() const { return last_pid_fd_.get(); }
    // The line of this shutdown, drawn once: just before the main command's stop signal, or
    // before the root's first pass if the main command was not signalled first.
    const std::optional<BirthLine>& birth_line() const { return birth_line_; }
    void draw_birth_line(std::optional<BirthLine> line) {
        if (!birth_line_) birth_line_ = line;
    }
    // p, born after the line, is a cleanup helper of the tree's stop (StopHelpers: its parent
    // had the stop signal before it was born and has taken it, or is itself a helper), and so
    // never gets the stop signal. `parent`: its parent's record, if the parent is a member.
    bool stop_helper(const ProcInfo& p, std::optional<StopHelpers::Parent> parent);

  private:
    friend class Unit;
    Record record_;
    std::vector<Unit*> units_;
    UniqueFd last_pid_fd_;  // /proc/sys/kernel/ns_last_pid (or a reserve: no line)
    std::optional<BirthLine> birth_line_;
    StopHelpers stop_helpers_;               // born to a stopping process: never signalled
    std::map<pid_t, const Unit*> sessions_;  // each unit's current session (Unit::set_session)
};

class Unit {
  public:
    using OutOfTime = std::function<bool()>;
    using Members = std::function<std::vector<ProcInfo>()>;
    // A walk that stops at the round's budget (Tracker::members_within): the whole tree's.
    using MembersWithin = std::function<std::vector<ProcInfo>(const OutOfTime& out_of_time)>;
    using Freeze = std::function<std::vector<FreezeHold>()>;
    using Send = std::function<bool(const ProcInfo&, int)>;
    // `members` lists the unit's live processes (its scopes); `freeze` holds them still for a
    // round (empty: nothing to freeze); `send` signals one process through its identity.
    Unit(UnitTree& tree, std::string name, const Clock& clock, Members members, Freeze freeze,
         Send send, UnitPolicy policy = {});
    Unit(UnitTree& tree, std::string name, const Clock& clock, MembersWithin members, Freeze freeze,
         Send send, UnitPolicy policy = {});
    ~Unit();
    Unit(const Unit&) = delete;
    Unit& operator=(const Unit&) = delete;

    const std::string& name() const { return name_; }
    UnitRole role() const { return policy_.role; }
    // Its current instance's session (units are spawned with setsid): its processes are the
    // unit's in the report (UnitTree::owner_of). One session: a service's earlier instances'
    // leftovers are named by the stop signal they had from it.
    void set_session(pid_t sid);
    UnitState state() const { return state_; }
    bool stopping() const { return state_ == UnitState::Stopping; }
    // SIGKILL went out to this instance (kill()), whether or not it is gone since.
    bool killed() const { return kill_sent_; }
    // The end of the current stop's grace (none: not stopping).
    std::optional<MonoTime> deadline() const { return deadline_; }
    // A round the budget cut is owed another (continue_stop), in a later turn of the loop.
    bool round_owed() const { return rounds_.pending; }
    // How the last round ended (a fork storm that outran the passes: OutOfPasses).
    const StopPassResult& last_round() const { return last_round_; }
    std::vector<ProcInfo> members() const { return members_(nullptr); }

    // Running -> Stopping: sig once to each member, its first round; the grace ends at
    // `deadline`. Already stopping: the deadline only moves earlier, and the next round goes
    // on where the record says. What it signalled before this stop began (leftovers of an
    // earlier stop) starts helpers, not members. Returns how many got sig in this round.
    int stop(int sig, MonoTime deadline);
    // The next round of a stop whose last round was cut (round_owed()).
    int continue_stop();
    // A stop's look at its members (a poll): all of them are the unit's to stop.
    void saw(const std::vector<ProcInfo>& members);
    // Stopping/Running -> Killed: the owner killed its scopes; no round is owed any more.
    void kill();
    // The rounds end without a kill (the tree's kill at the shutdown needs no hold).
    void end_rounds() { rounds_.end(); }
    // No member left.
    void gone();
    // A service's next instance: a fresh stop. The record keeps the processes of earlier
    // instances still alive (one that outlived its SIGKILL must not get a second stop signal).
    void restart();

    // Which members the stop signal reaches (default: all), and the leader it is counted from:
    // set at each instance's start. A member out of reach is the unit's still (claims), left
    // to the kill at the end of the grace.
    void set_reach(StopReach reach) { reach_ = reach; }
    void led_by(pid_t leader) { leader_ = leader; }

    // p had this unit's stop signal.
    bool signalled(const ProcInfo& p) const { return signalled_.count(key_of(p)) != 0; }
    // Some member had this unit's stop signal (the main command's: it went out first).
    bool signalled_any() const { return !signalled_.empty(); }
    // The tree's question (UnitTree::claimed): p belongs to this unit's own stop.
    bool claims(const ProcInfo& p) const;

  private:
    friend class UnitTree;
    bool apply(UnitEvent e);
    bool take(const ProcInfo& p);
    bool reaches(const ProcInfo& p) const;
    void forget_session();
    int round();

    UnitTree* tree_;  // null once the tree is gone (~UnitTree)
    std::string name_;
    pid_t session_ = 0;
    const Clock& clock_;
    MembersWithin members_;
    Freeze freeze_;
    Send send_;
    UnitPolicy policy_;
    UnitState state_ = UnitState::Running;
    int sig_ = 0;
    std::optional<MonoTime> deadline_;
    bool kill_sent_ = false;
    StopRounds rounds_;
    StopPassResult last_round_;
    std::set<ProcKey> signalled_;  // got its stop signal: never a second time
    // Born to a signalled process during its stop: its cleanup helpers, not members to signal.
    // Found by a const query (claims), hence mutable.
    mutable std::set<pid_t> helpers_;
    // Signalled before this stop began (what a crashed instance left behind): what they start
    // is their cleanup's helper, not a member the stop missed.
    std::set<pid_t> told_before_;
    // Its members at the last look of a stop in progress.
    std::set<pid_t> last_members_;
    StopReach reach_ = StopReach::Tree;
    pid_t leader_ = 0;
    // Members the stop signal does not reach (reach_): the kill's, not the tree pass's.
    std::set<pid_t> out_of_reach_;
};

}  // namespace lastcall
