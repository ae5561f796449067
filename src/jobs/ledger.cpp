// SPDX-License-Identifier: Apache-2.0
// What both ledgers share: the run model and the choice of implementation.
#include "lastcall/jobs/ledger.hpp"

namespace lastcall {

bool is_postgresql_url(std::string_view text) {
    return text.rfind("postgresql://", 0) == 0 || text.rfind("postgres://", 0) == 0;
}

Result<std::unique_ptr<Ledger>> Ledger::open(const LedgerLocation& where, bool exclusive,
                                             LedgerIdentity identity) {
    if (where.url.empty()) return open_sqlite_ledger(where.state_dir, exclusive, identity);
    if (!is_postgresql_url(where.url))
        return Error{
            "ledger: not a postgresql:// URL (the SQLite ledger is chosen with "
            "--state-dir)"};
    return open_postgresql_ledger(where.url, exclusive, std::move(identity));
}

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string_view to_string(RunState s) {
    switch (s) {
        case RunState::Scheduled:
            return "scheduled";
        case RunState::Started:
            return "started";
        case RunState::Completed:
            return "completed";
        case RunState::Failed:
            return "failed";
        case RunState::Interrupted:
            return "interrupted";
        case RunState::Skipped:
            return "skipped";
    }
    return "?";
}

std::optional<RunState> parse_run_state(std::string_view s) {
    for (RunState st : kAllRunStates)
        if (to_string(st) == s) return st;
    return std::nullopt;
}

bool is_terminal(RunState s) {
    return s != RunState::Scheduled && s != RunState::Started;
}

bool run_transition(RunState from, RunState to) {
    switch (from) {
        case RunState::Scheduled:
            // Skipped: refused before it started (shutting down, held). Failed: the spawn
            // failed. Interrupted: the owner died or stopped while it was queued.
            return to == RunState::Started || to == RunState::Skipped || to == RunState::Failed ||
                   to == RunState::Interrupted;
        case RunState::Started:
            return to == RunState::Completed || to == RunState::Failed ||
                   to == RunState::Interrupted;
        case RunState::Completed:
        case RunState::Failed:
        case RunState::Interrupted:
        case RunState::Skipped:
            return false;
    }
    return false;
}

std::string sql_sources_of(RunState to) {
    std::string out;
    for (RunState from : kAllRunStates) {
        if (!run_transition(from, to)) continue;
        out += out.empty() ? "(" : ", ";
        out += "'" + std::string(to_string(from)) + "'";
    }
    return out.empty() ? "(NULL)" : out + ")";
}

std::string held_reason(std::int64_t held) {
    return "held: run " + std::to_string(held) + " was interrupted; `lastcall runs release " +
           std::to_string(held) + "` lets the job run again";
}

Status Ledger::set_pids(const std::vector<std::pair<std::int64_t, std::int64_t>>& pids) {
    for (const auto& [id, pid] : pids)
        if (auto st = set_pid(id, pid); !st) return st;
    return Ok{};
}

Result<std::vector<bool>> Ledger::finish_all(const std::vector<Ending>& endings) {
    std::vector<bool> out;
    for (const auto& e : endings) {
        if (e.pid)
            if (auto st = set_pid(e.id, *e.pid); !st) return st.error();
        auto done = e.to == RunState::Completed ? complete(e.id, e.outcome)
                                                : finish(e.id, e.to, e.outcome, e.reason);
        if (!done) return done.error();
        out.push_back(*done);
    }
    return out;
}

std::vector<Result<Claim>> Ledger::claim_all(const std::vector<ClaimRequest>& requests) {
    std::vector<Result<Claim>> out;
    out.reserve(requests.size());
    for (const auto& r : requests) out.push_back(claim(r));
    return out;
}

std::string forbid_reason(std::int64_t active) {
    return "run " + std::to_string(active) + " is still running (concurrency = forbid)";
}

}  // namespace lastcall
