// SPDX-License-Identifier: Apache-2.0
// A run's stop through its Unit (process/unit.hpp): its timeout, a lease lost or taken over,
// the kill after it, and the interruption recorded before the shutdown's force.
#include "lastcall/jobs/scheduler.hpp"
#include "scheduler_internal.hpp"

#include "lastcall/metrics/metrics.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

void JobScheduler::arm_timeout_timer() {
    std::optional<MonoTime> next;
    auto now = host_->clock().now();
    for (const auto& [id, run] : runs_) {
        // A stop round cut by its budget goes on in the timer's next turn.
        auto round =
            run.unit && run.unit->round_owed() ? std::optional<MonoTime>(now) : std::nullopt;
        for (const auto& at : {run.deadline, round, lease_stop_at(run)})
            if (at && (!next || *at < *next)) next = at;
    }
    if (auto st = timeout_timer_->arm(next); !st)
        spdlog::error("job timeout timer: {}", st.error().message);
}

// When a shared ledger's run must stop because its lease was not confirmed for 2/3 of it.
std::optional<MonoTime> JobScheduler::lease_stop_at(const Run& run) const {
    if (!facts().shared() || run.recorded || run.phase == Phase::Lingering || !run.lease_renewed)
        return std::nullopt;
    return *run.lease_renewed + Millis{facts().identity().lease_ms} * 2 / 3;
}

// The run's lease was last confirmed 2/3 of it ago (the ledger unreachable, hung, or slower than
// the lease): another replica may soon call it expired and retry it, so this replica stops it
// first, as an interruption that can never be completed (written when the ledger answers again,
// or by that replica), and kills what is left of it lease/6 later: at 5/6 of the lease, before
// the database's lease_until (at least the renewal's start plus the lease) has passed.
void JobScheduler::lease_self_stop(Run& run, MonoTime now) {
    const JobSpec& spec = jobs_[run.job].spec;
    std::string why =
        "lease lost: the ledger was unreachable for " +
        format_duration(std::chrono::duration_cast<Millis>(now - *run.lease_renewed)) + " (" +
        (ledger_error_.empty() ? "no renewal confirmed" : ledger_error_) + ")";
    spdlog::error("job {}: run {}: {}; stopping it", spec.name, run.id, why);
    run.first = first_of(run.first, Intervention::StopRequest);
    interrupt(run, {}, why);
    if (!run.timed_out) stop_scope(run, lease_kill_after(), "lease lost");
}

void JobScheduler::on_timeout_timer() {
    auto now = host_->clock().now();
    for (auto& [id, run] : runs_) {
        if (run.unit && run.unit->round_owed()) stop_round(run);
        if (auto stop = lease_stop_at(run); stop && *stop <= now) lease_self_stop(run, now);
        if (!run.deadline || *run.deadline > now) continue;
        if (run.phase == Phase::Lingering && !run.timed_out) continue;
        const JobSpec& spec = jobs_[run.job].spec;
        // The stop primitive on the run's whole scope (setsid descendants included): the stop
        // signal once to each member, SIGCONT, then after kTimeoutKillAfter the scope is killed.
        if (!run.timed_out) {
            spdlog::warn("job {}: run {} timed out after {}: sending SIGTERM to its processes",
                         spec.name, run.id, format_duration(*spec.timeout));
            stop_scope(run, kTimeoutKillAfter, "timeout");
        } else {
            spdlog::warn("job {}: run {} still running {} after it was stopped: SIGKILL", spec.name,
                         run.id, format_duration(run.kill_after));
            run.unit->kill();  // the kill works on frozen processes; no round is owed
            int n = run.scope->kill([](const ProcInfo&) { return true; });
            host_->record_force(ForceKind::Sigkill, "job " + spec.name + ": " + run.stop_cause, n);
            run.deadline.reset();
            continue;
        }
        run.first = first_of(run.first, Intervention::Timeout);
    }
    arm_timeout_timer();
}

// The stop signal once to each member of the run's scope, SIGCONT, and the SIGKILL of the
// whole scope kTimeoutKillAfter later (on_timeout_timer).
void JobScheduler::stop_scope(Run& run, Millis kill_after, const char* cause) {
    run.timed_out = true;
    run.stop_cause = cause;
    run.kill_after = kill_after;
    // Before the round, which ends there at the latest.
    run.deadline = host_->clock().now() + kill_after;
    stop_round(run);
    arm_timeout_timer();
}

// A round of the stop passes over the run's scope. One cut by its budget (a fork storm in the
// run) goes on in the timer's next turn, after the loop's other work: the members it had not
// reached get the stop signal too, not only the kill after it.
void JobScheduler::stop_round(Run& run) {
    bool more = run.unit->round_owed();
    int n = more ? run.unit->continue_stop() : run.unit->stop(SIGTERM, *run.deadline);
    if (more) {
        spdlog::debug("job {}: run {}: sent SIGTERM to {} more process(es)",
                      jobs_[run.job].spec.name, run.id, n);
    }
}

// The ledger no longer holds this run as this replica's (another replica recorded it
// interrupted after its lease expired, or a `replace` claim did): it is stopped, and nothing
// it does after this is recorded.
void JobScheduler::take_away(Run& run, const std::string& why) {
    const JobSpec& spec = jobs_[run.job].spec;
    if (run.recorded || run.phase == Phase::Lingering) return;
    run.recorded = true;
    run.first = first_of(run.first, Intervention::StopRequest);
    spdlog::warn("job {}: run {} (pid {}) is no longer this replica's: {}; stopping it", spec.name,
                 run.id, run.pid, why);
    interrupted_.push_back({run.id, spec.name, run.pid, run.scheduled_at, why});
    if (!run.timed_out) stop_scope(run, lease_kill_after(), "taken over");
}

// A run that is no longer (or soon no longer) this replica's is killed this long after its stop
// signal: within the lease, so that it is gone before another replica may retry it.
Millis JobScheduler::lease_kill_after() const {
    Millis lease{facts().identity().lease_ms};
    if (lease.count() <= 0) return kTimeoutKillAfter;
    return std::min<Millis>(kTimeoutKillAfter, lease / 6);
}

void JobScheduler::interrupt(Run& run, RunOutcome outcome, const std::string& reason) {
    run.recorded = true;  // from here on nothing completes it, written or not
    run.interrupt_reason = reason;
    std::int64_t id = run.id;
    std::string name = jobs_[run.job].spec.name;
    pid_t pid = run.pid;
    std::int64_t at = run.scheduled_at;
    finish_record(
        id, name, RunState::Interrupted, outcome, reason,
        [this, id, name, pid, at, outcome, reason](Result<bool> done) {
            auto it = runs_.find(id);
            if (!done) {
                // Written again later; and at the leader's exit with its real status.
                if (it != runs_.end()) it->second.interrupt_pending = true;
                note_unwritten(id, name, RunState::Interrupted, outcome, reason,
                               done.error().message);
                spdlog::error(
                    "job {}: run {} interrupted ({}) but not recorded: {}; it will never be "
                    "recorded completed",
                    name, id, reason, done.error().message);
                return;
            }
            if (it != runs_.end()) it->second.interrupt_pending = false;
            written(id);
            if (!*done) {
                spdlog::warn("job {}: run {}: `interrupted` refused, it already has a final state",
                             name, id);
                return;
            }
            spdlog::warn("job {}: run {} (pid {}) interrupted: {}", name, id, pid, reason);
            interrupted_.push_back({id, name, pid, at, reason});
        });
}

void JobScheduler::before_force(Event why) {
    // The grace ran out (or the stop was escalated) and SIGKILL goes out next. Every run still
    // in flight is interrupted now, so that nothing after the kill can pass for its result.
    std::string reason = why == Event::GraceExpired
                             ? "grace expired at shutdown"
                             : "shutdown escalated to SIGKILL before the grace ran out";
    for (auto& [id, run] : runs_) {
        if (run.recorded || run.phase == Phase::Lingering) continue;
        // Its timeout reached it first: its ending is decided (failed, reason timeout, when its
        // leader is reaped), and the shutdown's kill changes nothing about it.
        if (run.first == Intervention::Timeout) continue;
        interrupt(run, {}, reason);
    }
}

}  // namespace lastcall
