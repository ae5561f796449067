// SPDX-License-Identifier: Apache-2.0
// The SQLite ledger's claims and leases: what decides whether a fire time runs here, and for
// how long a run's lease holds.
#include <sqlite3.h>

#include <string>
#include <vector>

#include "lastcall/jobs/ledger.hpp"
#include "ledger_sqlite_internal.hpp"

namespace lastcall::sqlite {

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
        auto taken = fire_time_taken(request);
        if (!taken) return taken.error();
        if (*taken) return out;  // Lost
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
    auto active = active_runs(request.job, now);
    if (!active) return active.error();
    if (!active->empty() && request.concurrency == Concurrency::Forbid) {
        // A retry waits for a free slot instead: its interrupted runs stay open (rolled back).
        if (!request.retry_of.empty()) return out;
        out.reason = forbid_reason(active->front());
        auto id = add(request.job, request.scheduled_at, RunState::Skipped, out.reason);
        if (!id) return id.error();
        out.outcome = Claim::Outcome::Skipped;
        out.id = *id;
        return out;
    }
    return start_claimed(request, now, *active);
}

// Whether a run of the request's fire time (not a retry) is already recorded: another claim won.
Result<bool> SqliteLedger::fire_time_taken(const ClaimRequest& request) {
    Stmt taken(db_.get(),
               "SELECT 1 FROM runs WHERE job = ?1 AND scheduled_at = ?2 AND retry_of IS NULL");
    if (!taken.ok()) return sql_error("prepare claim check");
    taken.bind(1, std::string_view(request.job));
    taken.bind(2, request.scheduled_at);
    int rc = taken.step();
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) return sql_error("claim check of job " + request.job);
    return false;
}

// The job's started runs whose lease (if any) has not lapsed at `now`, oldest first.
Result<std::vector<std::int64_t>> SqliteLedger::active_runs(const std::string& job,
                                                            std::int64_t now) {
    std::vector<std::int64_t> active;
    Stmt a(db_.get(),
           "SELECT id FROM runs WHERE job = ?1 AND state = 'started' AND "
           "(lease_until_ms IS NULL OR lease_until_ms > ?2) ORDER BY id");
    if (!a.ok()) return sql_error("prepare active runs");
    a.bind(1, std::string_view(job));
    a.bind(2, now);
    int rc;
    while ((rc = a.step()) == SQLITE_ROW) active.push_back(sq->column_int64(a.get(), 0));
    if (rc != SQLITE_DONE) return sql_error("active runs of job " + job);
    return active;
}

// The claim's `started` run, inserted; with concurrency = replace, the runs it replaces
// (`active`) interrupted.
Result<Claim> SqliteLedger::start_claimed(const ClaimRequest& request, std::int64_t now,
                                          const std::vector<std::int64_t>& active) {
    Claim out;
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

Result<bool> SqliteLedger::is_current(std::int64_t id, std::string_view owner) {
    Stmt s(db_.get(), "SELECT 1 FROM runs WHERE id = ?1 AND owner = ?2 AND state = 'started'");
    if (!s.ok()) return sql_error("prepare check run");
    s.bind(1, id);
    s.bind(2, owner);
    int rc = s.step();
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_error("check run " + std::to_string(id));
    return rc == SQLITE_ROW;
}

}  // namespace lastcall::sqlite
