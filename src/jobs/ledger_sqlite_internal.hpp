// SPDX-License-Identifier: Apache-2.0
// The SQLite ledger's own parts, shared by its files (ledger_sqlite*.cpp): SQLite's functions,
// prepared statements, and the SqliteLedger class.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/fd.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/jobs/sqlite_api.hpp"

namespace lastcall::sqlite {

// SQLite's functions (jobs/sqlite_api.hpp): set by SqliteLedger::open() before the first
// database handle exists, so every later use finds it set.
extern const SqliteApi* sq;

// A run's columns, as read_row reads them.
inline constexpr const char* kColumns =
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

// A text column ("" for NULL).
std::string text(sqlite3_stmt* s, int col);

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
    Result<std::size_t> add_skipped_all(const std::vector<Skip>& skips) override;
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
    // `body` in one write transaction: committed if it succeeds, rolled back if not.
    Status in_transaction(const std::function<Status()>& body);
    Status migrate();
    Error sql_error(std::string_view what) const;
    // The state directory is still there: the lock file this ledger holds has a link left. A
    // directory removed while lastcall runs (`rm -rf`, a volume unmounted and recreated) leaves
    // the open database writable but deleted: every record would land nowhere, and a second
    // lastcall on the recreated directory takes a fresh lock and runs the same fire times. Each
    // write checks first (one fstat) and fails with the reason instead.
    Status still_there() const;
    Result<bool> transition(std::int64_t id, RunState to, const std::string& set_clause,
                            const std::function<Status(sqlite3_stmt*, int first)>& bind);
    Result<std::vector<RunRecord>> select(const std::string& where,
                                          const std::function<void(Stmt&)>& bind);
    Result<Claim> claim_locked(const ClaimRequest& request);
    Result<bool> fire_time_taken(const ClaimRequest& request);
    Result<std::vector<std::int64_t>> active_runs(const std::string& job, std::int64_t now);
    Result<Claim> start_claimed(const ClaimRequest& request, std::int64_t now,
                                const std::vector<std::int64_t>& active);
    Result<bool> mark_retried(const std::vector<std::int64_t>& interrupted);

    SqliteHandle db_;
    std::string path_;
    UniqueFd lock_;  // held for the ledger's lifetime by the owning supervisor
};

}  // namespace lastcall::sqlite
