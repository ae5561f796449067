// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL ledger's own parts, shared by its files (ledger_postgresql*.cpp): libpq's
// functions, statement parameters and results, and the PostgresLedger class.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/jobs/ledger.hpp"

namespace lastcall::pg {

// The part of libpq lastcall uses, resolved once.
struct LibPq {
    decltype(&::PQconnectStartParams) connect_start_params = nullptr;
    decltype(&::PQconnectPoll) connect_poll = nullptr;
    decltype(&::PQsocket) socket = nullptr;
    decltype(&::PQsetnonblocking) set_nonblocking = nullptr;
    decltype(&::PQsendQuery) send_query = nullptr;
    decltype(&::PQsendQueryParams) send_query_params = nullptr;
    decltype(&::PQflush) flush = nullptr;
    decltype(&::PQconsumeInput) consume_input = nullptr;
    decltype(&::PQisBusy) is_busy = nullptr;
    decltype(&::PQgetResult) get_result = nullptr;
    decltype(&::PQconninfoParse) conninfo_parse = nullptr;
    decltype(&::PQconninfoFree) conninfo_free = nullptr;
    decltype(&::PQstatus) status = nullptr;
    decltype(&::PQerrorMessage) error_message = nullptr;
    decltype(&::PQfinish) finish = nullptr;
    decltype(&::PQresultStatus) result_status = nullptr;
    decltype(&::PQresultErrorMessage) result_error = nullptr;
    decltype(&::PQresultErrorField) result_error_field = nullptr;
    decltype(&::PQntuples) ntuples = nullptr;
    decltype(&::PQgetvalue) getvalue = nullptr;
    decltype(&::PQgetisnull) getisnull = nullptr;
    decltype(&::PQcmdTuples) cmd_tuples = nullptr;
    decltype(&::PQclear) clear = nullptr;
    decltype(&::PQsetNoticeProcessor) set_notice_processor = nullptr;
};

// The database's clock in Unix milliseconds: what leases are measured in.
inline constexpr const char* kDbNowMs = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

inline constexpr const char* kColumns =
    "id, job, scheduled_at, state, pid, created_ms, started_ms, ended_ms, exit_code, signal, "
    "reason, retry_of, coalesce(recovery, ''), replica, lease_until_ms, cluster";

// {"a","b"}: a text[] parameter (each element quoted, its quotes and backslashes escaped).
std::string text_array(const std::vector<std::string>& items);

// "{1,2,3}": a bigint[] parameter.
std::string int_array(const std::vector<std::int64_t>& ids);

// A text parameter: nullopt is SQL NULL.
using Param = std::optional<std::string>;
inline Param p(std::int64_t v) {
    return std::to_string(v);
}
inline Param p(std::string_view v) {
    return std::string(v);
}
inline Param p(std::optional<std::int64_t> v) {
    return v ? p(*v) : std::nullopt;
}
inline Param p(std::optional<int> v) {
    return v ? p(static_cast<std::int64_t>(*v)) : std::nullopt;
}

class PgResult {
  public:
    PgResult(const LibPq* lib, PGresult* r) : lib_(lib), r_(r) {}
    PgResult(PgResult&& o) noexcept : lib_(o.lib_), r_(o.r_) { o.r_ = nullptr; }
    PgResult(const PgResult&) = delete;
    PgResult& operator=(const PgResult&) = delete;
    PgResult& operator=(PgResult&&) = delete;
    ~PgResult() {
        if (r_) lib_->clear(r_);
    }
    int rows() const { return lib_->ntuples(r_); }
    bool null(int row, int col) const { return lib_->getisnull(r_, row, col) != 0; }
    std::string text(int row, int col) const { return lib_->getvalue(r_, row, col); }
    std::int64_t num(int row, int col) const {
        return std::strtoll(text(row, col).c_str(), nullptr, 10);
    }
    std::optional<std::int64_t> opt(int row, int col) const {
        if (null(row, col)) return std::nullopt;
        return num(row, col);
    }
    long affected() const { return std::strtol(lib_->cmd_tuples(r_), nullptr, 10); }
    PGresult* raw() const { return r_; }

  private:
    const LibPq* lib_;
    PGresult* r_;
};

RunRecord read_row(const PgResult& r, int row);

// A failed statement: the message, and whether it was a unique-key violation (SQLSTATE 23505),
// which a claim reads as "another replica won".
struct PgFailure {
    std::string message;
    bool unique_violation = false;
};

class PostgresLedger final : public Ledger {
  public:
    static Result<std::unique_ptr<Ledger>> open(const std::string& url, bool exclusive,
                                                LedgerIdentity identity);
    ~PostgresLedger() override {
        if (conn_) lib_->finish(conn_);
    }

    std::string_view backend() const override { return "postgresql"; }
    const std::string& path() const override { return display_; }
    bool shared() const override { return true; }
    Result<std::int64_t> add(std::string_view job, std::int64_t scheduled_at, RunState state,
                             std::string_view reason,
                             std::optional<std::int64_t> retry_of = {}) override;
    Result<Claim> claim(const ClaimRequest& request) override;
    std::vector<Result<Claim>> claim_all(const std::vector<ClaimRequest>& requests) override;
    Result<std::vector<bool>> finish_all(const std::vector<Ending>& endings) override;
    Status set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) override;
    Result<std::int64_t> prune(std::int64_t before_ms, std::size_t batch) override;
    Status heartbeat() override;
    Result<bool> is_current(std::int64_t id, std::string_view owner) override;
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

  private:
    PostgresLedger(const LibPq* lib, std::vector<std::string> keys, std::vector<std::string> values,
                   std::string display)
        : lib_(lib),
          keys_(std::move(keys)),
          values_(std::move(values)),
          display_(std::move(display)) {}
    Status connect();
    Status migrate();
    std::string connect_url() const override;
    Status probe_claim();
    Status check_peers();
    std::chrono::steady_clock::time_point call_deadline() const;
    bool wait_socket(short events) const;
    void abandon(const std::string& why);
    Error error(std::string_view what, const std::string& detail) const {
        return Error{display_ + ": " + std::string(what) + ": " + detail};
    }
    // One statement; the result of a command or a query, or what went wrong.
    Result<PgResult> run(std::string_view what, const std::string& sql,
                         const std::vector<Param>& params = {}, PgFailure* failure = nullptr);
    // BEGIN ... COMMIT around `body`; ROLLBACK when it fails or says so (false).
    template <typename F>
    Result<bool> transaction(std::string_view what, F&& body);
    Result<std::vector<RunRecord>> select(const std::string& where,
                                          const std::vector<Param>& params);
    Result<bool> transition(std::int64_t id, RunState to, const std::string& set_clause,
                            std::vector<Param> params);

    const LibPq* lib_;
    std::vector<std::string> keys_, values_;  // the parsed URL, plus lastcall's defaults
    std::string display_;                     // the URL without its password
    PGconn* conn_ = nullptr;
    std::optional<std::chrono::steady_clock::time_point> retry_at_;  // no connect before this
    std::chrono::milliseconds backoff_{0};
    std::string last_failure_;
};

template <typename F>
Result<bool> PostgresLedger::transaction(std::string_view what, F&& body) {
    if (auto r = run(what, "BEGIN"); !r) return r.error();
    Result<bool> done = body();
    if (!done || !*done) {
        (void)run(what, "ROLLBACK");
        return done;
    }
    // A COMMIT whose answer was lost (the connection broke) may or may not have committed: the
    // caller reads it as an error, and what it wrote is found by the next read.
    if (auto r = run(what, "COMMIT"); !r) return r.error();
    return true;
}

}  // namespace lastcall::pg
