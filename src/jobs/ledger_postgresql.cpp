// SPDX-License-Identifier: Apache-2.0
// The shared run ledger in PostgreSQL: the replicas of one deployment claim, renew and record
// their runs in one database (docs/cluster.md). This file: libpq, opening the ledger, and each
// call on its connection with its deadline; the schema is in ledger_postgresql_schema.cpp, the
// claims and leases in ledger_postgresql_claims.cpp, the records in ledger_postgresql_records.cpp.
//
// libpq is loaded with dlopen on the first open, as libmicrohttpd is for --metrics-listen: a
// lastcall that never names a postgresql:// ledger maps no part of it (libpq brings libssl,
// libgssapi and libldap: most of a dynamic lastcall's start-up if it were linked).
//
// lastcall's init runs it on the ledger worker's thread (jobs/ledger_worker.hpp), never on the
// event loop. Every call has a client-side deadline the server cannot defeat: the connection is
// non-blocking (PQconnectStartParams/PQconnectPoll, PQsendQueryParams, PQconsumeInput) and
// lastcall waits for its socket with poll(2) until the call's deadline, then abandons the
// connection (closed: the server ends what it was doing when it notices) and says the outcome is
// unknown. The next call after a failure reconnects, with back-off. Times
// of a lease are the database's clock (clock_timestamp()), so replicas with skewed clocks agree on
// when a lease expired; the times of a record (created, started, ended) are the replica's own.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "lastcall/core/linkage.hpp"
#include "lastcall/core/shared_library.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "ledger_postgresql_internal.hpp"

namespace lastcall {

namespace pg {

namespace {

constexpr const char* kLibrary = "libpq.so.5";
// A call's deadline when no one set one (`lastcall runs`, the start's checks).
constexpr std::chrono::milliseconds kDefaultCallBudget{5000};

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
        return resolve_symbol(h, "PQconnectStartParams", lib.connect_start_params) &&
               resolve_symbol(h, "PQconnectPoll", lib.connect_poll) &&
               resolve_symbol(h, "PQsocket", lib.socket) &&
               resolve_symbol(h, "PQsetnonblocking", lib.set_nonblocking) &&
               resolve_symbol(h, "PQsendQuery", lib.send_query) &&
               resolve_symbol(h, "PQsendQueryParams", lib.send_query_params) &&
               resolve_symbol(h, "PQflush", lib.flush) &&
               resolve_symbol(h, "PQconsumeInput", lib.consume_input) &&
               resolve_symbol(h, "PQisBusy", lib.is_busy) &&
               resolve_symbol(h, "PQgetResult", lib.get_result) &&
               resolve_symbol(h, "PQconninfoParse", lib.conninfo_parse) &&
               resolve_symbol(h, "PQconninfoFree", lib.conninfo_free) &&
               resolve_symbol(h, "PQstatus", lib.status) &&
               resolve_symbol(h, "PQerrorMessage", lib.error_message) &&
               resolve_symbol(h, "PQfinish", lib.finish) &&
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

}  // namespace

std::string text_array(const std::vector<std::string>& items) {
    std::string out = "{";
    for (std::size_t i = 0; i < items.size(); ++i) {
        out += i ? ",\"" : "\"";
        for (char c : items[i]) {
            if (c == '"' || c == '\\') out += '\\';
            out += c;
        }
        out += '"';
    }
    return out + "}";
}

std::string int_array(const std::vector<std::int64_t>& ids) {
    std::string out = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    return out + "}";
}

Result<std::unique_ptr<Ledger>> PostgresLedger::open(const std::string& url, bool exclusive,
                                                     LedgerIdentity identity) {
    auto lib = load_libpq();
    if (!lib) return lib.error();
    char* why = nullptr;
    PQconninfoOption* opts = (*lib)->conninfo_parse(url.c_str(), &why);
    if (!opts) {
        // libpq's message quotes the part it could not read, which may be the password.
        std::string msg = why ? why : "out of memory";
        std::free(why);
        while (!msg.empty() && msg.back() == '\n') msg.pop_back();
        return Error{"ledger URL: " + hide_url_passwords(url, std::move(msg))};
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
    // Each call's deadline is lastcall's own (the ledger worker's budget, or kDefaultCallBudget):
    // a server that hangs cannot stretch it. What the server is asked to bound besides, so that a
    // stalled statement or a lost client does not hold its resources for long:
    //   lock_timeout 2 s: a claim waiting for a job's lock that another replica's claim holds;
    //   statement_timeout 5 s: a statement that runs on past every client's deadline;
    //   idle_in_transaction_session_timeout 10 s: the transaction of a `complete` whose client
    //     vanished between its statements (claims are one statement: they hold no lock across a
    //     round trip);
    //   tcp_keepalives_*: a dead replica's connection is noticed within ~11 s;
    //   tcp_user_timeout 3 s (client side): unacknowledged data on a vanished server errors out.
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
        if (auto st = ledger->migrate(); !st) return st.error();
        // A claim-shaped write now, rolled back: a role without the rights a claim needs fails
        // the start, instead of a replica that looks healthy and never runs a job.
        if (auto st = ledger->probe_claim(); !st) return st.error();
        if (auto st = ledger->check_peers(); !st) return st.error();
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

// A URL that connects as this ledger does, without its credentials (a job's `lastcall runs
// check` finds the server with it; the credentials, if any, are the job's own: its `env`, its
// .pgpass): every keyword as a query parameter, percent-encoded (a Unix socket's directory as
// host). The password and the files of the credentials (as kLedgerCredentials, environment.hpp)
// are lastcall's alone.
std::string PostgresLedger::connect_url() const {
    std::string out = "postgresql://";
    char sep = '?';
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        if (keys_[i] == "password" || keys_[i] == "passfile" || keys_[i] == "sslkey" ||
            keys_[i] == "sslpassword")
            continue;
        out += sep + keys_[i] + "=";
        sep = '&';
        for (unsigned char c : values_[i]) {
            if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
                out += static_cast<char>(c);
            } else {
                char hex[4];
                std::snprintf(hex, sizeof hex, "%%%02X", c);
                out += hex;
            }
        }
    }
    return out;
}

// The call's deadline: the worker's (set_deadline), or kDefaultCallBudget from now for a call
// made outside the worker (`lastcall runs`, the start's open).
std::chrono::steady_clock::time_point PostgresLedger::call_deadline() const {
    if (deadline_) return *deadline_;
    return std::chrono::steady_clock::now() + kDefaultCallBudget;
}

// Waits until the connection's socket is ready for `events`, at most until the call's deadline.
// false: the deadline came first (or the socket is gone).
bool PostgresLedger::wait_socket(short events) const {
    auto deadline = call_deadline();
    for (;;) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd pfd{lib_->socket(conn_), events, 0};
        if (pfd.fd < 0) return false;
        int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 60000)));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

// The connection is closed and the next call opens a new one, after the back-off: what a call
// that could not finish leaves behind (its transaction, if any, is rolled back by the server
// when it notices the closed socket).
void PostgresLedger::abandon(const std::string& why) {
    if (conn_) lib_->finish(conn_);
    conn_ = nullptr;
    last_failure_ = why;
    // At most a third of the lease: after an outage the first replica back gives every run a
    // fresh lease (expire_leases), and the run's owner must reach the ledger well within it to
    // write what it owes. With 8 s between attempts and a 6 s lease, an owner whose attempt
    // fell just before the database came back tried again only after the other replicas had
    // expired its run: a run that completed during the outage was recorded interrupted (CI, three
    // replicas under load).
    auto most = std::chrono::milliseconds(8000);
    if (identity_.lease_ms > 0)
        most = std::clamp(std::chrono::milliseconds(identity_.lease_ms / 3),
                          std::chrono::milliseconds(500), most);
    backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(500), most);
    retry_at_ = std::chrono::steady_clock::now() + backoff_;
}

Status PostgresLedger::connect() {
    if (conn_ && lib_->status(conn_) == CONNECTION_OK) return Ok{};
    // After a failed connect every call fails at once until the next attempt is due: a server
    // that does not answer (a TCP black hole) would otherwise take each call's whole budget,
    // most of the time at a tick a second. 0.5 s, doubling to 8 s.
    auto now = std::chrono::steady_clock::now();
    if (retry_at_ && now < *retry_at_) return error("connect", last_failure_);
    if (conn_) {
        // A broken connection (the server restarted, a network cut) is opened anew (PQreset
        // would block).
        lib_->finish(conn_);
        conn_ = nullptr;
    }
    std::vector<const char*> k, v;
    for (std::size_t i = 0; i < keys_.size(); ++i) {
        k.push_back(keys_[i].c_str());
        v.push_back(values_[i].c_str());
    }
    k.push_back(nullptr);
    v.push_back(nullptr);
    conn_ = lib_->connect_start_params(k.data(), v.data(), 0);
    if (!conn_) return error("connect", "out of memory");
    lib_->set_notice_processor(conn_, ignore_notice, nullptr);  // "already exists, skipping"
    // PQconnectStart's contract: act as if PQconnectPoll had said "writing" first.
    PostgresPollingStatusType polled =
        lib_->status(conn_) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
    while (polled == PGRES_POLLING_READING || polled == PGRES_POLLING_WRITING) {
        if (!wait_socket(polled == PGRES_POLLING_READING ? POLLIN : POLLOUT)) {
            abandon("no answer within the call's deadline");
            return error("connect", last_failure_);
        }
        polled = lib_->connect_poll(conn_);
    }
    if (polled != PGRES_POLLING_OK || lib_->status(conn_) != CONNECTION_OK) {
        abandon(one_line(lib_->error_message(conn_)));
        return error("connect", last_failure_);
    }
    if (lib_->set_nonblocking(conn_, 1) != 0) {
        abandon(one_line(lib_->error_message(conn_)));
        return error("connect", last_failure_);
    }
    retry_at_.reset();
    backoff_ = std::chrono::milliseconds(0);
    return Ok{};
}

Result<PgResult> PostgresLedger::run(std::string_view what, const std::string& sql,
                                     const std::vector<Param>& params, PgFailure* failure) {
    auto fail = [&](const std::string& msg) -> Result<PgResult> {
        if (failure) failure->message = msg;
        return error(what, msg);
    };
    if (auto st = connect(); !st) {
        if (failure) failure->message = st.error().message;
        return st.error();
    }
    std::vector<const char*> values;
    for (const auto& v : params) values.push_back(v ? v->c_str() : nullptr);
    int sent = params.empty()
                   ? lib_->send_query(conn_, sql.c_str())
                   : lib_->send_query_params(conn_, sql.c_str(), static_cast<int>(params.size()),
                                             nullptr, values.data(), nullptr, nullptr, 0);
    if (!sent) {
        std::string msg = one_line(lib_->error_message(conn_));
        abandon(msg);
        return fail(msg);
    }
    const std::string timed_out =
        "no answer within the call's deadline (connection abandoned; outcome unknown)";
    // The query out (a non-blocking connection may keep part of it buffered) ...
    for (;;) {
        int f = lib_->flush(conn_);
        if (f == 0) break;
        if (f < 0 || !wait_socket(POLLOUT | POLLIN)) {
            std::string msg = f < 0 ? one_line(lib_->error_message(conn_)) : timed_out;
            abandon(msg);
            return fail(msg);
        }
        // libpq's rule: input that arrived meanwhile is consumed, or the server may block on us.
        if (!lib_->consume_input(conn_)) {
            std::string msg = one_line(lib_->error_message(conn_));
            abandon(msg);
            return fail(msg);
        }
    }
    // ... then every result it makes (a script of several statements makes one each): the first
    // error is the answer, else the last result.
    std::optional<PgResult> answer, first_error;
    for (;;) {
        while (!lib_->is_busy(conn_)) {
            PGresult* raw = lib_->get_result(conn_);
            if (!raw) goto done;
            ExecStatusType st = lib_->result_status(raw);
            if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && !first_error)
                first_error.emplace(lib_, raw);
            else
                answer.emplace(lib_, raw);
        }
        if (!wait_socket(POLLIN)) {
            abandon(timed_out);
            return fail(timed_out);
        }
        if (!lib_->consume_input(conn_)) {
            std::string msg = one_line(lib_->error_message(conn_));
            abandon(msg);
            return fail(msg);
        }
    }
done:
    if (!first_error && answer) return std::move(*answer);
    PGresult* raw = first_error ? first_error->raw() : nullptr;
    std::string msg = one_line(raw ? lib_->result_error(raw) : lib_->error_message(conn_));
    if (failure) {
        const char* state = raw ? lib_->result_error_field(raw, PG_DIAG_SQLSTATE) : nullptr;
        failure->unique_violation = state && std::strcmp(state, "23505") == 0;
        failure->message = msg;
    }
    if (lib_->status(conn_) != CONNECTION_OK) abandon(msg);
    return error(what, msg);
}

}  // namespace pg

Result<std::unique_ptr<Ledger>> open_postgresql_ledger(const std::string& url, bool exclusive,
                                                       LedgerIdentity identity) {
    return pg::PostgresLedger::open(url, exclusive, std::move(identity));
}

}  // namespace lastcall
