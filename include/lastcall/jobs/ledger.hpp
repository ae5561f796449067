// SPDX-License-Identifier: Apache-2.0
// The run ledger: every scheduled run, what became of it, and each job's watermark. One
// interface, two implementations: SQLite in the state dir (one machine, the default) and
// PostgreSQL (replicas of one deployment share it; docs/cluster.md).
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
// Durability: a state change that returned is committed (SQLite: WAL with synchronous=FULL;
// PostgreSQL: a committed transaction). A SQLite ledger lives in the state dir, which one
// lastcall at a time owns (an flock on ledger.lock), because at start the owner turns the
// non-terminal runs of a previous, crashed owner into `interrupted`. A shared ledger has no
// single owner: a claimed run holds a lease that its replica renews, and any replica turns a
// run whose lease expired into `interrupted`.
//
// Exactly once: (job, scheduled time) is unique among first runs and a retry's retry_of is
// unique, in the database's own indexes, so two replicas can never both run one fire time or
// both retry one interrupted run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"

namespace lastcall {

// Why a run with a postgresql:// ledger goes to the dynamic twin (core/twin.hpp): the static
// binary cannot load libpq. The reason the twin logs, wherever the hand-over is decided.
inline constexpr const char* kPostgresLedgerNeedsLibpq = "a postgresql:// ledger needs libpq";

enum class RunState { Scheduled, Started, Completed, Failed, Interrupted, Skipped };
inline constexpr RunState kAllRunStates[] = {RunState::Scheduled,   RunState::Started,
                                             RunState::Completed,   RunState::Failed,
                                             RunState::Interrupted, RunState::Skipped};

std::string_view to_string(RunState s);
std::optional<RunState> parse_run_state(std::string_view s);
// The whole state model: may a run in `from` move to `to`?
bool run_transition(RunState from, RunState to);
bool is_terminal(RunState s);
// "('a', 'b')": the states from which `to` may be reached, per run_transition(), for the
// `WHERE state IN` of every UPDATE both ledgers generate from the model.
std::string sql_sources_of(RunState to);
// A fire time's reason for `skipped` while run `active` of the job runs (concurrency = forbid).
std::string forbid_reason(std::int64_t active);

// What an interrupted run is waiting for at the next start (the `recovery` column).
inline constexpr std::string_view kRecoveryHeld = "held";          // on_interrupted = hold
inline constexpr std::string_view kRecoveryReleased = "released";  // `lastcall runs release`
inline constexpr std::string_view kRecoveryRetried = "retried";    // a retry run was admitted
inline constexpr std::string_view kRecoveryNone = "none";          // on_interrupted = none

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
    std::string replica;                         // who ran it (empty: before replicas)
    std::string cluster;                         // the deployment key (a shared ledger)
    std::optional<std::int64_t> lease_until_ms;  // a shared ledger's claimed runs
};

struct RunOutcome {
    std::optional<int> exit_code;
    std::optional<int> signal;
};

struct RunFilter {
    std::string job;                       // empty: all jobs
    std::optional<RunState> state;         // nullopt: all states
    std::optional<std::int64_t> since_ms;  // only runs created at or after (Unix ms)
    std::optional<std::size_t> limit;      // only the newest this many (still oldest first)
    std::string cluster;                   // a shared ledger: only this deployment's
};

// Wall-clock time in Unix milliseconds: the times of a record.
std::int64_t unix_ms_now();

// A job's rule for a fire time that comes while another run of it is active, on any replica
// (a Kubernetes CronJob's concurrencyPolicy).
enum class Concurrency {
    Allow,    // claim it: runs side by side
    Forbid,   // record it skipped
    Replace,  // interrupt the active run(s) ("replaced by run N") and claim it
};

// Who writes: the replica (a host or pod name, shown by `lastcall runs`), this process's own
// random instance token (what a lease belongs to: a restarted replica with the same name does
// not inherit its predecessor's leases), and the lease a claimed run holds (0: no lease, one
// machine: nobody else could take the run over).
struct LedgerIdentity {
    std::string replica;
    std::string owner;
    std::int64_t lease_ms = 0;
    // A shared ledger: the deployment key (`cluster =`, else derived from the config): fire
    // times, watermarks and recovery are the cluster's, so two deployments on one database with
    // a job of the same name each run their own.
    std::string cluster;
    // "name\tcommand" lines of this replica's jobs: a live replica with the same key whose job of
    // the same name runs another command refuses this one's start.
    std::string jobs;
};

// One fire time (or the retry of interrupted runs) to be claimed. Every replica computes the
// same fire times; the one whose insert wins the unique key (job, scheduled time) runs it.
struct ClaimRequest {
    std::string job;
    std::int64_t scheduled_at = 0;
    std::vector<std::int64_t> retry_of;  // non-empty: the claim is the retry of these runs
    Concurrency concurrency = Concurrency::Allow;
    // Non-empty: the fire time is not run but recorded skipped with this reason (a held job),
    // by whichever replica claims it first.
    std::string skip_reason;
    // A first run (not a retry) of a job with a held interrupted run is recorded skipped
    // (held_reason), in the claim's own step.
    bool check_hold = false;
};
struct Claim {
    enum class Outcome {
        Started,  // this replica runs it: the row is `started` (pid NULL until set_pid)
        Skipped,  // recorded skipped (forbid), by this replica
        Lost,     // another replica claimed it (or already retried): nothing recorded, nothing runs
    };
    Outcome outcome = Outcome::Lost;
    std::int64_t id = 0;                 // Started, Skipped
    std::string reason;                  // Skipped: why
    std::vector<std::int64_t> replaced;  // Replace: the runs it interrupted
    // Started: the job's watermark when it was claimed ($LASTCALL_WATERMARK), read in the same
    // step so that starting a run needs no second call.
    std::optional<std::int64_t> watermark;
};
// Why a fire time of a job whose run `held` was interrupted (on_interrupted = hold) is skipped.
std::string held_reason(std::int64_t held);

// Where the ledger lives: a state dir (SQLite, one machine) or a PostgreSQL URL (shared by the
// replicas of one deployment).
struct LedgerLocation {
    std::string state_dir;  // used when url is empty
    std::string url;        // postgresql://... or postgres://...
};
bool is_postgresql_url(std::string_view text);
// `url` as lastcall shows it: every password in it (user:PASSWORD@, ?password=) as ***.
std::string redact_url_password(std::string_view url);
// Overwrites the passwords in `url`, a NUL-terminated string in place (lastcall's own argv, which
// /proc/PID/cmdline shows to every process): the redacted URL, the rest of its bytes NUL; each
// password byte a '*' where the redacted URL is longer (a password under 3 bytes). False: none.
bool scrub_url_password(char* url);
// `text`, a message about `url` that may quote any part of it (libpq's parse errors quote the
// token they could not read, a password too), with every password of `url` in it as ***.
std::string hide_url_passwords(std::string_view url, std::string text);

class Ledger {
  public:
    virtual ~Ledger() = default;

    // The ledger at `where`. `exclusive`: the supervisor's ledger (SQLite: the state dir's owner
    // lock; both: a write at open, so that a read-only or unreachable ledger fails the start,
    // not the first run); the `runs` command reads and releases without it.
    static Result<std::unique_ptr<Ledger>> open(const LedgerLocation& where, bool exclusive,
                                                LedgerIdentity identity = {});
    // The path of the SQLite database in a state dir.
    static std::string path_in(const std::string& state_dir);

    // "sqlite" or "postgresql".
    virtual std::string_view backend() const = 0;
    // What to show: the database's path, or the URL without its password.
    virtual const std::string& path() const = 0;
    // A URL another process can open this ledger with (no password): "" for SQLite (its path).
    virtual std::string connect_url() const { return ""; }
    // Several replicas write to it: claims compete and leases expire.
    virtual bool shared() const = 0;
    void set_identity(LedgerIdentity id) { identity_ = std::move(id); }
    // The deadline of the calls that follow (the ledger worker sets each call's). A backend
    // that can abandon a call (PostgreSQL: a non-blocking connection polled until then) does so
    // at the deadline and says so in the error; SQLite cannot interrupt a write stuck in the
    // kernel, and the worker's own deadline answers for it (jobs/ledger_worker.hpp).
    virtual void set_deadline(std::optional<std::chrono::steady_clock::time_point> at) {
        deadline_ = at;
    }
    const LedgerIdentity& identity() const { return identity_; }

    // A new run, in `state` (scheduled, or skipped with its reason). Returns its id.
    virtual Result<std::int64_t> add(std::string_view job, std::int64_t scheduled_at,
                                     RunState state, std::string_view reason,
                                     std::optional<std::int64_t> retry_of = {}) = 0;
    // The fire time (or retry) as one transaction: the unique key decides which replica runs
    // it, the concurrency rule is checked against the active runs of every replica, and the
    // winner's row is `started` with this identity's lease. Only the winner records anything.
    virtual Result<Claim> claim(const ClaimRequest& request) = 0;
    // Several claims (every job due at one instant), each as claim() would; one answer per
    // request, in order. PostgreSQL makes them one statement: a burst is one round trip, and no
    // lock is held while the client is away.
    virtual std::vector<Result<Claim>> claim_all(const std::vector<ClaimRequest>& requests);
    // scheduled -> started. false: refused (the run is no longer scheduled). The scheduler
    // records `started` before it spawns, so the row has no pid yet (NULL), and set_pid names
    // the process right after: a run whose start could not be recorded is never started, and
    // one whose spawn failed keeps no pid (it never had a process; `lastcall jobs` shows "-").
    virtual Result<bool> start(std::int64_t id) = 0;
    virtual Status set_pid(std::int64_t id, std::int64_t pid) = 0;
    // The pids of several runs just spawned (a burst), as set_pid would, in one step.
    virtual Status set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids);
    // -> failed / interrupted / skipped with the outcome and reason. false: refused.
    virtual Result<bool> finish(std::int64_t id, RunState to, RunOutcome outcome,
                                std::string_view reason) = 0;
    // started -> completed and the job's watermark, in one transaction. Call only after the
    // artifact (if any) was promoted. false: refused, and the watermark did not move.
    virtual Result<bool> complete(std::int64_t id, RunOutcome outcome) = 0;
    // Several final records at once (a burst of runs ending together), each as complete()
    // (to = completed) or finish() would, in one transaction: one answer per record, in order
    // (false: refused). PostgreSQL makes them one statement, SQLite one commit.
    struct Ending {
        std::int64_t id = 0;
        RunState to = RunState::Completed;
        RunOutcome outcome;
        std::string reason;
        std::optional<std::int64_t> pid;  // the run's leader, recorded with it if not yet
    };
    virtual Result<std::vector<bool>> finish_all(const std::vector<Ending>& endings);
    // Several fire times that never ran, recorded `skipped` with their reasons, as add() would,
    // in one step (SQLite: one commit): a loop that fell behind a thousand jobs records what it
    // missed without a commit each. Returns how many rows were written (all or none).
    struct Skip {
        std::string job;
        std::int64_t scheduled_at = 0;
        std::string reason;
    };
    virtual Result<std::size_t> add_skipped_all(const std::vector<Skip>& skips);

    // Extends the lease of these runs (this identity's, still `started`) by the identity's lease,
    // measured by the database's clock. Returns the ids it still holds: a run missing from the
    // answer was taken away (its lease expired and another replica recorded it interrupted, or
    // a `replace` claim interrupted it), and must be stopped without any further record.
    virtual Result<std::vector<std::int64_t>> renew(const std::vector<std::int64_t>& ids) = 0;
    // Every run (any replica's) whose lease ran out becomes interrupted ("lease expired: replica
    // R stopped renewing it"). Returns the runs it changed.
    virtual Result<std::vector<RunRecord>> expire_leases() = 0;

    // The scheduled time of the job's latest completed run.
    virtual Result<std::optional<std::int64_t>> watermark(std::string_view job) = 0;
    virtual Result<std::vector<RunRecord>> list(const RunFilter& filter) = 0;
    // Runs per job and state, and each job's last completed run's end (ms since the epoch; 0:
    // none), for the metrics: one aggregate query, not a scan in lastcall. A shared ledger counts
    // this replica's runs only.
    struct JobCount {
        std::string job;
        std::string state;
        std::int64_t runs = 0;
        std::int64_t last_completed_ms = 0;
    };
    virtual Result<std::vector<JobCount>> count_runs() = 0;
    virtual Result<std::optional<RunRecord>> get(std::int64_t id) = 0;

    // Final runs that ended before `before_ms`, at most `batch`, oldest first (`lastcall runs
    // prune`, `retention`): how many went. The only way a run leaves the ledger.
    virtual Result<std::int64_t> prune(std::int64_t before_ms, std::size_t batch) = 0;
    // A shared ledger: this replica reached the ledger now (each lease tick). What tells a lease
    // that lapsed while the ledger itself was unreachable from one its replica stopped renewing.
    virtual Status heartbeat() { return Ok{}; }
    // Fencing (`lastcall runs check`): the run is `started` and `owner`'s.
    virtual Result<bool> is_current(std::int64_t id, std::string_view owner) = 0;

    // At start: every run a previous owner left scheduled or started, without a lease, becomes
    // interrupted (a run with a lease is another replica's until its lease expires).
    virtual Result<std::vector<RunRecord>> interrupt_unfinished(std::string_view reason) = 0;
    // Interrupted runs whose recovery is still open (none yet, or released by a person).
    virtual Result<std::vector<RunRecord>> awaiting_recovery() = 0;
    // The job's interrupted run that is held, if any.
    virtual Result<std::optional<RunRecord>> held_run(std::string_view job) = 0;
    virtual Status set_recovery(std::int64_t id, std::string_view recovery) = 0;
    // A new scheduled run that retries `interrupted` (all of one job's runs awaiting recovery):
    // the new row and their `retried` marks commit together, so a crash in between can neither
    // lose the retry nor retry twice.
    virtual Result<std::int64_t> add_retry(std::string_view job, std::int64_t scheduled_at,
                                           const std::vector<std::int64_t>& interrupted) = 0;
    // `lastcall runs release ID`: an interrupted run's hold is lifted. false: not interrupted.
    virtual Result<bool> release(std::int64_t id) = 0;

  protected:
    Ledger() = default;
    LedgerIdentity identity_;
    std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// The two implementations (ledger_sqlite.cpp, ledger_postgresql.cpp); Ledger::open picks one.
Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& state_dir, bool exclusive,
                                                   LedgerIdentity identity);
Result<std::unique_ptr<Ledger>> open_postgresql_ledger(const std::string& url, bool exclusive,
                                                       LedgerIdentity identity);

}  // namespace lastcall
