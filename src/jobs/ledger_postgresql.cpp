// SPDX-License-Identifier: Apache-2.0
// The shared run ledger in PostgreSQL: the replicas of one deployment claim, renew and record
// their runs in one database (docs/cluster.md).
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
#include <libpq-fe.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "lastcall/core/linkage.hpp"
#include "lastcall/core/shared_library.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/jobs/ledger.hpp"

namespace lastcall {

namespace {

constexpr const char* kLibrary = "libpq.so.5";
// A call's deadline when no one set one (`lastcall runs`, the start's checks).
constexpr std::chrono::milliseconds kDefaultCallBudget{5000};

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

// The schema's version, in lastcall.schema_version (issue 39). 1: the tables of kSchema, before
// versions were recorded (a database with lastcall.starts and no version table). Each migration
// moves one version forward, under the schema's advisory lock, idempotent (replicas that start
// together may both run it), and records its version in the same implicit transaction; a
// lastcall that finds a version above its own refuses to start (its writes would miss what the
// newer schema requires).
constexpr int kSchemaVersion = 2;
// 1 -> 2:
//   the version table;
//   the deployment key (`cluster`): a fire time is one per (cluster, job, time), each cluster has
//     its own watermarks; rows from before keep the key '' (`cluster = ""`);
//   the replicas' heartbeats, with their cluster and their jobs' commands (what tells a lease
//     that lapsed because the ledger itself was unreachable from one whose replica stopped
//     renewing it, and what a replica with the same key and another command is refused by);
//   final runs immutable in every column, deleted only by `lastcall runs prune`, and the index
//     prune walks;
//   the fencing check;
//   the metrics' counts, kept by triggers.
constexpr const char* kMigrationTo2 = R"sql(
SELECT pg_advisory_xact_lock(7294017321);
CREATE TABLE IF NOT EXISTS lastcall.schema_version (
    version    INTEGER PRIMARY KEY,
    applied_ms BIGINT  NOT NULL
);
ALTER TABLE lastcall.runs ADD COLUMN IF NOT EXISTS cluster TEXT NOT NULL DEFAULT '';
DROP INDEX IF EXISTS lastcall.runs_one_per_fire;
CREATE UNIQUE INDEX IF NOT EXISTS runs_one_per_cluster_fire
    ON lastcall.runs (cluster, job, scheduled_at) WHERE retry_of IS NULL AND state <> 'skipped';
CREATE INDEX IF NOT EXISTS runs_by_cluster_fire ON lastcall.runs (cluster, job, scheduled_at);
CREATE INDEX IF NOT EXISTS runs_started_by_cluster_job ON lastcall.runs (cluster, job)
    WHERE state = 'started';
CREATE INDEX IF NOT EXISTS runs_final_by_end ON lastcall.runs (ended_ms)
    WHERE state IN ('completed', 'failed', 'interrupted', 'skipped');
CREATE TABLE IF NOT EXISTS lastcall.cluster_watermarks (
    cluster      TEXT   NOT NULL,
    job          TEXT   NOT NULL,
    scheduled_at BIGINT NOT NULL,
    run_id       BIGINT NOT NULL,
    PRIMARY KEY (cluster, job)
);
INSERT INTO lastcall.cluster_watermarks (cluster, job, scheduled_at, run_id)
    SELECT '', job, scheduled_at, run_id FROM lastcall.watermarks ON CONFLICT DO NOTHING;
CREATE OR REPLACE TRIGGER cluster_watermarks_never_move_back
    BEFORE UPDATE ON lastcall.cluster_watermarks
    FOR EACH ROW EXECUTE FUNCTION lastcall.watermark_never_moves_back();
CREATE TABLE IF NOT EXISTS lastcall.replicas (
    owner   TEXT   PRIMARY KEY,
    replica TEXT   NOT NULL,
    seen_ms BIGINT NOT NULL,
    cluster TEXT   NOT NULL DEFAULT '',
    jobs    TEXT   NOT NULL DEFAULT ''
);
-- A terminal run is final in every column: what it records is the record. Its recovery moves
-- forward only (none yet -> held, none, retried or released; held -> released; released ->
-- retried). A run is deleted only by `lastcall runs prune` (which sets lastcall.prune in its
-- transaction), and only once terminal.
CREATE OR REPLACE FUNCTION lastcall.terminal_runs_are_final() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF coalesce(current_setting('lastcall.prune', true), '') <> 'on'
           OR OLD.state NOT IN ('completed', 'failed', 'interrupted', 'skipped') THEN
            RAISE EXCEPTION 'run % is kept: runs are removed only by `lastcall runs prune`, '
                'once final', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.state NOT IN ('completed', 'failed', 'interrupted', 'skipped') THEN
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.cluster, NEW.job, NEW.scheduled_at, NEW.state, NEW.pid, NEW.created_ms,
        NEW.started_ms, NEW.ended_ms, NEW.exit_code, NEW.signal, NEW.reason, NEW.retry_of,
        NEW.replica, NEW.owner, NEW.lease_until_ms)
       IS DISTINCT FROM
       (OLD.id, OLD.cluster, OLD.job, OLD.scheduled_at, OLD.state, OLD.pid, OLD.created_ms,
        OLD.started_ms, OLD.ended_ms, OLD.exit_code, OLD.signal, OLD.reason, OLD.retry_of,
        OLD.replica, OLD.owner, OLD.lease_until_ms) THEN
        RAISE EXCEPTION 'run % is final (%): its record is not rewritten', OLD.id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.recovery IS DISTINCT FROM OLD.recovery AND NOT (
        (OLD.recovery IS NULL AND NEW.recovery IN ('held', 'none', 'retried', 'released'))
        OR (OLD.recovery = 'held' AND NEW.recovery = 'released')
        OR (OLD.recovery = 'released' AND NEW.recovery = 'retried')) THEN
        RAISE EXCEPTION 'run %: recovery % cannot become %', OLD.id, OLD.recovery, NEW.recovery
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $fn$;
CREATE OR REPLACE TRIGGER runs_terminal_are_final BEFORE UPDATE OR DELETE ON lastcall.runs
    FOR EACH ROW EXECUTE FUNCTION lastcall.terminal_runs_are_final();
-- Fencing: true while run_id is `started` and owned by owner ($LASTCALL_RUN_OWNER). Called in
-- the job's own transaction it also locks the row (FOR SHARE) until that transaction ends, so
-- no replica can record the run interrupted between the check and the job's commit.
CREATE OR REPLACE FUNCTION lastcall.run_is_current(run_id bigint, run_owner text)
RETURNS boolean LANGUAGE sql VOLATILE AS $fn$
    SELECT EXISTS (SELECT 1 FROM lastcall.runs r WHERE r.id = run_id AND r.owner = run_owner
                   AND r.state = 'started' FOR SHARE)
$fn$;
-- The metrics' runs per replica, job and state, kept by the database as runs are written: the
-- metrics read a row per job and state, never the history (a scan took 0.2-0.5 s at 1M runs).
CREATE TABLE IF NOT EXISTS lastcall.run_counts (
    replica           TEXT   NOT NULL,
    job               TEXT   NOT NULL,
    state             TEXT   NOT NULL,
    runs              BIGINT NOT NULL,
    last_completed_ms BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (replica, job, state)
);
CREATE OR REPLACE FUNCTION lastcall.count_runs_by_state() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE lastcall.run_counts SET runs = runs - 1
            WHERE replica = OLD.replica AND job = OLD.job AND state = OLD.state;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO lastcall.run_counts AS c (replica, job, state, runs, last_completed_ms)
            VALUES (NEW.replica, NEW.job, NEW.state, 1,
                    CASE WHEN NEW.state = 'completed' THEN coalesce(NEW.ended_ms, 0) ELSE 0 END)
            ON CONFLICT (replica, job, state) DO UPDATE SET runs = c.runs + 1,
                last_completed_ms = greatest(c.last_completed_ms, excluded.last_completed_ms);
    END IF;
    RETURN NULL;
END $fn$;
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM lastcall.schema_version WHERE version >= 2) THEN
        INSERT INTO lastcall.run_counts (replica, job, state, runs, last_completed_ms)
            SELECT replica, job, state, count(*),
                   coalesce(max(CASE WHEN state = 'completed' THEN ended_ms END), 0)
            FROM lastcall.runs GROUP BY replica, job, state
            ON CONFLICT DO NOTHING;
    END IF;
END $do$;
CREATE OR REPLACE TRIGGER runs_counted AFTER INSERT OR DELETE ON lastcall.runs
    FOR EACH ROW EXECUTE FUNCTION lastcall.count_runs_by_state();
CREATE OR REPLACE TRIGGER runs_counted_moves AFTER UPDATE ON lastcall.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.replica IS DISTINCT FROM
                       NEW.replica OR OLD.job IS DISTINCT FROM NEW.job)
    EXECUTE FUNCTION lastcall.count_runs_by_state();
INSERT INTO lastcall.schema_version (version, applied_ms)
    VALUES (2, (extract(epoch from clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (version) DO NOTHING;
)sql";

constexpr const char* kColumns =
    "id, job, scheduled_at, state, pid, created_ms, started_ms, ended_ms, exit_code, signal, "
    "reason, retry_of, coalesce(recovery, ''), replica, lease_until_ms, cluster";

// A claim is one statement (issue 38): the function takes each job's advisory lock, checks and
// inserts, and the statement's own transaction releases the locks when it ends, on the server,
// whatever the client does meanwhile. A replica frozen (SIGSTOP, a partition) in the middle of a
// claim therefore holds no lock the other replicas wait for, and a burst of claims is one round
// trip. Inside a VOLATILE plpgsql function every statement takes a new snapshot (READ
// COMMITTED), so the check after the lock sees what the lock's previous holder committed. The
// versioned names let replicas of different versions share a database.
// claim_one_v2 raises LC001 to say "lost, undo what this claim marked" (a retry whose runs
// another replica retried first, or that must wait for a free slot); claim_runs_v2 catches it in
// a subtransaction, for retries only (a subtransaction per claim of a burst would cost more than
// the claim).
constexpr const char* kClaimFunctionSignature =
    "lastcall.claim_runs_v2(text,text[],bigint[],text[],text[],text[],boolean[],text,text,"
    "bigint,bigint)";
constexpr const char* kClaimFunctions = R"sql(
SELECT pg_advisory_xact_lock(7294017321);
CREATE OR REPLACE FUNCTION lastcall.claim_one_v2(
    p_cluster text, p_job text, p_at bigint, p_retry bigint[], p_concurrency text, p_skip text,
    p_check_hold boolean, p_replica text, p_owner text, p_lease bigint, p_now bigint,
    OUT o_outcome text, OUT o_run_id bigint, OUT o_reason text, OUT o_replaced bigint[],
    OUT o_watermark bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_db_now bigint := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    v_active bigint[];
    v_held bigint;
    v_n int;
BEGIN
    o_outcome := 'lost'; o_reason := ''; o_replaced := '{}';
    PERFORM pg_advisory_xact_lock(hashtextextended('lastcall.job.' || p_cluster || '.' || p_job, 0));
    IF cardinality(p_retry) = 0 THEN
        IF EXISTS (SELECT 1 FROM lastcall.runs r WHERE r.cluster = p_cluster AND r.job = p_job
                   AND r.scheduled_at = p_at
                   AND r.retry_of IS NULL) THEN
            RETURN;
        END IF;
        IF p_skip = '' AND p_check_hold THEN
            SELECT r.id INTO v_held FROM lastcall.runs r WHERE r.cluster = p_cluster
                AND r.job = p_job AND r.state = 'interrupted' AND r.recovery = 'held' ORDER BY r.id LIMIT 1;
            IF v_held IS NOT NULL THEN
                p_skip := format('held: run %s was interrupted; `lastcall runs release %s` '
                                 'lets the job run again', v_held, v_held);
            END IF;
        END IF;
    ELSE
        UPDATE lastcall.runs r SET recovery = 'retried' WHERE r.id = ANY(p_retry)
            AND r.state = 'interrupted' AND (r.recovery IS NULL OR r.recovery = 'released');
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n <> cardinality(p_retry) THEN
            RAISE EXCEPTION 'retried elsewhere' USING ERRCODE = 'LC001';
        END IF;
    END IF;
    IF p_skip <> '' AND cardinality(p_retry) = 0 THEN
        INSERT INTO lastcall.runs (cluster, job, scheduled_at, state, created_ms, ended_ms,
                                   reason, replica, owner)
            VALUES (p_cluster, p_job, p_at, 'skipped', p_now, p_now, p_skip, p_replica, p_owner)
            RETURNING id INTO o_run_id;
        o_outcome := 'skipped'; o_reason := p_skip;
        RETURN;
    END IF;
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') INTO v_active FROM lastcall.runs r
        WHERE r.cluster = p_cluster AND r.job = p_job AND r.state = 'started'
        AND (r.lease_until_ms IS NULL OR r.lease_until_ms > v_db_now);
    IF cardinality(v_active) > 0 AND p_concurrency = 'forbid' THEN
        IF cardinality(p_retry) > 0 THEN
            RAISE EXCEPTION 'waits for a free slot' USING ERRCODE = 'LC001';
        END IF;
        o_reason := format('run %s is still running (concurrency = forbid)', v_active[1]);
        INSERT INTO lastcall.runs (cluster, job, scheduled_at, state, created_ms, ended_ms,
                                   reason, replica, owner)
            VALUES (p_cluster, p_job, p_at, 'skipped', p_now, p_now, o_reason, p_replica,
                    p_owner)
            RETURNING id INTO o_run_id;
        o_outcome := 'skipped';
        RETURN;
    END IF;
    INSERT INTO lastcall.runs (cluster, job, scheduled_at, state, pid, created_ms, started_ms,
                               retry_of, replica, owner, lease_until_ms)
        VALUES (p_cluster, p_job, p_at, 'started', NULL, p_now, p_now, p_retry[cardinality(p_retry)],
                p_replica, p_owner, CASE WHEN p_lease > 0 THEN v_db_now + p_lease END)
        RETURNING id INTO o_run_id;
    o_outcome := 'started';
    IF p_concurrency = 'replace' AND cardinality(v_active) > 0 THEN
        -- Its successor is running: a replaced run is never retried (recovery none).
        WITH u AS (
            UPDATE lastcall.runs r SET state = 'interrupted', ended_ms = p_now,
                reason = format('replaced by run %s (concurrency = replace)', o_run_id),
                recovery = 'none'
            WHERE r.id = ANY(v_active) AND r.state = 'started' RETURNING r.id)
        SELECT coalesce(array_agg(u.id ORDER BY u.id), '{}') INTO o_replaced FROM u;
    END IF;
    SELECT w.scheduled_at INTO o_watermark FROM lastcall.cluster_watermarks w
        WHERE w.cluster = p_cluster AND w.job = p_job;
END
$fn$;
CREATE OR REPLACE FUNCTION lastcall.claim_runs_v2(
    p_cluster text, p_job text[], p_at bigint[], p_retry text[], p_concurrency text[], p_skip text[],
    p_check_hold boolean[], p_replica text, p_owner text, p_lease bigint, p_now bigint)
RETURNS TABLE (o_k int, o_outcome text, o_run_id bigint, o_reason text, o_replaced bigint[],
               o_watermark bigint)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_retry bigint[];
    v record;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_job, 1), 0) LOOP
        v_retry := CASE WHEN coalesce(p_retry[i], '') = '' THEN '{}'::bigint[]
                        ELSE string_to_array(p_retry[i], ',')::bigint[] END;
        IF cardinality(v_retry) = 0 THEN
            SELECT * INTO v FROM lastcall.claim_one_v2(p_cluster, p_job[i], p_at[i], v_retry,
                p_concurrency[i], p_skip[i], p_check_hold[i], p_replica, p_owner, p_lease, p_now);
        ELSE
            BEGIN
                SELECT * INTO v FROM lastcall.claim_one_v2(p_cluster, p_job[i], p_at[i], v_retry,
                    p_concurrency[i], p_skip[i], p_check_hold[i], p_replica, p_owner, p_lease,
                    p_now);
            EXCEPTION WHEN SQLSTATE 'LC001' THEN
                SELECT 'lost'::text AS o_outcome, NULL::bigint AS o_run_id, ''::text AS o_reason,
                       '{}'::bigint[] AS o_replaced, NULL::bigint AS o_watermark INTO v;
            END;
        END IF;
        o_k := i; o_outcome := v.o_outcome; o_run_id := v.o_run_id; o_reason := v.o_reason;
        o_replaced := v.o_replaced; o_watermark := v.o_watermark;
        RETURN NEXT;
    END LOOP;
END
$fn$;
)sql";

// {"a","b"}: a text[] parameter (each element quoted, its quotes and backslashes escaped).
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

// "{1,2}" (a bigint[] as text) back to ids.
std::vector<std::int64_t> parse_int_array(const std::string& text) {
    std::vector<std::int64_t> out;
    const char* c = text.c_str();
    while (*c) {
        if (*c == '-' || (*c >= '0' && *c <= '9')) {
            char* end = nullptr;
            out.push_back(std::strtoll(c, &end, 10));
            c = end;
        } else {
            ++c;
        }
    }
    return out;
}

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
    PGresult* raw() const { return r_; }

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
    out.cluster = r.text(row, 15);
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

// The schema as this version needs it: created on a new database, moved forward from an older
// version, refused when newer. Several replicas may start together: each step takes the
// schema's advisory lock and is written to be run twice.
Status PostgresLedger::migrate() {
    auto found = run("look for the schema",
                     "SELECT to_regclass('lastcall.starts') IS NOT NULL, "
                     "to_regclass('lastcall.schema_version') IS NOT NULL");
    if (!found) return found.error();
    int version = 0;
    if (found->text(0, 1) == "t") {
        auto v = run("read the schema version",
                     "SELECT coalesce(max(version), 1) FROM lastcall.schema_version");
        if (!v) return v.error();
        version = static_cast<int>(v->num(0, 0));
    } else if (found->text(0, 0) == "t") {
        version = 1;
    }
    if (version > kSchemaVersion)
        return error("schema", "schema version " + std::to_string(version) +
                                   " is newer than this lastcall's (" +
                                   std::to_string(kSchemaVersion) +
                                   "): a newer lastcall wrote it; run that version (or newer) "
                                   "on every replica");
    // Once created, the schema is only used: a database user without CREATE (or not the owner of
    // the tables) can run lastcall once an administrator created or migrated them.
    if (version < 1)
        if (auto r = run("create schema", kSchema); !r) return r.error();
    if (version < 2)
        if (auto r = run("migrate the schema to version 2", kMigrationTo2); !r) return r.error();
    auto claims =
        run("look for the claim function",
            std::string("SELECT to_regprocedure('") + kClaimFunctionSignature + "') IS NOT NULL");
    if (!claims) return claims.error();
    if (claims->text(0, 0) != "t")
        if (auto r = run("create the claim functions", kClaimFunctions); !r) return r.error();
    return Ok{};
}

// What a claim writes, written and rolled back: the insert of a `started` row and its update.
Status PostgresLedger::probe_claim() {
    auto done = transaction("check the rights a claim needs", [&]() -> Result<bool> {
        auto ins =
            run("check the rights a claim needs",
                "INSERT INTO lastcall.runs (job, scheduled_at, state, created_ms, "
                "started_ms, replica, owner) VALUES ('lastcall start-up check', -1, "
                "'started', 0, 0, $1, $2) RETURNING id",
                {p(std::string_view(identity_.replica)), p(std::string_view(identity_.owner))});
        if (!ins) return ins.error();
        auto upd = run("check the rights a claim needs",
                       "UPDATE lastcall.runs SET pid = 0, lease_until_ms = 0 WHERE id = $1",
                       {p(ins->num(0, 0))});
        if (!upd) return upd.error();
        return false;  // rolled back: nothing of it stays
    });
    if (!done) return done.error();
    return Ok{};
}

// Two deployments on one database must not split one job's fire times between them: a live
// replica (a heartbeat within three leases) under the same cluster key whose job of the same
// name runs another command means the key is shared by two different things. Refused at start,
// with what differs.
Status PostgresLedger::check_peers() {
    if (identity_.jobs.empty()) return Ok{};
    auto r = run("look for the cluster's other replicas",
                 "SELECT replica, jobs FROM lastcall.replicas WHERE cluster = $1 AND owner <> $2 "
                 "AND seen_ms > " +
                     std::string(kDbNowMs) + " - $3 ORDER BY seen_ms DESC",
                 {p(std::string_view(identity_.cluster)), p(std::string_view(identity_.owner)),
                  p(std::max<std::int64_t>(3 * identity_.lease_ms, 3000))});
    if (!r) return r.error();
    // "name\tcommand" lines, one per job.
    auto commands = [](const std::string& text) {
        std::map<std::string, std::string> out;
        std::size_t pos = 0;
        while (pos < text.size()) {
            std::size_t end = text.find('\n', pos);
            if (end == std::string::npos) end = text.size();
            std::string line = text.substr(pos, end - pos);
            if (auto tab = line.find('\t'); tab != std::string::npos)
                out[line.substr(0, tab)] = line.substr(tab + 1);
            pos = end + 1;
        }
        return out;
    };
    auto mine = commands(identity_.jobs);
    for (int i = 0; i < r->rows(); ++i) {
        for (const auto& [job, command] : commands(r->text(i, 1))) {
            auto it = mine.find(job);
            if (it == mine.end() || it->second == command) continue;
            return error("cluster " + identity_.cluster,
                         "job " + job + " runs `" + command + "` on live replica " + r->text(i, 0) +
                             ", and `" + it->second +
                             "` here: two deployments share the cluster key (give each its own "
                             "`cluster = \"...\"`), or a rollout changed the command (stop the old "
                             "replicas first)");
        }
    }
    return Ok{};
}

// This replica reached the ledger now (its tick): expire_leases tells by these whether the ledger
// itself was unreachable when a lease lapsed.
Status PostgresLedger::heartbeat() {
    auto r = run("heartbeat",
                 "INSERT INTO lastcall.replicas (owner, replica, seen_ms, cluster, jobs) VALUES "
                 "($1, $2, " +
                     std::string(kDbNowMs) +
                     ", $3, $4) ON CONFLICT (owner) DO UPDATE SET seen_ms = excluded.seen_ms",
                 {p(std::string_view(identity_.owner)), p(std::string_view(identity_.replica)),
                  p(std::string_view(identity_.cluster)), p(std::string_view(identity_.jobs))});
    if (!r) return r.error();
    return Ok{};
}

Result<bool> PostgresLedger::is_current(std::int64_t id, std::string_view owner) {
    auto r = run("check run " + std::to_string(id), "SELECT lastcall.run_is_current($1, $2)",
                 {p(id), p(owner)});
    if (!r) return r.error();
    return r->text(0, 0) == "t";
}

// Terminal runs that ended before `before_ms`, at most `batch` of them, oldest first: one
// statement, so one short transaction per batch however large the history.
Result<std::int64_t> PostgresLedger::prune(std::int64_t before_ms, std::size_t batch) {
    std::int64_t removed = 0;
    auto done = transaction("prune runs", [&]() -> Result<bool> {
        // The trigger lets this transaction, and only it, delete final runs.
        if (auto r = run("prune runs", "SET LOCAL lastcall.prune = 'on'"); !r) return r.error();
        auto r = run("prune runs",
                     "DELETE FROM lastcall.runs WHERE id IN (SELECT id FROM lastcall.runs WHERE "
                     "state IN ('completed', 'failed', 'interrupted', 'skipped') AND ended_ms < "
                     "$1 ORDER BY ended_ms LIMIT $2)",
                     {p(before_ms), p(static_cast<std::int64_t>(batch))});
        if (!r) return r.error();
        removed = r->affected();
        return true;
    });
    if (!done) return done.error();
    return removed;
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
    backoff_ =
        std::clamp(backoff_ * 2, std::chrono::milliseconds(500), std::chrono::milliseconds(8000));
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
                 "reason, retry_of, replica, owner, cluster) VALUES ($1, $2, $3, $4, $5, $6, $7, "
                 "$8, $9, $10) RETURNING id",
                 {p(job), p(scheduled_at), p(to_string(state)), p(now),
                  p(is_terminal(state) ? std::optional<std::int64_t>(now) : std::nullopt),
                  p(reason), p(retry_of), p(std::string_view(identity_.replica)),
                  p(std::string_view(identity_.owner)), p(std::string_view(identity_.cluster))});
    if (!r) return r.error();
    return r->num(0, 0);
}

Result<Claim> PostgresLedger::claim(const ClaimRequest& request) {
    return std::move(claim_all({request}).front());
}

std::vector<Result<Claim>> PostgresLedger::claim_all(const std::vector<ClaimRequest>& requests) {
    std::vector<Result<Claim>> out(requests.size(), Result<Claim>(Claim{}));
    if (requests.empty()) return out;
    // Every replica takes the jobs' locks in the same order (by name): two bursts that share
    // jobs queue behind each other instead of deadlocking.
    std::vector<std::size_t> order(requests.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return requests[a].job < requests[b].job;
    });
    std::vector<std::string> jobs, retries, concurrency, skips;
    std::vector<std::int64_t> at;
    std::string holds = "{";
    for (std::size_t i : order) {
        const auto& r = requests[i];
        jobs.push_back(r.job);
        at.push_back(r.scheduled_at);
        std::string retry;
        for (auto id : r.retry_of) retry += (retry.empty() ? "" : ",") + std::to_string(id);
        retries.push_back(retry);
        concurrency.push_back(r.concurrency == Concurrency::Forbid    ? "forbid"
                              : r.concurrency == Concurrency::Replace ? "replace"
                                                                      : "allow");
        skips.push_back(r.skip_reason);
        holds += std::string(holds.size() > 1 ? "," : "") + (r.check_hold ? "t" : "f");
    }
    holds += "}";
    std::string what = requests.size() == 1
                           ? "claim run of job " + requests.front().job
                           : "claim " + std::to_string(requests.size()) + " fire times";
    auto r =
        run(what,
            std::string("SELECT o_k, o_outcome, o_run_id, o_reason, o_replaced, o_watermark "
                        "FROM ") +
                "lastcall.claim_runs_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ORDER BY "
                "o_k",
            {p(std::string_view(identity_.cluster)), p(std::string_view(text_array(jobs))),
             p(std::string_view(int_array(at))), p(std::string_view(text_array(retries))),
             p(std::string_view(text_array(concurrency))), p(std::string_view(text_array(skips))),
             p(std::string_view(holds)), p(std::string_view(identity_.replica)),
             p(std::string_view(identity_.owner)), p(identity_.lease_ms), p(unix_ms_now())});
    if (!r) {
        for (auto& o : out) o = r.error();
        return out;
    }
    for (int row = 0; row < r->rows(); ++row) {
        auto k = static_cast<std::size_t>(r->num(row, 0));
        if (k < 1 || k > order.size()) continue;
        Claim c;
        std::string outcome = r->text(row, 1);
        c.outcome = outcome == "started"   ? Claim::Outcome::Started
                    : outcome == "skipped" ? Claim::Outcome::Skipped
                                           : Claim::Outcome::Lost;
        c.id = r->opt(row, 2).value_or(0);
        c.reason = r->text(row, 3);
        c.replaced = parse_int_array(r->text(row, 4));
        c.watermark = r->opt(row, 5);
        out[order[k - 1]] = std::move(c);
    }
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
                 "UPDATE lastcall.runs SET pid = $1 WHERE id = $2 AND state = 'started'",
                 {p(pid), p(id)});
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
    // One statement, so one transaction and one round trip: the record and the watermark become
    // durable together, the watermark only ever moves on a run that really became completed, and
    // no row lock is held while the client is away.
    auto r = run("complete run " + std::to_string(id),
                 "WITH done AS (UPDATE lastcall.runs SET state = 'completed', ended_ms = $2, "
                 "exit_code = $3, signal = $4, reason = '' WHERE id = $1 AND state IN " +
                     sql_sources_of(RunState::Completed) +
                     " RETURNING cluster, job, scheduled_at, id), "
                     "moved AS (INSERT INTO lastcall.cluster_watermarks (cluster, job, "
                     "scheduled_at, run_id) SELECT cluster, job, scheduled_at, id FROM done "
                     "ON CONFLICT (cluster, job) DO UPDATE SET scheduled_at = "
                     "excluded.scheduled_at, run_id = excluded.run_id "
                     "WHERE excluded.scheduled_at >= lastcall.cluster_watermarks.scheduled_at) "
                     "SELECT count(*) FROM done",
                 {p(id), p(unix_ms_now()), p(outcome.exit_code), p(outcome.signal)});
    if (!r) return r.error();
    return r->num(0, 0) == 1;
}

// The endings of a burst as one statement: one round trip however many (a thousand runs' records
// 50 ms away were a minute of round trips), the watermarks moved in the same transaction, each
// run only along the model's own moves (run_transition: from started to any final state, from
// scheduled to skipped, failed or interrupted).
Result<std::vector<bool>> PostgresLedger::finish_all(const std::vector<Ending>& endings) {
    if (endings.size() <= 1) return Ledger::finish_all(endings);
    std::vector<std::int64_t> ids;
    std::vector<std::string> states, reasons, exits, signals;
    std::string pid_array = "{";
    for (const auto& e : endings)
        pid_array += (pid_array.size() > 1 ? "," : "") +
                     (e.pid ? std::to_string(*e.pid) : std::string("NULL"));
    pid_array += "}";
    auto opt = [](std::optional<int> v) { return v ? std::to_string(*v) : std::string("NULL"); };
    std::string exit_array = "{", signal_array = "{";
    for (const auto& e : endings) {
        ids.push_back(e.id);
        states.push_back(std::string(to_string(e.to)));
        reasons.push_back(e.to == RunState::Completed ? "" : e.reason);
        exit_array += (exit_array.size() > 1 ? "," : "") + opt(e.outcome.exit_code);
        signal_array += (signal_array.size() > 1 ? "," : "") + opt(e.outcome.signal);
    }
    exit_array += "}";
    signal_array += "}";
    auto r = run(
        "record " + std::to_string(endings.size()) + " run endings",
        "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[], "
        "$5::text[], $7::bigint[]) AS v(id, state, exit_code, signal, reason, pid)), "
        "done AS (UPDATE lastcall.runs r SET state = v.state, ended_ms = $6, exit_code = "
        "v.exit_code, signal = v.signal, reason = v.reason, pid = coalesce(r.pid, v.pid) FROM v "
        "WHERE r.id = v.id AND "
        "((r.state = 'started' AND v.state IN ('completed', 'failed', 'interrupted')) OR "
        "(r.state = 'scheduled' AND v.state IN ('skipped', 'failed', 'interrupted'))) "
        "RETURNING r.id, r.cluster, r.job, r.scheduled_at, r.state), "
        "moved AS (INSERT INTO lastcall.cluster_watermarks (cluster, job, scheduled_at, run_id) "
        "SELECT DISTINCT ON (cluster, job) cluster, job, scheduled_at, id FROM done WHERE state "
        "= 'completed' ORDER BY cluster, job, scheduled_at DESC "
        "ON CONFLICT (cluster, job) DO UPDATE SET scheduled_at = excluded.scheduled_at, run_id "
        "= excluded.run_id WHERE excluded.scheduled_at >= "
        "lastcall.cluster_watermarks.scheduled_at) "
        "SELECT id FROM done",
        {p(std::string_view(int_array(ids))), p(std::string_view(text_array(states))),
         p(std::string_view(exit_array)), p(std::string_view(signal_array)),
         p(std::string_view(text_array(reasons))), p(unix_ms_now()),
         p(std::string_view(pid_array))});
    if (!r) return r.error();
    std::set<std::int64_t> moved;
    for (int i = 0; i < r->rows(); ++i) moved.insert(r->num(i, 0));
    std::vector<bool> out;
    // A run given twice in one batch moves once: the first is its answer, the rest refused.
    std::set<std::int64_t> answered;
    for (const auto& e : endings) out.push_back(moved.count(e.id) && answered.insert(e.id).second);
    return out;
}

// The pids of a burst's runs in one statement (a run already final keeps what it has).
Status PostgresLedger::set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) {
    if (pids.size() <= 1) return Ledger::set_pids(pids);
    std::vector<std::int64_t> ids, values;
    for (const auto& [id, pid] : pids) ids.push_back(id), values.push_back(pid);
    auto r = run("record " + std::to_string(pids.size()) + " pids",
                 "UPDATE lastcall.runs r SET pid = v.pid FROM unnest($1::bigint[], $2::bigint[]) "
                 "AS v(id, pid) WHERE r.id = v.id AND r.state = 'started'",
                 {p(std::string_view(int_array(ids))), p(std::string_view(int_array(values)))});
    if (!r) return r.error();
    return Ok{};
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
    // row's lease after waiting for it). The owner last renewed the lease at about
    // lease_until_ms - lease; a replica that reached the ledger half a lease after that (the
    // newest heartbeat, ticks a second apart) shows the ledger was there while the owner did not
    // renew: the run expires. If no replica at all reached the ledger since (the database was
    // down or cut off from everyone, its owner included), the lapse says nothing about the owner,
    // and the run gets a fresh period (this caller's lease) instead: its owner writes what it
    // owes on its first tick after the outage (records first), or stops renewing and the run
    // expires a lease later. The caller's own heartbeat comes after this statement.
    auto r = run("expire leases",
                 "WITH seen AS (SELECT coalesce(max(seen_ms), 0) AS at FROM lastcall.replicas), "
                 "lapsed AS (SELECT r.id, r.lease_until_ms - $2 / 2 < seen.at AS expired FROM "
                 "lastcall.runs r, seen WHERE r.state IN ('scheduled', 'started') AND "
                 "r.lease_until_ms IS NOT NULL AND r.lease_until_ms < " +
                     std::string(kDbNowMs) +
                     "), fresh AS (UPDATE lastcall.runs SET lease_until_ms = " + kDbNowMs +
                     " + $2 WHERE id IN (SELECT id FROM lapsed WHERE NOT expired) AND $2 > 0) "
                     "UPDATE lastcall.runs SET state = 'interrupted', ended_ms = $1, reason = "
                     "'lease expired: replica ' || replica || ' stopped renewing it' WHERE id IN "
                     "(SELECT id FROM lapsed WHERE expired) RETURNING " +
                     kColumns,
                 {p(unix_ms_now()), p(identity_.lease_ms)});
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::optional<std::int64_t>> PostgresLedger::watermark(std::string_view job) {
    auto r = run("read watermark of " + std::string(job),
                 "SELECT scheduled_at FROM lastcall.cluster_watermarks WHERE cluster = $1 AND "
                 "job = $2",
                 {p(std::string_view(identity_.cluster)), p(job)});
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
    // NULL parameters match everything: one statement for every filter. A limit keeps the
    // newest runs (by id), still printed oldest first.
    auto r = run("select runs",
                 std::string("SELECT * FROM (SELECT ") + kColumns +
                     " FROM lastcall.runs WHERE ($1::text IS NULL OR job = $1) AND ($2::text IS "
                     "NULL OR state = $2) AND ($3::bigint IS NULL OR created_ms >= $3) AND "
                     "($5::text IS NULL OR cluster = $5) ORDER BY id DESC LIMIT $4) newest ORDER "
                     "BY 1",
                 {filter.job.empty() ? std::nullopt : p(std::string_view(filter.job)),
                  filter.state ? p(to_string(*filter.state)) : std::nullopt, p(filter.since_ms),
                  filter.limit ? p(static_cast<std::int64_t>(*filter.limit)) : std::nullopt,
                  filter.cluster.empty() ? std::nullopt : p(std::string_view(filter.cluster))});
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::vector<Ledger::JobCount>> PostgresLedger::count_runs() {
    // This replica's runs only: each replica exports its own metrics, and Prometheus' sum over
    // the replicas is then the deployment's count (the whole ledger would count each run N
    // times). From the counts the database keeps (lastcall.run_counts), a row per job and state.
    auto r = run("count runs",
                 "SELECT job, state, runs, last_completed_ms FROM lastcall.run_counts WHERE "
                 "replica = $1 AND (runs > 0 OR last_completed_ms > 0) ORDER BY job, state",
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
                 "WHERE state IN ('scheduled', 'started') AND lease_until_ms IS NULL AND cluster "
                 "= $3 RETURNING " +
                     std::string(kColumns),
                 {p(unix_ms_now()), p(reason), p(std::string_view(identity_.cluster))});
    if (!r) return r.error();
    std::vector<RunRecord> out;
    for (int i = 0; i < r->rows(); ++i) out.push_back(read_row(*r, i));
    return out;
}

Result<std::vector<RunRecord>> PostgresLedger::awaiting_recovery() {
    return select(
        "cluster = $1 AND state = 'interrupted' AND (recovery IS NULL OR recovery = 'released')",
        {p(std::string_view(identity_.cluster))});
}

Result<std::optional<RunRecord>> PostgresLedger::held_run(std::string_view job) {
    auto rows = select("cluster = $2 AND job = $1 AND state = 'interrupted' AND recovery = 'held'",
                       {p(job), p(std::string_view(identity_.cluster))});
    if (!rows) return rows.error();
    if (rows->empty()) return std::optional<RunRecord>();
    return std::optional<RunRecord>(std::move(rows->front()));
}

Status PostgresLedger::set_recovery(std::int64_t id, std::string_view recovery) {
    auto r = run("set recovery of run " + std::to_string(id),
                 "UPDATE lastcall.runs SET recovery = $1 WHERE id = $2 AND recovery IS NULL",
                 {p(recovery), p(id)});
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
