// SPDX-License-Identifier: Apache-2.0
// The SQLite ledger's records: a run's moves and endings, alone or in one transaction for a
// burst, and the queries of the runs.
#include <sqlite3.h>

#include <optional>
#include <string>
#include <vector>

#include "lastcall/jobs/ledger.hpp"
#include "ledger_sqlite_internal.hpp"

namespace lastcall::sqlite {

namespace {

std::optional<std::int64_t> opt_int(sqlite3_stmt* s, int col) {
    if (sq->column_type(s, col) == SQLITE_NULL) return std::nullopt;
    return sq->column_int64(s, col);
}

}  // namespace

std::string text(sqlite3_stmt* s, int col) {
    const unsigned char* t = sq->column_text(s, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
}

namespace {

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

Result<std::int64_t> SqliteLedger::add(std::string_view job, std::int64_t scheduled_at,
                                       RunState state, std::string_view reason,
                                       std::optional<std::int64_t> retry_of) {
    if (auto st = still_there(); !st) return st.error();
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

Status SqliteLedger::in_transaction(const std::function<Status()>& body) {
    if (auto st = exec("BEGIN IMMEDIATE"); !st) return st;
    if (auto st = body(); !st) {
        (void)exec("ROLLBACK");
        return st;
    }
    if (auto st = exec("COMMIT"); !st) {
        (void)exec("ROLLBACK");
        return st;
    }
    return Ok{};
}

// The pids of a burst in one transaction: one commit for all of them.
Status SqliteLedger::set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) {
    if (pids.size() <= 1) return Ledger::set_pids(pids);
    return in_transaction([&] { return Ledger::set_pids(pids); });
}

// Missed fire times in one transaction: one commit for all of them.
Result<std::size_t> SqliteLedger::add_skipped_all(const std::vector<Skip>& skips) {
    if (skips.size() <= 1) return Ledger::add_skipped_all(skips);
    Status st = in_transaction([&]() -> Status {
        if (auto n = Ledger::add_skipped_all(skips); !n) return n.error();
        return Ok{};
    });
    if (!st) return st.error();
    return skips.size();
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
    if (auto st = still_there(); !st) return st.error();
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
    if (auto st = still_there(); !st) return st;
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

}  // namespace lastcall::sqlite
