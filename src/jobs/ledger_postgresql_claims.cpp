// SPDX-License-Identifier: Apache-2.0
// The PostgreSQL ledger's claims, leases and heartbeats: what decides which replica runs a
// fire time, and for how long it holds it.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "lastcall/jobs/ledger.hpp"
#include "ledger_postgresql_internal.hpp"

namespace lastcall::pg {

namespace {

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

}  // namespace

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

}  // namespace lastcall::pg
