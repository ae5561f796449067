// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL ledger's schema: its tables, migrations and claim functions, and the checks
// of a replica's start.
#include <algorithm>
#include <map>
#include <string>

#include "lastcall/jobs/ledger.hpp"
#include "ledger_postgresql_internal.hpp"

namespace lastcall::pg {

namespace {

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

}  // namespace

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

}  // namespace lastcall::pg
