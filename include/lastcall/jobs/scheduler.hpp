// SPDX-License-Identifier: Apache-2.0
// The scheduler: turns each job's fire times into admitted, recorded runs, and runs into
// promoted artifacts and terminal ledger records.
//
// A run, in order:
//   fire -> Admission::try_admit() (refused once draining began: `skipped: shutting down`)
//        -> ledger row `scheduled` -> spawn into lastcall's tree -> `started`
//        -> leader exits 0 -> output staged, non-empty -> verify (spawned, its exit handled in
//           the loop) -> fsync, rename onto the final name, fsync the directory
//        -> `completed` and the watermark, in one transaction (promote -> completed -> watermark)
//        -> the ticket is released once the run's scope (process/process_tree.hpp) is empty.
// At shutdown the run's tree gets the stop signal with the rest of lastcall's tree; when the
// grace runs out, before_force() marks every run still in flight `interrupted` before SIGKILL,
// and its later exit cannot change that record.
//
// Never waiting (issue 38): every ledger call goes through the ledger worker
// (jobs/ledger_worker.hpp), off the event loop, with a deadline; the scheduler hears the answer
// later, on the loop. So a fire time is: admitted (its ticket) -> claimed (one call for every
// fire time due at that instant) -> started, a slice of spawns per loop turn. What a run's record
// could not be written as (an error, or no answer by the deadline: outcome unknown) is kept,
// written again later, and named in the report; a run is never completed on a guess.
//
// With a shared ledger (PostgreSQL, docs/cluster.md) every replica computes the same fire times
// and claims each one; the row `started` is the claim, so a replica that loses records and runs
// nothing. A lease tick (every second, or lease/3 if shorter; never a second one while the
// first's call is out) then:
//   renews the leases of this replica's runs; a run whose lease was taken away (expired and
//     recorded interrupted by another replica, or replaced) is stopped, with no record of its own;
//   turns every run whose lease expired (its replica died) into `interrupted`, and applies the
//     job's on_interrupted policy: a retry is claimed like a fire time, so exactly one replica
//     retries it;
//   writes again the records that could not be written (the database was unreachable).
// Independently of any call in flight, the timeout timer stops a run whose lease was last
// confirmed 2/3 of the lease ago (a partition, a hung database: another replica will soon call
// it expired), as an interruption, never completed, and kills it lease/6 later: gone before the
// lease can expire anywhere (lease_self_stop()).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lastcall/core/event_loop.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/jobs/ledger_worker.hpp"
#include "lastcall/jobs/run_ending.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/supervisor/supervisor.hpp"
#include "lastcall/supervisor/unit_host.hpp"

namespace lastcall {

class JobScheduler final : public SupervisorComponent {
  public:
    // Mode::OnLoop: the unit tests' (no thread; the ledger's calls run as the host's posted tasks).
    JobScheduler(std::vector<JobSpec> jobs, std::unique_ptr<Ledger> ledger,
                 LedgerWorker::Mode mode = LedgerWorker::Mode::Thread);

    // Final runs older than this are pruned while lastcall runs (`retention`), a batch at a time.
    void set_retention(Millis retention) { retention_ = retention; }
    // Where the runs' prefixed output goes, shared with the services (process/unit_output.hpp);
    // the jobs' names widen its column. Unset: the scheduler makes its own on stdout.
    void set_output(std::shared_ptr<UnitOutput> output);

    Status attach(Supervisor& sup) override;
    // The same on any host (the unit tests' fake): what attach() does once it has one.
    Status attach_host(UnitHost& host);
    void state_changed(State from, State to) override;
    void before_force(Event why) override;
    void reaped(const Reaped& r) override;
    bool runs_units() const override { return true; }
    void settle_records() override;
    void contribute_report(JsonWriter& j) override;
    void contribute_metrics(MetricsWriter& m) override;
    void finished(int exit_code) override;

  private:
    // Running: its leader runs. Finishing: the leader exited and left processes behind; the
    // run is over, and judged, when its scope is empty (its timeout still covers them, and it
    // still counts for the job's overlap). Verifying: the verify command runs. Lingering:
    // recorded, and what was killed is on its way out (the ticket is released once it is gone).
    enum class Phase { Running, Finishing, Verifying, Lingering };
    struct Run {
        std::int64_t id = 0;
        std::size_t job = 0;
        std::int64_t scheduled_at = 0;
        pid_t pid = -1;            // the job's leader
        pid_t verify_pid = -1;     // the verify command while Phase::Verifying
        int leader_status = 0;     // the leader's wait status, judged once the run is Finishing
        bool left_behind = false;  // the leader ended by itself, leaving processes running
        Phase phase = Phase::Running;
        std::optional<Ticket> ticket;
        bool recorded = false;  // a terminal state is in the ledger (or interrupted is due)
        std::optional<MonoTime> deadline;  // the timeout, then the SIGKILL after it
        bool timed_out = false;  // the stop signal went out (timeout, lease lost, taken away)
        Millis kill_after{0};    // ... and the scope is killed this long after it
        std::string stop_cause;  // why: "timeout", "lease lost", "taken over"
        std::unique_ptr<UnitScope> scope;  // every process of the run, verify included
        // Its stop (process/unit.hpp), over the scope: the timeout's SIGTERM once to each
        // member, in rounds (a cut round goes on at the timer's next turn), then the kill.
        std::unique_ptr<Unit> unit;
        // Its verify, a helper unit of lastcall's own (UnitRole::Helper): the tree's stop
        // signal leaves its session alone; the run's own stop and the final kill do not.
        std::unique_ptr<Unit> verify;
        Intervention first = Intervention::None;  // lastcall's first intervention
        // `interrupted` could not be written: it is tried again at the leader's exit, and the
        // run is never completed.
        bool interrupt_pending = false;
        std::string interrupt_reason;
        std::string staging;      // this run's own staging file (empty: no output)
        std::string resume_from;  // a retry: the interrupted run's staging file, if kept
        std::int64_t key_at = 0;  // the scheduled time of the run key (the retried slot)
        std::optional<std::int64_t> retry_of;
        // A shared ledger: when the lease was last renewed (the renewal's start: the database's
        // lease_until is at least this plus the lease).
        std::optional<MonoTime> lease_renewed;
        std::optional<std::int64_t> watermark;  // the job's, when the run was claimed
    };
    struct JobState {
        JobSpec spec;
        std::optional<cron::sys_seconds> next_fire;
        std::optional<std::int64_t> queued_id;  // overlap = queue: the one waiting run
        std::int64_t queued_at = 0;
        bool queueing = false;  // the queued run's row is being written
        int running = 0;
        int claiming = 0;  // fire times of it whose claim is out
    };
    struct Interrupted {
        std::int64_t id;
        std::string job;
        pid_t pid;
        std::int64_t scheduled_at;
        std::string reason;
    };

    // A fire time (or a retry) to be claimed, and what it became once claimed.
    struct Due {
        std::size_t job = 0;
        std::int64_t scheduled_at = 0;
        std::vector<std::int64_t> retry_of;
        bool keep_staging = false;
        std::int64_t key_at = 0;
    };
    struct Asked {
        Due due;
        std::optional<Ticket> ticket;
        MonoTime claimed_at{};
    };
    struct Claimed {
        Result<Claim> claim{Claim{}};
        std::vector<std::int64_t> retry_of;  // with the released runs a one-machine fire retries
        std::int64_t key_at = 0;
    };
    // A fire time whose claim was not answered (or failed), and what became of it: decided on
    // the worker, behind the claim (record_unstarted).
    struct Unstarted {
        std::size_t index = 0;  // the request's place in the claim
        std::string job;
        std::int64_t scheduled_at = 0;
        std::string why;  // why the claim's answer did not say
        // What the ledger holds now: the claim's row interrupted (it landed), a skipped row
        // written here, or the claim's own row (skipped, or another row's fire time).
        RunState state = RunState::Skipped;
        std::int64_t id = 0;   // the claim's row (0: none)
        bool written = false;  // by this record
        std::string error;     // this record failed
    };
    struct ToStart {
        Asked asked;
        Claim claim;
        std::vector<std::int64_t> retry_of;
        std::int64_t key_at = 0;
    };
    // What the worker needs of a job to apply its on_interrupted policy.
    struct JobPolicy {
        std::string name;
        OnInterrupted on_interrupted;
        std::string output;
    };
    struct Retry {
        std::size_t job;
        std::int64_t scheduled_at;
        std::vector<std::int64_t> of;
        bool keep_staging;
        bool released = false;
    };
    struct Hold {
        std::size_t job = 0;
        std::int64_t id = 0;
        std::string staging;
        bool none = false;  // on_interrupted = none (else: held)
        std::string error;  // its recovery mark could not be written
    };
    struct RecoveryPlan {
        std::vector<Hold> holds;
        std::vector<Retry> retries;
    };

    const Ledger& facts() const { return ledger_->facts(); }
    Millis call_budget() const;
    std::vector<JobPolicy> policies() const;
    static Result<RecoveryPlan> plan_recovery(Ledger& l, const std::vector<JobPolicy>& jobs);
    void apply_plan(const RecoveryPlan& plan);
    cron::sys_seconds wall_seconds() const;
    void recover(std::vector<RunRecord> fixed);
    void on_lease_timer();
    void on_tick_answer(const std::vector<std::int64_t>& ids, MonoTime sent, bool ok,
                        const std::string& error);
    void lease_self_stop(Run& run, MonoTime now);
    std::optional<MonoTime> lease_stop_at(const Run& run) const;
    void stop_scope(Run& run, Millis kill_after, const char* cause);
    void stop_round(Run& run);
    Millis lease_kill_after() const;
    void take_away(Run& run, const std::string& why);
    void retry_unwritten();
    void refresh_counts();
    void on_prune_timer();
    void on_fire_timer();
    void note_missed(const JobState& job, const std::vector<std::int64_t>& missed,
                     std::vector<Ledger::Skip>& rows);
    void record_missed(std::vector<Ledger::Skip> rows);
    void on_timeout_timer();
    void arm_fire_timer();
    void arm_timeout_timer();
    void fire(std::size_t job, std::int64_t scheduled_at, std::vector<Due>& due);
    void queue_run(std::size_t job, std::int64_t scheduled_at);
    void claim(std::vector<Due> due);
    void on_claimed_late(const std::vector<std::string>& names, Result<std::vector<Claimed>>& late);
    void on_claimed(std::vector<Asked>& asked, Result<std::vector<Claimed>>& answer,
                    const std::shared_ptr<std::vector<Result<Claim>>>& did);
    static std::vector<Unstarted> record_unstarted(Ledger& l, const std::vector<Result<Claim>>& did,
                                                   std::vector<Unstarted> fire_times);
    void on_unstarted(const std::vector<Unstarted>& asked, Result<std::vector<Unstarted>>& r);
    void pump_starts();
    void judge_exits();
    void not_started(const ToStart& s, const std::string& why);
    void begin_run(std::size_t job, std::int64_t id, std::int64_t scheduled_at, Ticket ticket,
                   std::optional<MonoTime> claimed_at, const std::vector<std::int64_t>& retry_of,
                   bool keep_staging, std::int64_t key_at, std::optional<std::int64_t> watermark);
    void finish_record(std::int64_t id, const std::string& job, RunState to, RunOutcome outcome,
                       const std::string& reason, std::function<void(Result<bool>)> then);
    void queue_ending(Ledger::Ending ending, std::function<void(Result<bool>)> answer);
    void flush_endings();
    void queue_pid(std::int64_t id, std::int64_t pid);
    void flush_pids();
    void interrupt(Run& run, RunOutcome outcome, const std::string& reason);
    void note_unwritten_row(const std::string& job, RunState state, const std::string& error,
                            std::int64_t scheduled_at);
    void note_unwritten(std::int64_t id, const std::string& job, std::string_view state,
                        const std::string& error, std::int64_t scheduled_at = 0);
    void note_unwritten(std::int64_t id, const std::string& job, RunState to, RunOutcome outcome,
                        const std::string& reason, const std::string& error);
    void written(std::int64_t id);
    void warn_local_outputs();
    void remove_old_staging(const JobSpec& spec, const std::string& keep);
    void record_skipped(std::size_t job, std::int64_t scheduled_at, const std::string& reason);
    // A fire time the shutdown turned away (admission closed): refused in the admission's count
    // and recorded skipped, `queued`: its queued row (queued_id) finished; else a row of its own,
    // but only with a ledger of this machine's.
    void refuse_at_shutdown(std::size_t job, std::int64_t scheduled_at, bool queued);
    void flush_skips();
    void schedule_flush(bool out, bool& posted, void (JobScheduler::*flush)());
    void say_unwritten() const;
    struct Unwritten;
    // A record of a fire time that never ran (skipped, scheduled, or a start not recorded).
    static bool never_ran(const Unwritten& u);
    struct UnwrittenFireTimes {
        std::string job;
        std::string state;
        std::size_t count = 0;
        std::int64_t first = 0, last = 0;  // fire times (0: none known)
        std::string error;
    };
    std::vector<UnwrittenFireTimes> unwritten_fire_times() const;
    void on_leader_exit(Run& run, int status);
    void judge(Run& run, bool after_leftovers);
    void on_verify_exit(Run& run, int status);
    void start_verify(Run& run);
    void promote(Run& run);
    void fail(Run& run, RunOutcome outcome, const std::string& reason);
    void complete(Run& run);
    void record_completed(std::int64_t id, const std::string& name, const std::string& promoted);
    void record_failed(std::int64_t id, const std::string& name, RunOutcome outcome,
                       const std::string& reason);
    void after_exit(Run& run);
    void release_finished_runs();
    void start_queued(std::size_t job);
    void record_unstarted_queued(std::int64_t id, std::int64_t at, const std::string& name,
                                 const std::string& why);
    std::vector<std::string> environment(const Run& run, const std::string& staging);
    UniqueFd capture_output(const std::string& job, SpawnSpec& sp);

    std::vector<JobState> jobs_;
    std::unique_ptr<Ledger> opening_;  // the ledger until attach hands it to the worker
    LedgerWorker::Mode mode_;
    std::unique_ptr<LedgerWorker> ledger_;
    UnitHost* host_ = nullptr;
    std::shared_ptr<UnitOutput> out_;
    std::unique_ptr<WallTimer> fire_timer_;  // fire times are wall-clock times
    std::unique_ptr<WakeTimer> timeout_timer_;
    std::unique_ptr<WakeTimer> lease_timer_;     // a shared ledger's lease tick
    std::optional<MonoTime> ledger_down_since_;  // the tick's last call to the ledger failed
    std::string ledger_error_;                   // ... and what it said
    bool tick_out_ = false;                      // a lease tick's call is out
    bool rewrite_out_ = false;                   // retry_unwritten's call is out
    bool counts_out_ = false;                    // the metrics' count is out
    bool settled_ = false;                       // settle_records() ran: no more calls
    bool settling_ = false;  // settle_records() runs: no posted task runs, flush at once
    std::optional<MonoTime> records_until_;  // the end of the records' time at the end
    std::optional<Millis> retention_;
    std::unique_ptr<WakeTimer> prune_timer_;
    bool prune_out_ = false;
    std::vector<Ledger::JobCount> counts_;  // the last count the ledger gave
    std::map<std::int64_t, Run> runs_;
    std::deque<ToStart> starts_;  // claimed, to be spawned a slice per loop turn
    bool pump_posted_ = false;
    std::deque<std::pair<pid_t, int>> exits_;  // reaped, to be judged a slice per loop turn
    bool exits_posted_ = false;
    // Runs whose final record was sent and not yet confirmed: their leases are still renewed.
    std::set<std::int64_t> unconfirmed_;
    // Final records waiting for the batch in flight (one call, one statement, for all of them).
    struct PendingEnding {
        Ledger::Ending ending;
        std::function<void(Result<bool>)> answer;
    };
    std::vector<PendingEnding> endings_;
    bool endings_posted_ = false;                              // a flush is posted
    bool endings_out_ = false;                                 // a batch is with the ledger
    std::vector<std::pair<std::int64_t, std::int64_t>> pids_;  // runs spawned, pids to record
    bool pids_posted_ = false;
    bool pids_out_ = false;
    std::vector<Ledger::Skip> skips_;  // fire times skipped, waiting for the batch in flight
    bool skips_posted_ = false;
    bool skips_out_ = false;
    // When the fire timer was armed, by both clocks: a fire time missed is told apart as a clock
    // step or suspend (the wall clock moved further than the monotonic one) or lastcall running
    // late (stopped, starved).
    std::optional<std::pair<MonoTime, WallTime>> fire_armed_;
    // Retries of interrupted runs, started on the first turn of the loop (not from attach(),
    // which runs before the main child exists).
    struct Unwritten {
        std::int64_t id = 0;  // 0: no row (a claim that could not be written)
        std::string job;
        std::int64_t scheduled_at = 0;  // a fire time that never ran: its time (0: not known)
        std::string state;              // the record that could not be written
        std::string error;
        // Written again (each lease tick, and at the end) until it lands or the grace ends.
        RunState to = RunState::Failed;
        RunOutcome outcome;
        std::string reason;
        bool retry = false;
    };
    std::vector<Unwritten> unwritten_;
    std::vector<Retry> retries_;
    std::optional<MonoTime> drain_started_;
    std::vector<Interrupted> interrupted_;
    long skipped_at_shutdown_ = 0;
    long unclaimed_ = 0;  // fire times a shared ledger could not be asked to claim
    long missed_ = 0;     // fire times that passed while lastcall could not fire them
};

}  // namespace lastcall
