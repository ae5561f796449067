// SPDX-License-Identifier: Apache-2.0
// The shared run ledger in PostgreSQL: the replicas of one deployment claim, renew and record
// their runs in one database (docs/cluster.md).
//
// libpq is loaded with dlopen on the first open, as libmicrohttpd is for --metrics-listen: a
// lastcall that never names a postgresql:// ledger maps no part of it (libpq brings libssl,
// libgssapi and libldap: most of a dynamic lastcall's start-up if it were linked).
//
// Every call blocks the event loop for one round trip (a Unix socket or the pod network: well
// under a millisecond to a few). A connection that broke is reopened on the next call; the
// timeouts set in open() bound each way a call can stall while the database is unreachable. Times
// of a lease are the database's clock (clock_timestamp()), so replicas with skewed clocks agree on
// when a lease expired; the times of a record (created, started, ended) are the replica's own.
#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "lastcall/core/linkage.hpp"
#include "lastcall/core/shared_library.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/jobs/ledger.hpp"

namespace lastcall {

namespace {

constexpr const char* kLibrary = "libpq.so.5";

// The part of libpq lastcall uses, resolved once.
struct LibPq {
    decltype(&::PQconnectdbParams) connectdb_params = nullptr;
    decltype(&::PQconninfoParse) conninfo_parse = nullptr;
    decltype(&::PQconninfoFree) conninfo_free = nullptr;
    decltype(&::PQstatus) status = nullptr;
    decltype(&::PQerrorMessage) error_message = nullptr;
    decltype(&::PQfinish) finish = nullptr;
    decltype(&::PQreset) reset = nullptr;
    decltype(&::PQexec) exec = nullptr;
    decltype(&::PQexecParams) exec_params = nullptr;
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

Result<const LibPq*> load_libpq() {
    if (!can_load_shared_libraries()) {
        twin::hand_over(kPostgresLedgerNeedsLibpq);
        return Error{
            std::string(kPostgresLedgerNeedsLibpq) +
            ", which the static build cannot load (install the .deb, whose /usr/bin/lastcall "
            "hands such runs to its dynamic twin)"};
    }
    static LibPq lib;
    static SharedLibraryOnce library(
        kLibrary, "a postgresql:// ledger needs libpq5 (apt-get install libpq5)");
    auto st = library.load([](void* h) {
        return resolve_symbol(h, "PQconnectdbParams", lib.connectdb_params) &&
               resolve_symbol(h, "PQconninfoParse", lib.conninfo_parse) &&
               resolve_symbol(h, "PQconninfoFree", lib.conninfo_free) &&
               resolve_symbol(h, "PQstatus", lib.status) &&
               resolve_symbol(h, "PQerrorMessage", lib.error_message) &&
               resolve_symbol(h, "PQfinish", lib.finish) &&
               resolve_symbol(h, "PQreset", lib.reset) && resolve_symbol(h, "PQexec", lib.exec) &&
               resolve_symbol(h, "PQexecParams", lib.exec_params) &&
               resolve_symbol(h, "PQresultStatus", lib.result_status) &&
               resolve_symbol(h, "PQresultErrorMessage", lib.result_error) &&
               resolve_symbol(h, "PQresultErrorField", lib.result_error_field) &&
               resolve_symbol(h, "PQntuples", lib.ntuples) &&
               resolve_symbol(h, "PQgetvalue", lib.getvalue) &&
               resolve_symbol(h, "PQgetisnull", lib.getisnull) &&
               resolve_symbol(h, "PQcmdTuples", lib.cmd_tuples) &&
               resolve_symbol(h, "PQclear", lib.clear) &&
               resolve_symbol(h, "PQsetNoticeProcessor", lib.set_notice_processor);
    });
    if (!st) return st.error();
    return &lib;
}

// The database's clock in Unix milliseconds: what leases are measured in.
constexpr const char* kDbNowMs = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

// Created by the first replica to open the database, under an advisory lock: replicas that
// start together would otherwise race on CREATE ... IF NOT EXISTS (a duplicate pg_type row).
constexpr const char* kSchema = R"sql(
SELECT pg_advisory_xact_lock(7294017321);
CREATE SCHEMA IF NOT EXISTS lastcall;
CREATE TABLE IF NOT EXISTS lastcall.runs (
    id             BIGSERIAL PRIMARY KEY,
    job            TEXT    NOT NULL,
    scheduled_at   BIGINT  NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN
                       ('scheduled', 'started', 'completed', 'failed', 'interrupted', 'skipped')),
    pid            BIGINT,
    created_ms     BIGINT  NOT NULL,
    started_ms     BIGINT,
    ended_ms       BIGINT,
    exit_code      INTEGER,
    signal         INTEGER,
    reason         TEXT    NOT NULL DEFAULT '',
    retry_of       BIGINT,
    recovery       TEXT,
    replica        TEXT    NOT NULL DEFAULT '',
    owner          TEXT    NOT NULL DEFAULT '',
    lease_until_ms BIGINT
);
CREATE INDEX IF NOT EXISTS runs_by_job ON lastcall.runs (job, id);
CREATE INDEX IF NOT EXISTS runs_open ON lastcall.runs (state)
    WHERE state IN ('scheduled', 'started');
-- What every replica asks each second or at each fire time, answered from small indexes and not
-- a scan of a history that grows by a row per fire time: the active runs of a job (a claim's
-- concurrency check), a fire time taken, the runs awaiting recovery, a held job.
CREATE INDEX IF NOT EXISTS runs_active_by_job ON lastcall.runs (job) WHERE state = 'started';
CREATE INDEX IF NOT EXISTS runs_by_fire ON lastcall.runs (job, scheduled_at);
CREATE INDEX IF NOT EXISTS runs_awaiting_recovery ON lastcall.runs (id)
    WHERE state = 'interrupted' AND (recovery IS NULL OR recovery = 'released');
CREATE INDEX IF NOT EXISTS runs_held ON lastcall.runs (job)
    WHERE state = 'interrupted' AND recovery = 'held';
-- Exactly once, whoever writes: one run that ran per fire time, one retry per interrupted run.
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_per_fire ON lastcall.runs (job, scheduled_at)
    WHERE retry_of IS NULL AND state <> 'skipped';
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_retry ON lastcall.runs (retry_of)
    WHERE retry_of IS NOT NULL AND state <> 'skipped';
-- The run model in the database: forward only, and a terminal state is final.
CREATE OR REPLACE FUNCTION lastcall.run_state_moves_forward() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF OLD.state IN ('completed', 'failed', 'interrupted', 'skipped') THEN
        RAISE EXCEPTION 'a terminal run state is final (run %: %, not %)',
            OLD.id, OLD.state, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.state = 'started' AND NEW.state IN ('scheduled', 'skipped') THEN
        RAISE EXCEPTION 'a run state only moves forward (run %: started, not %)',
            OLD.id, NEW.state USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER runs_state_moves_forward BEFORE UPDATE OF state ON lastcall.runs
    FOR EACH ROW EXECUTE FUNCTION lastcall.run_state_moves_forward();
CREATE TABLE IF NOT EXISTS lastcall.watermarks (
    job          TEXT   PRIMARY KEY,
    scheduled_at BIGINT NOT NULL,
    run_id       BIGINT NOT NULL
);
CREATE OR REPLACE FUNCTION lastcall.watermark_never_moves_back() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.scheduled_at < OLD.scheduled_at THEN
        RAISE EXCEPTION 'a watermark never moves backwards (job %)', OLD.job
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER watermarks_never_move_back BEFORE UPDATE ON lastcall.watermarks
    FOR EACH ROW EXECUTE FUNCTION lastcall.watermark_never_moves_back();
CREATE TABLE IF NOT EXISTS lastcall.starts (
    id      BIGSERIAL PRIMARY KEY,
    replica TEXT   NOT NULL,
    pid     BIGINT NOT NULL,
    at_ms   BIGINT NOT NULL
);
)sql";

constexpr const char* kColumns =
    "id, job, scheduled_at, state, pid, created_ms, started_ms, ended_ms, exit_code, signal, "
    "reason, retry_of, coalesce(recovery, ''), replica, lease_until_ms";

// "{1,2,3}": a bigint[] parameter.
std::string int_array(const std::vector<std::int64_t>& ids) {
    std::string out = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    return out + "}";
}

// A text parameter: nullopt is SQL NULL.
using Param = std::optional<std::string>;
Param p(std::int64_t v) {
    return std::to_string(v);
}
Param p(std::string_view v) {
    return std::string(v);
}
Param p(std::optional<std::int64_t> v) {
    return v ? p(*v) : std::nullopt;
}
Param p(std::optional<int> v) {
    return v ? p(static_cast<std::int64_t>(*v)) : std::nullopt;
}

void ignore_notice(void*, const char*) {}

// libpq's messages end in a newline and put one attempt (or a HINT) per line, indented with a
// tab: lastcall's log and errors are one line each.
std::string one_line(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\n' || c == '\t') {
            if (!out.empty() && out.back() != ' ') out += c == '\n' ? "; " : " ";
            continue;
        }
        out += c;
    }
    while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
    return out;
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

  private:
    const LibPq* lib_;
    PGresult* r_;
};

RunRecord read_row(const PgResult& r, int row) {
    RunRecord out;
    out.id = r.num(row, 0);
    out.job = r.text(row, 1);
    out.scheduled_at = r.num(row, 2);
    out.state = parse_run_state(r.text(row, 3)).value_or(RunState::Failed);
    out.pid = r.opt(row, 4);
    out.created_ms = r.num(row, 5);
    out.started_ms = r.opt(row, 6);
    out.ended_ms = r.opt(row, 7);
    if (auto v = r.opt(row, 8)) out.exit_code = static_cast<int>(*v);
    if (auto v = r.opt(row, 9)) out.signal = static_cast<int>(*v);
    out.reason = r.text(row, 10);
    out.retry_of = r.opt(row, 11);
    out.recovery = r.text(row, 12);
    out.replica = r.text(row, 13);
    out.lease_until_ms = r.opt(row, 14);
    return out;
}

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

Result<std::unique_ptr<Ledger>> PostgresLedger::open(const std::string& url, bool exclusive,
                                                     LedgerIdentity identity) {
    auto lib = load_libpq();
    if (!lib) return lib.error();
    char* why = nullptr;
    PQconninfoOption* opts = (*lib)->conninfo_parse(url.c_str(), &why);
    if (!opts) {
        // libpq's message names the part it could not read, never the password.
        std::string msg = why ? why : "out of memory";
        std::free(why);
        while (!msg.empty() && msg.back() == '\n') msg.pop_back();
        return Error{"ledger URL: " + msg};
    }
    std::vector<std::string> keys, values;
    std::map<std::string, std::string> given;
    for (PQconninfoOption* o = opts; o->keyword; ++o) {
        if (!o->val) continue;
        keys.emplace_back(o->keyword);
        values.emplace_back(o->val);
        given[o->keyword] = o->val;
    }
    (*lib)->conninfo_free(opts);
    // Every call blocks lastcall's loop until it returns, so each way a call can hang is bounded,
    // unless the URL says otherwise:
    //   connect_timeout 2 s (libpq's minimum): a server that does not answer the connection;
    //   tcp_user_timeout 3 s: a server that vanished mid-query (a node lost; the kernel's own
    //     timeout is minutes);
    //   lock_timeout 2 s: a claim waiting for a job's lock that another replica still holds;
    //   statement_timeout 5 s: a server that answers nothing (overloaded, its disk stalled).
    // And on the server's side, for the locks of a replica that died mid-transaction:
    //   idle_in_transaction_session_timeout 10 s: a stopped (SIGSTOP) or partitioned replica's
    //     open transaction is ended;
    //   tcp_keepalives_*: a dead replica's connection is noticed within ~11 s.
    if (!given.count("connect_timeout"))
        keys.emplace_back("connect_timeout"), values.emplace_back("2");
    if (!given.count("application_name"))
        keys.emplace_back("application_name"), values.emplace_back("lastcall");
    if (!given.count("tcp_user_timeout"))
        keys.emplace_back("tcp_user_timeout"), values.emplace_back("3000");
    if (!given.count("options"))
        keys.emplace_back("options"),
            values.emplace_back(
                "-c lock_timeout=2s -c statement_timeout=5s "
                "-c idle_in_transaction_session_timeout=10s -c tcp_keepalives_idle=5 "
                "-c tcp_keepalives_interval=2 -c tcp_keepalives_count=3");
    // Shown in messages and `lastcall runs`: what identifies the database, never the password.
    std::string display = "postgresql://";
    if (given.count("user")) display += given["user"] + "@";
    display += given.count("host") ? given["host"] : "";
    if (given.count("port")) display += ":" + given["port"];
    display += "/" + (given.count("dbname") ? given["dbname"] : "");
    std::unique_ptr<PostgresLedger> ledger(
        new PostgresLedger(*lib, std::move(keys), std::move(values), std::move(display)));
    ledger->set_identity(std::move(identity));
    if (auto st = ledger->connect(); !st) return st.error();
    if (exclusive) {
        // Once created, the schema is only used: a database user without CREATE (or not the
        // owner of the tables) can run lastcall once an administrator created them.
        auto exists =
            ledger->run("look for the schema", "SELECT to_regclass('lastcall.starts') IS NOT NULL");
        if (!exists) return exists.error();
        if (exists->text(0, 0) != "t")
            if (auto r = ledger->run("create schema", kSchema); !r) return r.error();
        // A real write now: an unreachable or read-only database fails the start.
        if (auto r = ledger->run("record start",
                                 "INSERT INTO lastcall.starts (replica, pid, at_ms) "
                                 "VALUES ($1, $2, $3)",
                                 {p(std::string_view(ledger->identity().replica)),
                                  p(std::int64_t{::getpid()}), p(unix_ms_now())});
            !r)
            return r.error();
    }
    return std::unique_ptr<Ledger>(std::move(ledger));
}

Status PostgresLedger::connect() {
    if (conn_ && lib_->status(conn_) == CONNECTION_OK) return Ok{};
    // After a failed connect every call fails at once until the next attempt is due: a server
    // that does not answer (a TCP black hole) would otherwise stall lastcall's loop for the
    // connect_timeout on every call, most of the time at a tick a second. 1 s, doubling to 8 s.
    auto now = std::chrono::steady_clock::now();
    if (retry_at_ && now < *retry_at_) return error("connect", last_failure_);
    if (conn_) {
        // A broken connection (the server restarted, a network cut) is reopened in place.
        lib_->reset(conn_);
    } else {
        std::vector<const char*> k, v;
        for (std::size_t i = 0; i < keys_.size(); ++i) {
            k.push_back(keys_[i].c_str());
            v.push_back(values_[i].c_str());
        }
        k.push_back(nullptr);
        v.push_back(nullptr);
        conn_ = lib_->connectdb_params(k.data(), v.data(), 0);
        if (!conn_) return error("connect", "out of memory");
        lib_->set_notice_processor(conn_, ignore_notice, nullptr);  // "already exists, skipping"
    }
    if (lib_->status(conn_) != CONNECTION_OK) {
        last_failure_ = one_line(lib_->error_message(conn_));
        backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(1000),
                              std::chrono::milliseconds(8000));
        retry_at_ = std::chrono::steady_clock::now() + backoff_;
        return error("connect", last_failure_);
    }
    retry_at_.reset();
    backoff_ = std::chrono::milliseconds(0);
    return Ok{};
}

Result<PgResult> PostgresLedger::run(std::string_view what, const std::string& sql,
                                     const std::vector<Param>& params, PgFailure* failure) {
    if (auto st = connect(); !st) {
        if (failure) failure->message = st.error().message;
        return st.error();
    }
    std::vector<const char*> values;
    for (const auto& v : params) values.push_back(v ? v->c_str() : nullptr);
    PGresult* raw = params.empty()
                        ? lib_->exec(conn_, sql.c_str())
                        : lib_->exec_params(conn_, sql.c_str(), static_cast<int>(params.size()),
                                            nullptr, values.data(), nullptr, nullptr, 0);
    PgResult r(lib_, raw);
    ExecStatusType st = raw ? lib_->result_status(raw) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    std::string msg = raw ? lib_->result_error(raw) : lib_->error_message(conn_);
    msg = one_line(msg);
    if (failure) {
        const char* state = raw ? lib_->result_error_field(raw, PG_DIAG_SQLSTATE) : nullptr;
        failure->unique_violation = state && std::strcmp(state, "23505") == 0;
        failure->message = msg;
    }
    return error(what, msg);
}

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

Result<std::int64_t> PostgresLedger::add(std::string_view job, std::int64_t scheduled_at,
                                         RunState state, std::string_view reason,
                                         std::optional<std::int64_t> retry_of) {
    std::int64_t now = unix_ms_now();
    auto r = run("insert run of job " + std::string(job),
                 "INSERT INTO lastcall.runs (job, scheduled_at, state, created_ms, ended_ms, "
                 "reason, retry_of, replica, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
                 "RETURNING id",
                 {p(job), p(scheduled_at), p(to_string(state)), p(now),
                  p(is_terminal(state) ? std::optional<std::int64_t>(now) : std::nullopt),
                  p(reason), p(retry_of), p(std::string_view(identity_.replica)),
                  p(std::string_view(identity_.owner))});
    if (!r) return r.error();
    return r->num(0, 0);
}

Result<Claim> PostgresLedger::claim(const ClaimRequest& request) {
    Claim out;
    std::string what = "claim run of job " + request.job;
    auto done = transaction(what, [&]() -> Result<bool> {
        // Claims of one job queue up here, across replicas: the check and the insert below are
        // one step for every other claimer (READ COMMITTED alone would let two pass the check).
        if (auto r = run(what, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                         {p("lastcall.job." + request.job)});
            !r)
            return r.error();
        if (request.retry_of.empty()) {
            auto taken = run(what,
                             "SELECT 1 FROM lastcall.runs WHERE job = $1 AND scheduled_at = $2 "
                             "AND retry_of IS NULL LIMIT 1",
                             {p(std::string_view(request.job)), p(request.scheduled_at)});
            if (!taken) return taken.error();
            if (taken->rows() > 0) return false;  // Lost
        } else {
            auto marked = run(what,
                              "UPDATE lastcall.runs SET recovery = 'retried' WHERE id = "
                              "ANY($1::bigint[]) AND state = 'interrupted' AND (recovery IS NULL "
                              "OR recovery = 'released')",
                              {p(std::string_view(int_array(request.retry_of)))});
            if (!marked) return marked.error();
            if (marked->affected() != static_cast<long>(request.retry_of.size()))
                return false;  // retried by another replica: Lost
        }
        if (!request.skip_reason.empty() && request.retry_of.empty()) {
            auto id =
                add(request.job, request.scheduled_at, RunState::Skipped, request.skip_reason);
            if (!id) return id.error();
            out.outcome = Claim::Outcome::Skipped;
            out.id = *id;
            out.reason = request.skip_reason;
            return true;
        }
        auto active =
            run(what,
                std::string("SELECT id FROM lastcall.runs WHERE job = $1 AND state = "
                            "'started' AND (lease_until_ms IS NULL OR lease_until_ms > ") +
                    kDbNowMs + ") ORDER BY id",
                {p(std::string_view(request.job))});
        if (!active) return active.error();
        std::vector<std::int64_t> ids;
        for (int i = 0; i < active->rows(); ++i) ids.push_back(active->num(i, 0));
        if (!ids.empty() && request.concurrency == Concurrency::Forbid) {
            if (!request.retry_of.empty()) return false;  // the retry waits for a free slot
            out.reason = forbid_reason(ids.front());
            auto id = add(request.job, request.scheduled_at, RunState::Skipped, out.reason);
            if (!id) return id.error();
            out.outcome = Claim::Outcome::Skipped;
            out.id = *id;
            return true;
        }
        std::int64_t now = unix_ms_now();
        PgFailure failure;
        auto ins =
            run(what,
                std::string("INSERT INTO lastcall.runs (job, scheduled_at, state, pid, "
                            "created_ms, started_ms, retry_of, replica, owner, "
                            "lease_until_ms) VALUES ($1, $2, 'started', NULL, $3, $3, $4, $5, "
                            "$6, CASE WHEN $7::bigint > 0 THEN ") +
                    kDbNowMs + " + $7::bigint END) RETURNING id",
                {p(std::string_view(request.job)), p(request.scheduled_at), p(now),
                 p(request.retry_of.empty() ? std::nullopt
                                            : std::optional<std::int64_t>(request.retry_of.back())),
                 p(std::string_view(identity_.replica)), p(std::string_view(identity_.owner)),
                 p(identity_.lease_ms)},
                &failure);
        if (!ins) {
            if (failure.unique_violation) return false;  // the key says another claim won
            return ins.error();
        }
        out.outcome = Claim::Outcome::Started;
        out.id = ins->num(0, 0);
        if (request.concurrency == Concurrency::Replace && !ids.empty()) {
            auto replaced =
                run(what,
                    // Its successor is running: a replaced run is never retried (recovery none).
                    "UPDATE lastcall.runs SET state = 'interrupted', ended_ms = $2, reason = $3, "
                    "recovery = 'none' WHERE id = ANY($1::bigint[]) AND state = 'started' "
                    "RETURNING id",
                    {p(std::string_view(int_array(ids))), p(now),
                     p("replaced by run " + std::to_string(out.id) + " (concurrency = replace)")});
            if (!replaced) return replaced.error();
            for (int i = 0; i < replaced->rows(); ++i) out.replaced.push_back(replaced->num(i, 0));
        }
        return true;
    });
    if (!done) return done.error();
    if (!*done) return Claim{};  // Lost: rolled back, nothing recorded
    return out;
}

Result<bool> PostgresLedger::transition(std::int64_t id, RunState to, const std::string& set_clause,
                                        std::vector<Param> params) {
    params.insert(params.begin(), {p(to_string(to)), p(id)});
    auto r = run("update run " + std::to_string(id) + " to " + std::string(to_string(to)),
                 "UPDATE lastcall.runs SET state = $1" + set_clause +
                     " WHERE id = $2 AND state IN " + sql_sources_of(to),
                 params);
    if (!r) return r.error();
    return r->affected() == 1;
}

Result<bool> PostgresLedger::start(std::int64_t id) {
    // Not spawned yet: no process to name (set_pid does, after the spawn).
    return transition(id, RunState::Started,
                      ", pid = NULL, started_ms = $3, replica = $4, owner = $5, lease_until_ms = "
                      "CASE WHEN $6::bigint > 0 THEN " +
                          std::string(kDbNowMs) + " + $6::bigint END",
                      {p(unix_ms_now()), p(std::string_view(identity_.replica)),
                       p(std::string_view(identity_.owner)), p(identity_.lease_ms)});
}

Status PostgresLedger::set_pid(std::int64_t id, std::int64_t pid) {
    auto r = run("set pid of run " + std::to_string(id),
                 "UPDATE lastcall.runs SET pid = $1 WHERE id = $2", {p(pid), p(id)});
    if (!r) return r.error();
    return Ok{};
}

Result<bool> PostgresLedger::finish(std::int64_t id, RunState to, RunOutcome outcome,
                                    std::string_view reason) {
    if (!is_terminal(to)) return Error{"finish run " + std::to_string(id) + ": not terminal"};
    return transition(id, to, ", ended_ms = $3, exit_code = $4, signal = $5, reason = $6",
                      {p(unix_ms_now()), p(outcome.exit_code), p(outcome.signal), p(reason)});
}

Result<bool> PostgresLedger::complete(std::int64_t id, RunOutcome outcome) {
    // One transaction: the record and the watermark become durable together, and the watermark
    // only ever moves on a run that really became completed.
    return transaction("complete run " + std::to_string(id), [&]() -> Result<bool> {
        auto done = finish(id, RunState::Completed, outcome, "");
        if (!done || !*done) return done;
        auto w = run("advance watermark for run " + std::to_string(id),
                     "INSERT INTO lastcall.watermarks (job, scheduled_at, run_id) "
                     "SELECT job, scheduled_at, id FROM lastcall.runs WHERE id = $1 "
                     "ON CONFLICT (job) DO UPDATE SET scheduled_at = excluded.scheduled_at, "
                     "run_id = excluded.run_id "
                     "WHERE excluded.scheduled_at >= lastcall.watermarks.scheduled_at",
                     {p(id)});
        if (!w) return w.error();
        return true;
    });
}

Result<std::vector<std::int64_t>> PostgresLedger::renew(const std::vector<std::int64_t>& ids) {
    std::vector<std::int64_t> held;
    if (ids.empty()) return held;
    auto r = run("renew leases",
                 "UPDATE lastcall.runs SET lease_until_ms = CASE WHEN $3::bigint > 0 THEN " +
                     std::string(kDbNowMs) +
                     " + $3::bigint ELSE lease_until_ms END WHERE id = ANY($1::bigint[]) AND "
                     "owner = $2 AND state = 'started' RETURNING id",
                 {p(std::string_view(int_array(ids))), p(std::string_view(identity_.owner)),
                  p(identity_.lease_ms)});
    if (!r) return r.error();
    for (int i = 0; i < r->rows(); ++i) held.push_back(r->num(i, 0));
    return held;
}

Result<std::vector<RunRecord>> PostgresLedger::expire_leases() {
    // One statement: a renewal that commits first keeps its run (READ COMMITTED re-reads the
    // row's lease after waiting for it).
    auto r = run("expire leases",
                 "UPDATE lastcall.runs SET state = 'interrupted', ended_ms = $1, reason = "
                 "'lease expired: replica ' || replica || ' stopped renewing it' WHERE state IN "
                 "('scheduled', 'started') AND lease_until_ms IS NOT NULL AND lease_until_ms < " +
                     std::string(kDbNowMs) + " RETURNING " + kColumns,
                 {p(unix_ms_now())});
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::optional<std::int64_t>> PostgresLedger::watermark(std::string_view job) {
    auto r = run("read watermark of " + std::string(job),
                 "SELECT scheduled_at FROM lastcall.watermarks WHERE job = $1", {p(job)});
    if (!r) return r.error();
    if (r->rows() == 0) return std::optional<std::int64_t>();
    return std::optional<std::int64_t>(r->num(0, 0));
}

Result<std::vector<RunRecord>> PostgresLedger::select(const std::string& where,
                                                      const std::vector<Param>& params) {
    auto r = run(
        "select runs",
        std::string("SELECT ") + kColumns + " FROM lastcall.runs WHERE " + where + " ORDER BY id",
        params);
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::vector<RunRecord>> PostgresLedger::list(const RunFilter& filter) {
    // NULL parameters match everything: one statement for every filter.
    return select("($1::text IS NULL OR job = $1) AND ($2::text IS NULL OR state = $2)",
                  {filter.job.empty() ? std::nullopt : p(std::string_view(filter.job)),
                   filter.state ? p(to_string(*filter.state)) : std::nullopt});
}

Result<std::vector<Ledger::JobCount>> PostgresLedger::count_runs() {
    // This replica's runs only: each replica exports its own metrics, and Prometheus' sum over
    // the replicas is then the deployment's count (the whole ledger would count each run N times).
    auto r = run("count runs",
                 "SELECT job, state, COUNT(*), COALESCE(MAX(CASE WHEN state = 'completed' THEN "
                 "ended_ms END), 0) FROM lastcall.runs WHERE replica = $1 GROUP BY job, state "
                 "ORDER BY job, state",
                 {p(std::string_view(identity_.replica))});
    if (!r) return r.error();
    std::vector<JobCount> out;
    for (int i = 0; i < r->rows(); ++i)
        out.push_back({r->text(i, 0), r->text(i, 1), r->num(i, 2), r->num(i, 3)});
    return out;
}

Result<std::optional<RunRecord>> PostgresLedger::get(std::int64_t id) {
    auto rows = select("id = $1", {p(id)});
    if (!rows) return rows.error();
    if (rows->empty()) return std::optional<RunRecord>();
    return std::optional<RunRecord>(std::move(rows->front()));
}

Result<std::vector<RunRecord>> PostgresLedger::interrupt_unfinished(std::string_view reason) {
    auto r = run("interrupt unfinished runs",
                 "UPDATE lastcall.runs SET state = 'interrupted', ended_ms = $1, reason = $2 "
                 "WHERE state IN ('scheduled', 'started') AND lease_until_ms IS NULL RETURNING " +
                     std::string(kColumns),
                 {p(unix_ms_now()), p(reason)});
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::vector<RunRecord>> PostgresLedger::awaiting_recovery() {
    return select("state = 'interrupted' AND (recovery IS NULL OR recovery = 'released')", {});
}

Result<std::optional<RunRecord>> PostgresLedger::held_run(std::string_view job) {
    auto rows = select("job = $1 AND state = 'interrupted' AND recovery = 'held'", {p(job)});
    if (!rows) return rows.error();
    if (rows->empty()) return std::optional<RunRecord>();
    return std::optional<RunRecord>(std::move(rows->front()));
}

Status PostgresLedger::set_recovery(std::int64_t id, std::string_view recovery) {
    auto r = run("set recovery of run " + std::to_string(id),
                 "UPDATE lastcall.runs SET recovery = $1 WHERE id = $2", {p(recovery), p(id)});
    if (!r) return r.error();
    return Ok{};
}

Result<std::int64_t> PostgresLedger::add_retry(std::string_view job, std::int64_t scheduled_at,
                                               const std::vector<std::int64_t>& interrupted) {
    if (interrupted.empty()) return Error{"add retry of " + std::string(job) + ": no run given"};
    std::int64_t id = 0;
    auto done = transaction("add retry of " + std::string(job), [&]() -> Result<bool> {
        auto added = add(job, scheduled_at, RunState::Scheduled, "", interrupted.back());
        if (!added) return added.error();
        id = *added;
        auto marked = run("mark retried",
                          "UPDATE lastcall.runs SET recovery = 'retried' WHERE id = "
                          "ANY($1::bigint[])",
                          {p(std::string_view(int_array(interrupted)))});
        if (!marked) return marked.error();
        return true;
    });
    if (!done) return done.error();
    return id;
}

Result<bool> PostgresLedger::release(std::int64_t id) {
    auto r = run("release run " + std::to_string(id),
                 "UPDATE lastcall.runs SET recovery = 'released' WHERE id = $1 AND state = "
                 "'interrupted' AND (recovery IS NULL OR recovery = 'held')",
                 {p(id)});
    if (!r) return r.error();
    return r->affected() == 1;
}

}  // namespace

Result<std::unique_ptr<Ledger>> open_postgresql_ledger(const std::string& url, bool exclusive,
                                                       LedgerIdentity identity) {
    return PostgresLedger::open(url, exclusive, std::move(identity));
}

}  // namespace lastcall
