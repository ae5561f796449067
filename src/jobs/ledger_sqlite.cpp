// SPDX-License-Identifier: Apache-2.0
// The run ledger in SQLite, in the state dir (one machine, the default). This file: opening it
// (the state dir's lock, WAL, read-only readers) and its schema; the claims and leases are in
// ledger_sqlite_claims.cpp, the records in ledger_sqlite_records.cpp.
#include "lastcall/jobs/ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "lastcall/core/fd.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/jobs/sqlite_api.hpp"
#include "ledger_sqlite_internal.hpp"

namespace lastcall {

namespace sqlite {

const SqliteApi* sq = nullptr;

namespace {

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

}  // namespace

}  // namespace sqlite

std::string Ledger::path_in(const std::string& state_dir) {
    return state_dir + "/ledger.sqlite";
}

Result<std::unique_ptr<Ledger>> open_sqlite_ledger(const std::string& state_dir, bool exclusive,
                                                   LedgerIdentity identity) {
    auto ledger = sqlite::SqliteLedger::open(state_dir, exclusive);
    if (ledger) (*ledger)->set_identity(std::move(identity));
    return ledger;
}

namespace sqlite {

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

Status SqliteLedger::still_there() const {
    struct stat st {};
    std::string dir = path_.substr(0, path_.rfind('/'));
    if (lock_ && ::fstat(lock_.get(), &st) == 0 && st.st_nlink == 0)
        return Error{"state dir " + dir +
                     " was removed while lastcall ran (its ledger.lock is gone): nothing more is "
                     "written to the deleted ledger, and no run starts; restart lastcall"};
    // The directory can stay while the database file itself goes: moved aside, or replaced by
    // another file under its name (a restore, `mv ledger.db`). The open handle would then write
    // into a file nobody reads. SQLite's own check compares the open file with the path (link
    // count, then device and inode of a stat of the path): one stat per write transaction.
    int moved = 0;
    if (int rc = sq->file_control(db_.get(), "main", SQLITE_FCNTL_HAS_MOVED, &moved);
        rc == SQLITE_OK && moved)
        return Error{"ledger " + path_ +
                     " was moved, removed or replaced while lastcall ran (the open database is no "
                     "longer the file at that path): nothing more is written to it, and no run "
                     "starts; restart lastcall"};
    return Ok{};
}

Status SqliteLedger::exec(const char* sql) {
    // A write transaction begins here: the ledger's files must still be there (still_there).
    if (std::string_view(sql).starts_with("BEGIN") ||
        std::string_view(sql).starts_with("SAVEPOINT"))
        if (auto st = still_there(); !st) return st;
    char* msg = nullptr;
    if (sq->exec(db_.get(), sql, nullptr, nullptr, &msg) != SQLITE_OK) {
        std::string text = msg ? msg : sq->errmsg(db_.get());
        sq->free(msg);
        return Error{"sqlite " + path_ + ": " + text};
    }
    return Ok{};
}

}  // namespace sqlite

}  // namespace lastcall
