// SPDX-License-Identifier: Apache-2.0
// The one stop primitive, for every unit of work (the main command, a service instance, a job
// run) and for the whole tree:
//
//   1. stop signal   once to each member: freeze the unit's cgroups, enumerate, signal every
//                    member not signalled yet, enumerate again until a pass finds nobody new,
//                    thaw. Frozen, nobody forks, so the first pass sees everyone; without a
//                    cgroup to freeze, the repeated passes close the fork race (a member forked
//                    while the previous pass ran) as well as they can. The record of who got it
//                    makes sure no process ever gets it twice (an app with
//                    `process.once('SIGTERM')` dies of a second one).
//   2. SIGCONT       right after it, to each: a stopped process (Ctrl-Z, SIGSTOP) must be able to
//                    act on the stop signal instead of sleeping until the kill.
//   3. grace         the caller waits for the unit's grace (a timer, never a sleep).
//   4. kill          cgroup.kill of the unit's scope, or SIGKILL to each member.
//   5. reap          lastcall is PID 1 or a subreaper: every member is reaped by its loop.
//
// A process born after step 1 (after the thaw) is a cleanup helper of a process that is shutting
// down (a TERM trap that runs `flush.sh`, `pg_dump`, an upload): it is not signalled; step 4 covers
// it if it is still there when the grace ends. lastcall's own helpers (a job's verify, the pre-stop
// hook) are not members of what is being stopped: the caller's `take` refuses them.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "lastcall/core/fd.hpp"
#include "lastcall/process/process_tree.hpp"

namespace lastcall {

// (pid, start time): one process, whatever happens to its pid later.
using ProcKey = std::pair<pid_t, unsigned long long>;
inline ProcKey key_of(const ProcInfo& p) {
    return {p.pid, p.start};
}

// How a call of send_stop_signal ended.
enum class PassEnding {
    // The passes reached everyone: the last found nobody new, or the unit was frozen and the
    // last pass was whole (nobody can be born while frozen).
    Settled,
    // The budget ended the round within a pass: members it had not walked or signalled yet may
    // never have had the stop signal. The caller goes on in a later round, with a longer budget
    // (the walk did not fit in this one).
    CutWithinPass,
    // The budget ended the round between two whole passes of an unfrozen unit: the next pass
    // would have found members born meanwhile. A later round goes on, at the same budget.
    CutBetweenPasses,
    // max_passes ran out before the tree settled (a fork storm): the rest gets the grace kill.
    OutOfPasses,
};

struct StopPassResult {
    PassEnding ending = PassEnding::OutOfPasses;
    int signalled = 0;    // processes that got the stop signal in this call
    int passes = 0;       // enumerations started in this call
    bool frozen = false;  // the passes ran with every cgroup of the unit frozen

    bool settled() const { return ending == PassEnding::Settled; }
    // The budget cut the round: another is owed (send_stop_round).
    bool cut() const {
        return ending == PassEnding::CutWithinPass || ending == PassEnding::CutBetweenPasses;
    }
};

struct StopPassIo {
    std::function<std::vector<ProcInfo>()> members;  // the unit's live members
    std::function<bool(const ProcInfo&, int)> send;  // signal_exact in production
    // True once the passes must end (a time budget: each pass over a 10,000-process tree takes
    // tens of milliseconds, more under a fork bomb, and the loop must get back to its grace
    // timer). Checked before each pass after the first and every 16 signalled members within a
    // pass. Null: only max_passes bounds the passes.
    std::function<bool()> out_of_time;
    // Freezes the unit's cgroups for the passes (FreezeHold); the holds thaw when the passes
    // are over. Null or empty: nothing to freeze (the /proc tracker).
    std::function<std::vector<FreezeHold>()> freeze;
    // True once the end of the grace has come. Given, a pass signals every member its
    // enumeration found until then, also past out_of_time: an enumeration of 10,000 members
    // takes the whole budget, and a pass that then signalled 16 of them before it gave way left
    // the next round to enumerate them all again, so that 2,516 of 10,000 idle processes had
    // only the kill at the end of an 8 s grace (issue 42). Signalling what was found costs about
    // what finding it did. Null: out_of_time ends the signals too.
    std::function<bool()> past_deadline;
};

// Steps 1 and 2. `take(p)` says whether p should get the stop signal now and records that it did
// (true at most once per process: the caller's record is the single source of "already had it").
// At most max_passes enumerations, and none started once io.out_of_time() says so: a fork storm
// must not hold the event loop past the grace; the kill at grace end covers whatever the passes
// did not reach. A round the budget cut (result.cut()) is owed another (send_stop_round).
// `carried`: the holds of a round the budget cut, kept (still frozen) for the caller's next
// call, which goes on without freezing again and thaws when it is not cut. Null: every call
// freezes and thaws by itself.
StopPassResult send_stop_signal(const StopPassIo& io, int sig,
                                const std::function<bool(const ProcInfo&)>& take,
                                int max_passes = 16, std::vector<FreezeHold>* carried = nullptr);

// How long the stop passes over one unit (or the tree) may run before they give way to the loop:
// its grace timer, the other units' stops. Whatever the passes did not reach, the kill at grace
// end covers.
inline constexpr std::chrono::milliseconds kStopPassBudget{250};
// kStopPassBudget, or LASTCALL_STOP_PASS_BUDGET_MS from lastcall's environment: the tests set
// it to 1 ms so that a small tree's first pass is cut on any machine.
std::chrono::milliseconds stop_pass_budget_length();

// An out_of_time for StopPassIo: true once `rounds` budgets have passed since this call, on the
// clock now() reads, or at `not_after` if that comes first. A caller that goes on after a cut round
// doubles `rounds`: a walk that cannot finish within one budget (tens of thousands of processes)
// still finishes in a later round. `not_after` is the end of the unit's grace: the loop is not
// free while a round runs, so a round that outlasted it held back the grace's own timer, and the
// kill of a fork bomb came late by the rest of the round (160-330 ms seen with a 2 s grace).
template <typename Now, typename Time = decltype(std::declval<Now>()())>
std::function<bool()> stop_pass_budget(Now now, int rounds = 1,
                                       std::optional<Time> not_after = std::nullopt) {
    auto end = now() + stop_pass_budget_length() * rounds;
    if (not_after && *not_after < end) end = *not_after;
    return [now, end] { return now() >= end; };
}

// The moment the stop began, as the kernel dates processes: a process born after it may be a
// cleanup helper of a process that is shutting down (its TERM trap forked it), not a member to
// stop; it is one if its parent had the stop signal before it was born (the caller decides:
// UnitTree::stop_helper).
// /proc/PID/stat dates a process in clock ticks (10 ms); within the tick of the stop, pids tell
// the order: the pid namespace hands them out in increasing order (ns_last_pid is the last one
// given), so a process born after the stop has a larger one unless the pids wrapped around
// pid_max within those 10 ms (then it is taken for a member: the old behaviour).
struct BirthLine {
    unsigned long long boottime_ns = 0;  // CLOCK_BOOTTIME just before the stop signal
    pid_t last_pid = 0;                  // ns_last_pid then
    bool born_after(const ProcInfo& p) const {
        // The kernel's nsec_to_clock_t: whole clock ticks, rounded down.
        unsigned long long tick = boottime_ns / ns_per_clock_tick();
        if (p.start != tick) return p.start > tick;
        return p.pid > last_pid;
    }
    static unsigned long long ns_per_clock_tick();
};

// The pid namespace's last pid (ns_last_pid) now, from an open /proc/sys/kernel/ns_last_pid; 0
// where it cannot be read.
pid_t read_last_pid(int last_pid_fd);

// Whether `sig` is still pending for process `pid` (/proc/PID/status: ShdPnd, sent to the
// process, or SigPnd, to its main thread): it has not taken the signal yet, so nothing it forks
// now comes from its reaction to it. A child whose pid is above the last pid read after its
// parent's stop signal was born after that signal went out, but its fork may have been under
// way when it came (the kernel completes a fork that a signal to the one process finds in
// progress; the pid is allocated late in it): while the parent's signal is pending, such a
// child is the parent's pre-stop work (a pre-fork server's worker), not a cleanup helper. Once
// the parent has taken the signal this says nothing about such a child. False where it cannot
// be read.
bool stop_signal_pending(pid_t pid, int sig);

// Which processes born after the birth line are cleanup helpers of the whole tree's stop, and
// so never get the stop signal (docs/design.md, step 1 of the stop). A process is one if its
// parent had the stop signal before it was born and has taken it (a child forked while the signal
// was still pending is the parent's pre-stop work: a pre-fork server's worker), or if its parent
// is itself a helper. A process whose parent is gone and unknown is a member. Once the parent
// has taken its signal, a child whose fork was under way when the signal came looks exactly
// like a helper and is taken for one (the known limit in docs/design.md).
// A helper stays one (pid and start time): a helper whose parent exits afterwards (a TERM
// trap's `flush &` followed by `exit`) is reparented to lastcall, and judged again it would have
// looked like an orphan of unknown origin and got the stop signal that its cleanup is not meant
// to get, or not, depending on whether a later pass happened to run after the parent's exit.
// Kept, the parent's /proc status is also read once per helper, not once per pass (one that
// cannot be read counts as a signal taken: a helper, for good).
class StopHelpers {
  public:
    // What the book knows of a member parent: its stop signal (0: none yet) and the last pid
    // handed out once that signal was out (0: unknown).
    struct Parent {
        int stop_signal = 0;
        pid_t last_pid_at_stop = 0;
    };
    // What is read from /proc, and only when the answer depends on it.
    struct Probes {
        std::function<bool(pid_t pid, int sig)> signal_pending;  // stop_signal_pending
        // The start time of the process that has this pid now (read_proc_stat); none if gone.
        std::function<std::optional<unsigned long long>(pid_t pid)> start_of;
    };

    // p was born after the birth line; `parent` is its parent's record if the parent is a
    // member (none: the parent is gone, is lastcall, or is a helper).
    bool is_helper(const ProcInfo& p, std::optional<Parent> parent, const Probes& probes) {
        if (is_known(p.pid, p.start)) return true;
        bool helper = parent ? parent->stop_signal && parent->last_pid_at_stop > 0 &&
                                   p.pid > parent->last_pid_at_stop &&
                                   !probes.signal_pending(p.ppid, parent->stop_signal)
                             : helpers_.count(p.ppid) && is_known(p.ppid, probes.start_of(p.ppid));
        if (helper) helpers_[p.pid] = p.start;
        return helper;
    }

  private:
    // A helper this process is (the same pid and start time). A known pid with another start
    // was handed out again, to a new process: forgotten, so that the new one is judged afresh
    // and so are its children.
    bool is_known(pid_t pid, std::optional<unsigned long long> start) {
        auto known = helpers_.find(pid);
        if (known == helpers_.end()) return false;
        if (start && known->second == *start) return true;
        helpers_.erase(known);
        return false;
    }

    std::map<pid_t, unsigned long long> helpers_;  // pid -> start time
};

// Reads the birth line now, before the first stop signal goes out. `last_pid_fd`: an open
// /proc/sys/kernel/ns_last_pid (opened at start-up: its open is a path walk the stop should not
// wait for). nullopt where it cannot be read: then nobody counts as born after.
std::optional<BirthLine> read_birth_line(int last_pid_fd);
// /proc/sys/kernel/ns_last_pid, for read_birth_line (an empty fd where it cannot be opened).
UniqueFd open_ns_last_pid();

// One unit's stop passes across turns of the loop. A round the budget cuts leaves members that
// never had the stop signal: they must get it (not only the kill at grace end), so a cut round
// is owed a next one, in a later turn (the loop's timers and the other units' stops come
// first). Meanwhile the cut round's holds stay (the unit stays frozen: no cleanup helper is born
// to be taken for a member), and each cut doubles the next round's budget (a walk longer than
// one budget still finishes).
struct StopRounds {
    std::vector<FreezeHold> holds;  // carried from a cut round to the next
    int budgets = 1;                // the next round's budget, in kStopPassBudget
    bool pending = false;           // the last round was cut: another is owed
    int passes = 0;                 // passes of this stop's rounds so far (at most 16 in all)

    // The out_of_time of the next round, on the clock now() reads; it ends at `not_after` (the
    // end of the unit's grace) at the latest.
    template <typename Now, typename Time = decltype(std::declval<Now>()())>
    std::function<bool()> budget(Now now, std::optional<Time> not_after = std::nullopt) const {
        return stop_pass_budget(now, budgets, not_after);
    }
    // The passes need no more rounds (the kill went out, the unit is gone): thaw.
    void end() {
        holds.clear();
        budgets = 1;
        pending = false;
        passes = 0;
    }
};

// A round of steps 1 and 2 for a unit whose stop may span turns: send_stop_signal with the
// rounds' holds, then the rounds' record of whether another round is owed. io.out_of_time should
// be rounds.budget(...).
StopPassResult send_stop_round(const StopPassIo& io, int sig,
                               const std::function<bool(const ProcInfo&)>& take,
                               StopRounds& rounds);

// A freeze callback's result for a single hold.
inline std::vector<FreezeHold> one_hold(FreezeHold hold) {
    std::vector<FreezeHold> holds;
    holds.push_back(std::move(hold));
    return holds;
}

// Does signal `sig` end a stopped process's sleep by itself? SIGKILL does; SIGCONT is the
// wake-up itself. Any other stop signal needs a SIGCONT after it.
constexpr bool needs_sigcont(int sig) {
    return sig != SIGKILL && sig != SIGCONT;
}

}  // namespace lastcall
