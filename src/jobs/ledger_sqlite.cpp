// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <functional>

#include "lastcall/core/fd.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/jobs/sqlite_api.hpp"

namespace lastcall {

namespace {

// SQLite's functions (jobs/sqlite_api.hpp): set by SqliteLedger::open() before the first
// database handle exists, so every later use finds it set.
const SqliteApi* sq = nullptr;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job          TEXT    NOT NULL,
    scheduled_at INTEGER NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN
                     ('scheduled', 'started', 'completed', 'failed', 'interrupted', 'skipped')),
    pid          INTEGER,
    created_ms   INTEGER NOT NULL,
    started_ms   INTEGER,
    ended_ms     INTEGER,
    exit_code    INTEGER,
    signal       INTEGER,
    reason       TEXT    NOT NULL DEFAULT '',
    retry_of     INTEGER,
    recovery     TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_job ON runs (job, id);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs (state);
CREATE INDEX IF NOT EXISTS runs_by_fire ON runs (job, scheduled_at);
-- The database itself refuses to rewrite a terminal record, whoever writes to it.
CREATE TRIGGER IF NOT EXISTS runs_terminal_is_final
BEFORE UPDATE OF state ON runs
WHEN OLD.state IN ('completed', 'failed', 'interrupted', 'skipped') AND NEW.state <> OLD.state
BEGIN
    SELECT RAISE(ABORT, 'a terminal run state is final');
END;
CREATE TRIGGER IF NOT EXISTS runs_state_moves_forward
BEFORE UPDATE OF state ON runs
WHEN OLD.state = 'started' AND NEW.state IN ('scheduled', 'skipped')
BEGIN
    SELECT RAISE(ABORT, 'a run state only moves forward');
END;
CREATE TABLE IF NOT EXISTS watermarks (
    job          TEXT    PRIMARY KEY,
    scheduled_at INTEGER NOT NULL,
    run_id       INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS starts (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    pid   INTEGER NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS watermarks_never_move_back
BEFORE UPDATE OF scheduled_at ON watermarks
WHEN NEW.scheduled_at < OLD.scheduled_at
BEGIN
    SELECT RAISE(ABORT, 'a watermark never moves backwards');
END;
)sql";

// Columns added after the first release: a ledger written by an older lastcall gains them at
// open (ALTER TABLE ADD COLUMN keeps every row).
constexpr const char* kAddedColumns[][2] = {
    {"replica", "ALTER TABLE runs ADD COLUMN replica TEXT NOT NULL DEFAULT ''"},
    {"owner", "ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT ''"},
    {"lease_until_ms", "ALTER TABLE runs ADD COLUMN lease_until_ms INTEGER"},
};

// The exactly-once keys: one run that ran per fire time, one retry per interrupted run. A
// skipped row holds no key: the claim's check (under BEGIN IMMEDIATE) keeps one row per fire
// time, and a retry refused at shutdown is recorded skipped at its slot's time.
constexpr const char* kUniqueKeys = R"sql(
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_per_fire ON runs (job, scheduled_at)
    WHERE retry_of IS NULL AND state <> 'skipped';
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_retry ON runs (retry_of)
    WHERE retry_of IS NOT NULL AND state <> 'skipped';
)sql";

constexpr const char* kColumns =
    "id, job, scheduled_at, state, pid, created_ms, started_ms, ended_ms, exit_code, signal, "
    "reason, retry_of, coalesce(recovery, ''), replica, lease_until_ms";

// A prepared statement, finalized on every path.
class Stmt {
  public:
    Stmt(sqlite3* db, const std::string& sql) : db_(db) {
        rc_ = sq->prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
    }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    ~Stmt() { sq->finalize(stmt_); }
    bool ok() const { return rc_ == SQLITE_OK; }
    sqlite3_stmt* get() const { return stmt_; }
    void bind(int i, std::int64_t v) { sq->bind_int64(stmt_, i, v); }
    void bind(int i, std::string_view s) {
        sq->bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    }
    void bind(int i, std::optional<std::int64_t> v) {
        if (v)
            bind(i, *v);
        else
            sq->bind_null(stmt_, i);
    }
    void bind(int i, std::optional<int> v) {
        bind(i, v ? std::optional<std::int64_t>(*v) : std::nullopt);
    }
    // SQLITE_ROW, SQLITE_DONE or an error code.
    int step() { return sq->step(stmt_); }

  private:
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
    int rc_;
};

std::optional<std::int64_t> opt_int(sqlite3_stmt* s, int col) {
    if (sq->column_type(s, col) == SQLITE_NULL) return std::nullopt;
    return sq->column_int64(s, col);
}

std::string text(sqlite3_stmt* s, int col) {
    const unsigned char* t = sq->column_text(s, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
}

RunRecord read_row(sqlite3_stmt* s) {
    RunRecord r;
    r.id = sq->column_int64(s, 0);
    r.job = text(s, 1);
    r.scheduled_at = sq->column_int64(s, 2);
    r.state = parse_run_state(text(s, 3)).value_or(RunState::Failed);
    r.pid = opt_int(s, 4);
    r.created_ms = sq->column_int64(s, 5);
    r.started_ms = opt_int(s, 6);
    r.ended_ms = opt_int(s, 7);
    if (auto v = opt_int(s, 8)) r.exit_code = static_cast<int>(*v);
    if (auto v = opt_int(s, 9)) r.signal = static_cast<int>(*v);
    r.reason = text(s, 10);
    r.retry_of = opt_int(s, 11);
    r.recovery = text(s, 12);
    r.replica = text(s, 13);
    r.lease_until_ms = opt_int(s, 14);
    return r;
}

}  // namespace

namespace {

struct SqliteClose {
    void operator()(sqlite3* db) const { sq->close_v2(db); }
};
using SqliteHandle = std::unique_ptr<sqlite3, SqliteClose>;

class SqliteLedger final : public Ledger {
  public:
    static Result<std::unique_ptr<Ledger>> open(const std::string& state_dir, bool exclusive);
    static Result<std::unique_ptr<Ledger>> open_read_only(std::string path);

    std::string_view backend() const override { return "sqlite"; }
    const std::string& path() const override { return path_; }
    bool shared() const override { return false; }
    Result<std::int64_t> add(std::string_view job, std::int64_t scheduled_at, RunState state,
                             std::string_view reason,
                             std::optional<std::int64_t> retry_of = {}) override;
    Result<Claim> claim(const ClaimRequest& request) override;
    std::vector<Result<Claim>> claim_all(const std::vector<ClaimRequest>& requests) override;
    Result<std::vector<bool>> finish_all(const std::vector<Ending>& endings) override;
    Status set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) override;
    Result<bool> start(std::int64_t id) override;
    Status set_pid(std::int64_t id, std::int64_t pid) override;
    Result<bool> finish(std::int64_t id, RunState to, RunOutcome outcome,
                        std::string_view reason) override;
    Result<bool> complete(std::int64_t id, RunOutcome outcome) override;
    Result<std::vector<std::int64_t>> renew(const std::vector<std::int64_t>& ids) override;
    Result<std::vector<RunRecord>> expire_leases() override;
    Result<std::optional<std::int64_t>> watermark(std::string_view job) override;
    Result<std::vector<RunRecord>> list(const RunFilter& filter) override;
    Result<std::vector<JobCount>> count_runs() override;
    Result<std::optional<RunRecord>> get(std::int64_t id) override;
    Result<std::vector<RunRecord>> interrupt_unfinished(std::string_view reason) override;
    Result<std::vector<RunRecord>> awaiting_recovery() override;
    Result<std::optional<RunRecord>> held_run(std::string_view job) override;
    Status set_recovery(std::int64_t id, std::string_view recovery) override;
    Result<std::int64_t> add_retry(std::string_view job, std::int64_t scheduled_at,
                                   const std::vector<std::int64_t>& interrupted) override;
    Result<bool> release(std::int64_t id) override;
    Result<std::int64_t> prune(std::int64_t before_ms, std::size_t batch) override;
    Result<bool> is_current(std::int64_t id, std::string_view owner) override;

  private:
    SqliteLedger(SqliteHandle db, std::string path, UniqueFd lock)
        : db_(std::move(db)), path_(std::move(path)), lock_(std::move(lock)) {}
    Status exec(const char* sql);
    Status migrate();
    Error sql_error(std::string_view what) const;
    Result<bool> transition(std::int64_t id, RunState to, const std::string& set_clause,
                            const std::function<Status(sqlite3_stmt*, int first)>& bind);
    Result<std::vector<RunRecord>> select(const std::string& where,
                                          const std::function<void(Stmt&)>& bind);
    Result<Claim> claim_locked(const ClaimRequest& request);
    Result<bool> mark_retried(const std::vector<std::int64_t>& interrupted);

    SqliteHandle db_;
    std::string path_;
    UniqueFd lock_;  // held for the ledger's lifetime by the owning supervisor
};

}  // namespace

std::string Ledger::path_in(const std::string& state_dir) {
    return state_dir + "/ledger.sqlite";
}

Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& state_dir, bool exclusive,
                                                   LedgerIdentity identity) {
    auto ledger = SqliteLedger::open(state_dir, exclusive);
    if (ledger) (*ledger)->set_identity(std::move(identity));
    return ledger;
}

Result<std::unique_ptr<Ledger>> SqliteLedger::open(const std::string& state_dir, bool exclusive) {
    std::string path = path_in(state_dir);
    UniqueFd lock;
    if (exclusive) {
        // The ledger's directory must be lastcall's own and reached without following a link
        // that someone else planted: SQLite creates its -wal and -shm files there by name.
        auto dir = ensure_owned_dir(state_dir, 0755, true);
        if (!dir) return Error{"state dir " + state_dir + ": " + dir.error().message};
        if (auto st = require_trusted_ancestors(state_dir); !st)
            return Error{"state dir " + state_dir + ": " + st.error().message};
        std::string lock_path = state_dir + "/ledger.lock";
        lock.reset(open_beneath(dir->get(), "ledger.lock", O_RDWR | O_CREAT, 0644));
        if (!lock) return sys_error("state dir " + state_dir + ": open " + lock_path, errno);
        if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK)
                return Error{"state dir " + state_dir + " is in use by another lastcall (flock " +
                             lock_path + ")"};
            return sys_error("state dir " + state_dir + ": flock " + lock_path, errno);
        }
    } else if (::access(path.c_str(), F_OK) != 0) {
        return sys_error("no run ledger at " + path, errno);
    }
    auto api = sqlite_api();
    if (!api) return api.error();
    sq = *api;
    // A reader that may not write the file (`lastcall runs` as another user than the
    // supervisor's) opens it read-only and changes nothing: it used to set the journal mode and
    // apply the schema, and failed with "attempt to write a readonly database".
    if (!exclusive && ::access(path.c_str(), W_OK) != 0) return open_read_only(std::move(path));
    sqlite3* raw = nullptr;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW |
                (exclusive ? SQLITE_OPEN_CREATE : 0);
    int rc = sq->open_v2(path.c_str(), &raw, flags, nullptr);
    SqliteHandle db(raw);
    if (rc != SQLITE_OK)
        return Error{"sqlite open " + path + ": " + (raw ? sq->errmsg(raw) : sq->errstr(rc))};
    std::unique_ptr<SqliteLedger> owned(
        new SqliteLedger(std::move(db), std::move(path), std::move(lock)));
    SqliteLedger& ledger = *owned;
    sq->busy_timeout(ledger.db_.get(), 5000);
    sq->extended_result_codes(ledger.db_.get(), 1);
    // WAL: readers (`lastcall runs`) never block the supervisor's writes. FULL: a commit that
    // returned survives a power cut, which is what a state change promises.
    {
        Stmt wal(ledger.db_.get(), "PRAGMA journal_mode=WAL");
        if (!wal.ok() || wal.step() != SQLITE_ROW) return ledger.sql_error("PRAGMA journal_mode");
        std::string mode = text(wal.get(), 0);
        if (mode != "wal")
            return Error{"sqlite " + ledger.path_ + ": journal_mode is " + mode + ", not wal"};
    }
    if (auto st = ledger.exec("PRAGMA synchronous=FULL"); !st) return st.error();
    if (auto st = ledger.exec(kSchema); !st) return st.error();
    if (auto st = ledger.migrate(); !st) return st.error();
    if (exclusive) {
        // A real write now: a full disk or read-only file fails the start, not the first run.
        Stmt ins(ledger.db_.get(), "INSERT INTO starts (pid, at_ms) VALUES (?1, ?2)");
        if (!ins.ok()) return ledger.sql_error("prepare insert start");
        ins.bind(1, static_cast<std::int64_t>(::getpid()));
        ins.bind(2, unix_ms_now());
        if (ins.step() != SQLITE_DONE) return ledger.sql_error("record start");
    }
    return std::unique_ptr<Ledger>(std::move(owned));
}

// Read-only, for a reader that cannot write the ledger. A WAL database is read through its -shm
// index, which SQLite creates beside it; when lastcall is stopped there is none (the last
// connection removed it) and a reader that may not create files in the directory cannot open
// it: then the file is opened as immutable, which is exact while no writer runs (no -wal file).
Result<std::unique_ptr<Ledger>> SqliteLedger::open_read_only(std::string path) {
    auto try_open = [&](const std::string& name, int extra) -> Result<SqliteHandle> {
        sqlite3* raw = nullptr;
        int rc = sq->open_v2(
            name.c_str(), &raw,
            SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW | extra, nullptr);
        SqliteHandle db(raw);
        if (rc != SQLITE_OK)
            return Error{"sqlite open " + path +
                         " (read-only): " + (raw ? sq->errmsg(raw) : sq->errstr(rc))};
        sq->busy_timeout(db.get(), 5000);
        sq->extended_result_codes(db.get(), 1);
        Stmt probe(db.get(), "SELECT count(*) FROM runs");
        if (!probe.ok() || probe.step() != SQLITE_ROW)
            return Error{"sqlite " + path + " (read-only): " + sq->errmsg(db.get())};
        return db;
    };
    auto db = try_open(path, 0);
    if (!db && ::access((path + "-wal").c_str(), F_OK) != 0) {
        std::string uri = "file:";
        for (char c : path) {
            if (c == '%' || c == '?' || c == '#') {
                char hex[4];
                std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
                uri += hex;
            } else {
                uri += c;
            }
        }
        db = try_open(uri + "?immutable=1", SQLITE_OPEN_URI);
    }
    if (!db) return db.error();
    return std::unique_ptr<Ledger>(new SqliteLedger(std::move(*db), std::move(path), UniqueFd()));
}

Status SqliteLedger::migrate() {
    std::vector<std::string> have;
    {
        Stmt info(db_.get(), "PRAGMA table_info(runs)");
        if (!info.ok()) return sql_error("PRAGMA table_info");
        while (info.step() == SQLITE_ROW) have.push_back(text(info.get(), 1));
    }
    for (const auto& [column, sql] : kAddedColumns) {
        if (std::find(have.begin(), have.end(), column) != have.end()) continue;
        if (auto st = exec(sql); !st) return st.error();
    }
    // A ledger of an older lastcall may hold two rows of one fire time (a clock set back
    // re-fired it): the history stays readable, the key is then only the claim's check.
    if (auto st = exec(kUniqueKeys); !st)
        spdlog::warn("sqlite {}: exactly-once keys not created ({}); claims rely on their check",
                     path_, st.error().message);
    return Ok{};
}

Error SqliteLedger::sql_error(std::string_view what) const {
    return Error{"sqlite " + path_ + ": " + std::string(what) + ": " + sq->errmsg(db_.get())};
}

Status SqliteLedger::exec(const char* sql) {
    char* msg = nullptr;
    if (sq->exec(db_.get(), sql, nullptr, nullptr, &msg) != SQLITE_OK) {
        std::string text = msg ? msg : sq->errmsg(db_.get());
        sq->free(msg);
        return Error{"sqlite " + path_ + ": " + text};
    }
    return Ok{};
}

Result<std::int64_t> SqliteLedger::add(std::string_view job, std::int64_t scheduled_at,
                                       RunState state, std::string_view reason,
                                       std::optional<std::int64_t> retry_of) {
    Stmt s(db_.get(),
           "INSERT INTO runs (job, scheduled_at, state, created_ms, ended_ms, reason, retry_of, "
           "replica, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    if (!s.ok()) return sql_error("prepare insert run");
    std::int64_t now = unix_ms_now();
    s.bind(1, job);
    s.bind(2, scheduled_at);
    s.bind(3, to_string(state));
    s.bind(4, now);
    s.bind(5, is_terminal(state) ? std::optional<std::int64_t>(now) : std::nullopt);
    s.bind(6, reason);
    s.bind(7, retry_of);
    s.bind(8, std::string_view(identity_.replica));
    s.bind(9, std::string_view(identity_.owner));
    if (s.step() != SQLITE_DONE) return sql_error("insert run of job " + std::string(job));
    return static_cast<std::int64_t>(sq->last_insert_rowid(db_.get()));
}

Result<Claim> SqliteLedger::claim(const ClaimRequest& request) {
    // BEGIN IMMEDIATE takes the write lock first: the check and the insert below are one step
    // for every other writer of the file.
    if (auto st = exec("BEGIN IMMEDIATE"); !st) return st.error();
    auto claimed = claim_locked(request);
    if (!claimed || claimed->outcome == Claim::Outcome::Lost) {
        (void)exec("ROLLBACK");
        return claimed;
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        return st.error();
    }
    return claimed;
}

// The endings of a burst in one transaction: one commit for all of them (a write each on a slow
// disk was a second each at 20 writes/s). All or nothing: an error rolls every one back.
Result<std::vector<bool>> SqliteLedger::finish_all(const std::vector<Ending>& endings) {
    if (endings.size() <= 1) return Ledger::finish_all(endings);
    if (auto st = exec("BEGIN IMMEDIATE"); !st) return st.error();
    auto out = Ledger::finish_all(endings);
    if (!out) {
        (void)exec("ROLLBACK");
        return out;
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        return st.error();
    }
    return out;
}

// The pids of a burst in one transaction: one commit for all of them.
Status SqliteLedger::set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) {
    if (pids.size() <= 1) return Ledger::set_pids(pids);
    if (auto st = exec("BEGIN IMMEDIATE"); !st) return st;
    if (auto st = Ledger::set_pids(pids); !st) {
        (void)exec("ROLLBACK");
        return st;
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        return st;
    }
    return Ok{};
}

// A burst in one transaction, so one commit (one fsync) for all of it: on a slow disk a
// thousand claims of one instant are one write, not a thousand. Each claim in a savepoint of its
// own: a lost or failed one undoes only its own writes.
std::vector<Result<Claim>> SqliteLedger::claim_all(const std::vector<ClaimRequest>& requests) {
    std::vector<Result<Claim>> out;
    if (requests.size() <= 1) return Ledger::claim_all(requests);
    if (auto st = exec("BEGIN IMMEDIATE"); !st) {
        for (std::size_t i = 0; i < requests.size(); ++i) out.push_back(st.error());
        return out;
    }
    for (const auto& r : requests) {
        if (auto st = exec("SAVEPOINT claim"); !st) {
            out.push_back(st.error());
            continue;
        }
        auto claimed = claim_locked(r);
        if (!claimed || claimed->outcome == Claim::Outcome::Lost) (void)exec("ROLLBACK TO claim");
        (void)exec("RELEASE claim");
        out.push_back(std::move(claimed));
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        for (auto& o : out) o = st.error();
    }
    return out;
}

Result<Claim> SqliteLedger::claim_locked(const ClaimRequest& request) {
    Claim out;
    std::int64_t now = unix_ms_now();
    if (request.retry_of.empty()) {
        Stmt taken(db_.get(),
                   "SELECT 1 FROM runs WHERE job = ?1 AND scheduled_at = ?2 AND retry_of IS NULL");
        if (!taken.ok()) return sql_error("prepare claim check");
        taken.bind(1, std::string_view(request.job));
        taken.bind(2, request.scheduled_at);
        int rc = taken.step();
        if (rc == SQLITE_ROW) return out;  // Lost
        if (rc != SQLITE_DONE) return sql_error("claim check of job " + request.job);
        if (request.check_hold && request.skip_reason.empty()) {
            auto held = held_run(request.job);
            if (!held) return held.error();
            if (*held) {
                ClaimRequest skip = request;
                skip.skip_reason = held_reason((*held)->id);
                skip.check_hold = false;
                return claim_locked(skip);
            }
        }
    } else {
        auto marked = mark_retried(request.retry_of);
        if (!marked) return marked.error();
        if (!*marked) return out;  // already retried by another claim: Lost
    }
    if (!request.skip_reason.empty() && request.retry_of.empty()) {
        auto id = add(request.job, request.scheduled_at, RunState::Skipped, request.skip_reason);
        if (!id) return id.error();
        out.outcome = Claim::Outcome::Skipped;
        out.id = *id;
        out.reason = request.skip_reason;
        return out;
    }
    std::vector<std::int64_t> active;
    {
        Stmt a(db_.get(),
               "SELECT id FROM runs WHERE job = ?1 AND state = 'started' AND "
               "(lease_until_ms IS NULL OR lease_until_ms > ?2) ORDER BY id");
        if (!a.ok()) return sql_error("prepare active runs");
        a.bind(1, std::string_view(request.job));
        a.bind(2, now);
        int rc;
        while ((rc = a.step()) == SQLITE_ROW) active.push_back(sq->column_int64(a.get(), 0));
        if (rc != SQLITE_DONE) return sql_error("active runs of job " + request.job);
    }
    if (!active.empty() && request.concurrency == Concurrency::Forbid) {
        // A retry waits for a free slot instead: its interrupted runs stay open (rolled back).
        if (!request.retry_of.empty()) return out;
        out.reason = forbid_reason(active.front());
        auto id = add(request.job, request.scheduled_at, RunState::Skipped, out.reason);
        if (!id) return id.error();
        out.outcome = Claim::Outcome::Skipped;
        out.id = *id;
        return out;
    }
    Stmt ins(db_.get(),
             "INSERT INTO runs (job, scheduled_at, state, pid, created_ms, started_ms, retry_of, "
             "replica, owner, lease_until_ms) VALUES (?1, ?2, 'started', NULL, ?3, ?3, ?4, ?5, ?6, "
             "?7)");
    if (!ins.ok()) return sql_error("prepare claim");
    ins.bind(1, std::string_view(request.job));
    ins.bind(2, request.scheduled_at);
    ins.bind(3, now);
    ins.bind(4, request.retry_of.empty() ? std::nullopt
                                         : std::optional<std::int64_t>(request.retry_of.back()));
    ins.bind(5, std::string_view(identity_.replica));
    ins.bind(6, std::string_view(identity_.owner));
    ins.bind(7, identity_.lease_ms > 0 ? std::optional<std::int64_t>(now + identity_.lease_ms)
                                       : std::nullopt);
    int rc = ins.step();
    if (rc == SQLITE_CONSTRAINT_UNIQUE) return out;  // the key says another claim won: Lost
    if (rc != SQLITE_DONE) return sql_error("claim run of job " + request.job);
    out.outcome = Claim::Outcome::Started;
    out.id = sq->last_insert_rowid(db_.get());
    auto w = watermark(request.job);
    if (!w) return w.error();
    out.watermark = *w;
    if (request.concurrency == Concurrency::Replace) {
        for (std::int64_t old : active) {
            auto done =
                finish(old, RunState::Interrupted, {},
                       "replaced by run " + std::to_string(out.id) + " (concurrency = replace)");
            if (!done) return done.error();
            if (!*done) continue;
            // Its successor is running: a replaced run is never retried.
            if (auto st = set_recovery(old, kRecoveryNone); !st) return st.error();
            out.replaced.push_back(old);
        }
    }
    return out;
}

// Marks the interrupted runs retried. false: one of them was no longer awaiting recovery
// (another claim retried it), and the caller rolls back.
Result<bool> SqliteLedger::mark_retried(const std::vector<std::int64_t>& interrupted) {
    for (std::int64_t old : interrupted) {
        Stmt s(db_.get(),
               "UPDATE runs SET recovery = 'retried' WHERE id = ?1 AND state = 'interrupted' "
               "AND (recovery IS NULL OR recovery = 'released')");
        if (!s.ok()) return sql_error("prepare mark retried");
        s.bind(1, old);
        if (s.step() != SQLITE_DONE)
            return sql_error("mark run " + std::to_string(old) + " retried");
        if (sq->changes(db_.get()) != 1) return false;
    }
    return true;
}

Result<std::vector<std::int64_t>> SqliteLedger::renew(const std::vector<std::int64_t>& ids) {
    std::vector<std::int64_t> held;
    std::int64_t now = unix_ms_now();
    for (std::int64_t id : ids) {
        Stmt s(db_.get(),
               "UPDATE runs SET lease_until_ms = CASE WHEN ?3 > 0 THEN ?4 ELSE lease_until_ms END "
               "WHERE id = ?1 AND owner = ?2 AND state = 'started'");
        if (!s.ok()) return sql_error("prepare renew");
        s.bind(1, id);
        s.bind(2, std::string_view(identity_.owner));
        s.bind(3, identity_.lease_ms);
        s.bind(4, now + identity_.lease_ms);
        if (s.step() != SQLITE_DONE) return sql_error("renew lease of run " + std::to_string(id));
        if (sq->changes(db_.get()) == 1) held.push_back(id);
    }
    return held;
}

Result<std::vector<RunRecord>> SqliteLedger::expire_leases() {
    std::int64_t now = unix_ms_now();
    auto expired = select(
        "state IN ('scheduled', 'started') AND lease_until_ms IS NOT NULL AND lease_until_ms < ?1",
        [&](Stmt& s) { s.bind(1, now); });
    if (!expired) return expired.error();
    std::vector<RunRecord> out;
    for (auto& r : *expired) {
        std::string reason = "lease expired: replica " + r.replica + " stopped renewing it";
        auto done = finish(r.id, RunState::Interrupted, {}, reason);
        if (!done) return done.error();
        if (!*done) continue;
        r.state = RunState::Interrupted;
        r.reason = reason;
        out.push_back(std::move(r));
    }
    return out;
}

Result<std::vector<RunRecord>> SqliteLedger::select(const std::string& where,
                                                    const std::function<void(Stmt&)>& bind) {
    Stmt s(db_.get(),
           std::string("SELECT ") + kColumns + " FROM runs WHERE " + where + " ORDER BY id");
    if (!s.ok()) return sql_error("prepare select runs");
    bind(s);
    std::vector<RunRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_row(s.get()));
    if (rc != SQLITE_DONE) return sql_error("select runs");
    return out;
}

Result<bool> SqliteLedger::transition(std::int64_t id, RunState to, const std::string& set_clause,
                                      const std::function<Status(sqlite3_stmt*, int)>& bind) {
    std::string sql = "UPDATE runs SET state = ?1" + set_clause + " WHERE id = ?2 AND state IN " +
                      sql_sources_of(to);
    Stmt s(db_.get(), sql);
    if (!s.ok()) return sql_error("prepare update run");
    s.bind(1, to_string(to));
    s.bind(2, id);
    if (auto st = bind(s.get(), 3); !st) return st.error();
    if (s.step() != SQLITE_DONE)
        return sql_error("update run " + std::to_string(id) + " to " + std::string(to_string(to)));
    return sq->changes(db_.get()) == 1;
}

Result<bool> SqliteLedger::start(std::int64_t id) {
    // Not spawned yet: no process to name (set_pid does, after the spawn).
    return transition(id, RunState::Started, ", pid = NULL, started_ms = ?3",
                      [&](sqlite3_stmt* s, int) {
                          sq->bind_int64(s, 3, unix_ms_now());
                          return Status(Ok{});
                      });
}

Status SqliteLedger::set_pid(std::int64_t id, std::int64_t pid) {
    Stmt s(db_.get(), "UPDATE runs SET pid = ?1 WHERE id = ?2");
    if (!s.ok()) return sql_error("prepare set pid");
    s.bind(1, pid);
    s.bind(2, id);
    if (s.step() != SQLITE_DONE) return sql_error("set pid of run " + std::to_string(id));
    return Ok{};
}

Result<bool> SqliteLedger::finish(std::int64_t id, RunState to, RunOutcome outcome,
                                  std::string_view reason) {
    if (!is_terminal(to)) return Error{"finish run " + std::to_string(id) + ": not terminal"};
    return transition(id, to, ", ended_ms = ?3, exit_code = ?4, signal = ?5, reason = ?6",
                      [&](sqlite3_stmt* s, int) {
                          sq->bind_int64(s, 3, unix_ms_now());
                          if (outcome.exit_code)
                              sq->bind_int(s, 4, *outcome.exit_code);
                          else
                              sq->bind_null(s, 4);
                          if (outcome.signal)
                              sq->bind_int(s, 5, *outcome.signal);
                          else
                              sq->bind_null(s, 5);
                          sq->bind_text(s, 6, reason.data(), static_cast<int>(reason.size()),
                                        SQLITE_TRANSIENT);
                          return Status(Ok{});
                      });
}

Result<bool> SqliteLedger::complete(std::int64_t id, RunOutcome outcome) {
    // One transaction: the record and the watermark become durable together, and the watermark
    // only ever moves on a run that really became completed. A savepoint, so that it nests in a
    // burst's transaction (finish_all) and is a transaction of its own otherwise.
    if (auto st = exec("SAVEPOINT complete"); !st) return st.error();
    auto undo = [this] { (void)exec("ROLLBACK TO complete"), (void)exec("RELEASE complete"); };
    auto done = finish(id, RunState::Completed, outcome, "");
    if (!done || !*done) {
        undo();
        return done;
    }
    Stmt w(db_.get(),
           "INSERT INTO watermarks (job, scheduled_at, run_id) "
           "SELECT job, scheduled_at, id FROM runs WHERE id = ?1 "
           "ON CONFLICT (job) DO UPDATE SET scheduled_at = excluded.scheduled_at, "
           "run_id = excluded.run_id WHERE excluded.scheduled_at >= watermarks.scheduled_at");
    if (!w.ok() || (w.bind(1, id), w.step()) != SQLITE_DONE) {
        Error e = sql_error("advance watermark for run " + std::to_string(id));
        undo();
        return e;
    }
    if (auto st = exec("RELEASE complete"); !st) {
        undo();
        return st.error();
    }
    return true;
}

Result<std::optional<std::int64_t>> SqliteLedger::watermark(std::string_view job) {
    Stmt s(db_.get(), "SELECT scheduled_at FROM watermarks WHERE job = ?1");
    if (!s.ok()) return sql_error("prepare watermark");
    s.bind(1, job);
    int rc = s.step();
    if (rc == SQLITE_ROW) return std::optional<std::int64_t>(sq->column_int64(s.get(), 0));
    if (rc == SQLITE_DONE) return std::optional<std::int64_t>();
    return sql_error("read watermark of " + std::string(job));
}

Result<std::vector<RunRecord>> SqliteLedger::list(const RunFilter& filter) {
    // A limit keeps the newest runs (by id), still printed oldest first.
    std::string sql = std::string("SELECT * FROM (SELECT ") + kColumns + " FROM runs WHERE 1";
    if (!filter.job.empty()) sql += " AND job = ?1";
    if (filter.state) sql += " AND state = ?2";
    if (filter.since_ms) sql += " AND created_ms >= ?3";
    sql += " ORDER BY id DESC";
    if (filter.limit) sql += " LIMIT ?4";
    sql += ") ORDER BY 1";
    Stmt s(db_.get(), sql);
    if (!s.ok()) return sql_error("prepare list runs");
    if (!filter.job.empty()) s.bind(1, filter.job);
    if (filter.state) s.bind(2, to_string(*filter.state));
    if (filter.since_ms) s.bind(3, *filter.since_ms);
    if (filter.limit) s.bind(4, static_cast<std::int64_t>(*filter.limit));
    std::vector<RunRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_row(s.get()));
    if (rc != SQLITE_DONE) return sql_error("list runs");
    return out;
}

Result<std::int64_t> SqliteLedger::prune(std::int64_t before_ms, std::size_t batch) {
    Stmt s(db_.get(),
           "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE state IN ('completed', "
           "'failed', 'interrupted', 'skipped') AND ended_ms < ?1 ORDER BY ended_ms LIMIT ?2)");
    if (!s.ok()) return sql_error("prepare prune runs");
    s.bind(1, before_ms);
    s.bind(2, static_cast<std::int64_t>(batch));
    if (s.step() != SQLITE_DONE) return sql_error("prune runs");
    return static_cast<std::int64_t>(sq->changes(db_.get()));
}

Result<bool> SqliteLedger::is_current(std::int64_t id, std::string_view owner) {
    Stmt s(db_.get(), "SELECT 1 FROM runs WHERE id = ?1 AND owner = ?2 AND state = 'started'");
    if (!s.ok()) return sql_error("prepare check run");
    s.bind(1, id);
    s.bind(2, owner);
    int rc = s.step();
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_error("check run " + std::to_string(id));
    return rc == SQLITE_ROW;
}

Result<std::vector<Ledger::JobCount>> SqliteLedger::count_runs() {
    Stmt s(db_.get(),
           "SELECT job, state, COUNT(*), COALESCE(MAX(CASE WHEN state = 'completed' THEN ended_ms "
           "END), 0) FROM runs GROUP BY job, state ORDER BY job, state");
    if (!s.ok()) return sql_error("prepare count runs");
    std::vector<Ledger::JobCount> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW)
        out.push_back({text(s.get(), 0), text(s.get(), 1), sq->column_int64(s.get(), 2),
                       sq->column_int64(s.get(), 3)});
    if (rc != SQLITE_DONE) return sql_error("count runs");
    return out;
}

Result<std::optional<RunRecord>> SqliteLedger::get(std::int64_t id) {
    Stmt s(db_.get(), std::string("SELECT ") + kColumns + " FROM runs WHERE id = ?1");
    if (!s.ok()) return sql_error("prepare get run");
    s.bind(1, id);
    int rc = s.step();
    if (rc == SQLITE_ROW) return std::optional<RunRecord>(read_row(s.get()));
    if (rc == SQLITE_DONE) return std::optional<RunRecord>();
    return sql_error("get run " + std::to_string(id));
}

Result<std::vector<RunRecord>> SqliteLedger::interrupt_unfinished(std::string_view reason) {
    auto open_runs =
        select("state IN ('scheduled', 'started') AND lease_until_ms IS NULL", [](Stmt&) {});
    if (!open_runs) return open_runs.error();
    std::vector<RunRecord> out;
    for (auto& r : *open_runs) {
        auto done = finish(r.id, RunState::Interrupted, {}, reason);
        if (!done) return done.error();
        if (*done) {
            r.state = RunState::Interrupted;
            r.reason = std::string(reason);
            out.push_back(std::move(r));
        }
    }
    return out;
}

Result<std::vector<RunRecord>> SqliteLedger::awaiting_recovery() {
    Stmt s(db_.get(), std::string("SELECT ") + kColumns +
                          " FROM runs WHERE state = 'interrupted' AND (recovery IS NULL OR "
                          "recovery = 'released') ORDER BY id");
    if (!s.ok()) return sql_error("prepare recovery query");
    std::vector<RunRecord> out;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_row(s.get()));
    if (rc != SQLITE_DONE) return sql_error("list runs awaiting recovery");
    return out;
}

Result<std::optional<RunRecord>> SqliteLedger::held_run(std::string_view job) {
    Stmt s(db_.get(), std::string("SELECT ") + kColumns +
                          " FROM runs WHERE job = ?1 AND state = 'interrupted' AND recovery = "
                          "'held' ORDER BY id LIMIT 1");
    if (!s.ok()) return sql_error("prepare held query");
    s.bind(1, job);
    int rc = s.step();
    if (rc == SQLITE_ROW) return std::optional<RunRecord>(read_row(s.get()));
    if (rc == SQLITE_DONE) return std::optional<RunRecord>();
    return sql_error("find held run of " + std::string(job));
}

Status SqliteLedger::set_recovery(std::int64_t id, std::string_view recovery) {
    Stmt s(db_.get(), "UPDATE runs SET recovery = ?1 WHERE id = ?2");
    if (!s.ok()) return sql_error("prepare set recovery");
    s.bind(1, recovery);
    s.bind(2, id);
    if (s.step() != SQLITE_DONE) return sql_error("set recovery of run " + std::to_string(id));
    return Ok{};
}

Result<std::int64_t> SqliteLedger::add_retry(std::string_view job, std::int64_t scheduled_at,
                                             const std::vector<std::int64_t>& interrupted) {
    if (interrupted.empty()) return Error{"add retry of " + std::string(job) + ": no run given"};
    if (auto st = exec("BEGIN IMMEDIATE"); !st) return st.error();
    auto id = add(job, scheduled_at, RunState::Scheduled, "", interrupted.back());
    if (!id) {
        (void)exec("ROLLBACK");
        return id;
    }
    for (std::int64_t old : interrupted) {
        if (auto st = set_recovery(old, kRecoveryRetried); !st) {
            (void)exec("ROLLBACK");
            return st.error();
        }
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        return st.error();
    }
    return id;
}

Result<bool> SqliteLedger::release(std::int64_t id) {
    Stmt s(db_.get(),
           "UPDATE runs SET recovery = 'released' WHERE id = ?1 AND state = 'interrupted' AND "
           "(recovery IS NULL OR recovery = 'held')");
    if (!s.ok()) return sql_error("prepare release");
    s.bind(1, id);
    if (s.step() != SQLITE_DONE) return sql_error("release run " + std::to_string(id));
    return sq->changes(db_.get()) == 1;
}

}  // namespace lastcall
