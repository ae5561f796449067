// SPDX-License-Identifier: Apache-2.0
// The run ledger: every scheduled run, what became of it, and each job's watermark, in SQLite.
//
//   scheduled --> started --> completed | failed | interrupted
//       |            (also)     ^ terminal: final, never rewritten
//       +--> skipped | failed | interrupted
//
// Terminal states are final three times over: run_transition() is the model, every UPDATE is
// generated from it (`... WHERE state IN (states that may move to X)`), and a trigger in the
// database refuses any state change of a terminal row, whoever writes it. A refused transition is
// reported to the caller (false), which logs it: a late exit 0 of an interrupted run stays
// interrupted.
//
// Durability: WAL with synchronous=FULL, so a state change that returned is on disk. The file
// lives in the state dir, which one lastcall at a time owns (an flock on ledger.lock), because at
// start the owner turns the non-terminal runs of a previous, crashed owner into `interrupted`.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

enum class RunState { Scheduled, Started, Completed, Failed, Interrupted, Skipped };
inline constexpr RunState kAllRunStates[] = {RunState::Scheduled,   RunState::Started,
                                             RunState::Completed,   RunState::Failed,
                                             RunState::Interrupted, RunState::Skipped};

std::string_view to_string(RunState s);
std::optional<RunState> parse_run_state(std::string_view s);
// The whole state model: may a run in `from` move to `to`?
bool run_transition(RunState from, RunState to);
bool is_terminal(RunState s);

// What an interrupted run is waiting for at the next start (the `recovery` column).
inline constexpr std::string_view kRecoveryHeld = "held";          // on_interrupted = hold
inline constexpr std::string_view kRecoveryReleased = "released";  // `lastcall runs release`
inline constexpr std::string_view kRecoveryRetried = "retried";    // a retry run was admitted

struct RunRecord {
    std::int64_t id = 0;
    std::string job;
    std::int64_t scheduled_at = 0;  // Unix seconds: the fire time this run stands for
    RunState state = RunState::Scheduled;
    std::optional<std::int64_t> pid;
    std::int64_t created_ms = 0;  // Unix milliseconds
    std::optional<std::int64_t> started_ms, ended_ms;
    std::optional<int> exit_code, signal;
    std::string reason;
    std::optional<std::int64_t> retry_of;
    std::string recovery;
};

struct RunOutcome {
    std::optional<int> exit_code;
    std::optional<int> signal;
};

struct RunFilter {
    std::string job;                // empty: all jobs
    std::optional<RunState> state;  // nullopt: all states
};

struct SqliteClose {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using SqliteHandle = std::unique_ptr<sqlite3, SqliteClose>;

std::int64_t unix_ms_now();

class Ledger {
  public:
    // The state dir's ledger. `exclusive`: take the owner's lock (the supervisor); the `runs`
    // command reads and releases without it. The directory is created when missing. A write
    // happens here (the start is recorded), so a read-only or full filesystem fails now, at
    // start, not at the first run.
    static Result<Ledger> open(const std::string& state_dir, bool exclusive);
    // The path of the database in a state dir.
    static std::string path_in(const std::string& state_dir);

    // A new run, in `state` (scheduled, or skipped with its reason). Returns its id.
    Result<std::int64_t> add(std::string_view job, std::int64_t scheduled_at, RunState state,
                             std::string_view reason, std::optional<std::int64_t> retry_of = {});
    // scheduled -> started. false: refused (the run is no longer scheduled). The scheduler
    // records `started` before it spawns (pid 0) and the pid right after: a run whose start
    // could not be recorded is never started.
    Result<bool> start(std::int64_t id, std::int64_t pid);
    Status set_pid(std::int64_t id, std::int64_t pid);
    // -> failed / interrupted / skipped with the outcome and reason. false: refused.
    Result<bool> finish(std::int64_t id, RunState to, RunOutcome outcome, std::string_view reason);
    // started -> completed and the job's watermark, in one transaction. Call only after the
    // artifact (if any) was promoted. false: refused, and the watermark did not move.
    Result<bool> complete(std::int64_t id, RunOutcome outcome);

    // The scheduled time of the job's latest completed run.
    Result<std::optional<std::int64_t>> watermark(std::string_view job);
    Result<std::vector<RunRecord>> list(const RunFilter& filter);
    // Runs per job and state, and each job's last completed run's end (ms since the epoch; 0:
    // none), for the metrics: one aggregate query, not a scan in lastcall.
    struct JobCount {
        std::string job;
        std::string state;
        std::int64_t runs = 0;
        std::int64_t last_completed_ms = 0;
    };
    Result<std::vector<JobCount>> count_runs();
    Result<std::optional<RunRecord>> get(std::int64_t id);

    // At start: every run a previous owner left scheduled or started becomes interrupted.
    Result<std::vector<RunRecord>> interrupt_unfinished(std::string_view reason);
    // Interrupted runs whose recovery is still open (none yet, or released by a person).
    Result<std::vector<RunRecord>> awaiting_recovery();
    // The job's interrupted run that is held, if any.
    Result<std::optional<RunRecord>> held_run(std::string_view job);
    Status set_recovery(std::int64_t id, std::string_view recovery);
    // A new scheduled run that retries `interrupted` (all of one job's runs awaiting recovery):
    // the new row and their `retried` marks commit together, so a crash in between can neither
    // lose the retry nor retry twice.
    Result<std::int64_t> add_retry(std::string_view job, std::int64_t scheduled_at,
                                   const std::vector<std::int64_t>& interrupted);
    // `lastcall runs release ID`: an interrupted run's hold is lifted. false: not interrupted.
    Result<bool> release(std::int64_t id);

    const std::string& path() const { return path_; }

  private:
    Ledger(SqliteHandle db, std::string path, UniqueFd lock)
        : db_(std::move(db)), path_(std::move(path)), lock_(std::move(lock)) {}
    Status exec(const char* sql);
    Error sql_error(std::string_view what) const;
    Result<bool> transition(std::int64_t id, RunState to, const std::string& set_clause,
                            const std::function<Status(sqlite3_stmt*, int first)>& bind);

    SqliteHandle db_;
    std::string path_;
    UniqueFd lock_;  // held for the ledger's lifetime by the owning supervisor
};

}  // namespace lastcall
