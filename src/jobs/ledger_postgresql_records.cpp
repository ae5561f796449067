// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL ledger's records: a run's moves and endings, alone or in batches, and the
// queries of the runs.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lastcall/jobs/ledger.hpp"
#include "ledger_postgresql_internal.hpp"

namespace lastcall::pg {

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

}  // namespace lastcall::pg
