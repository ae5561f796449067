// SPDX-License-Identifier: Apache-2.0
// What both ledgers share: the run model and the choice of implementation.
#include "lastcall/jobs/ledger.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>
#include <vector>

namespace lastcall {

namespace {

// "%70assword" is a keyword libpq reads as "password".
std::string percent_decoded(std::string_view s) {
    auto hex = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() &&
            std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

// The offset and length of each password in a postgresql:// URL, read as libpq reads it
// (conninfo_uri_parse_options): the userinfo ends at the first '@' before any '/', and its
// password follows its first ':'; then every `password` query parameter's value.
std::vector<std::pair<std::size_t, std::size_t>> password_spans(std::string_view url) {
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    std::size_t start = url.find("://");
    if (start == std::string_view::npos) return spans;
    start += 3;
    std::size_t rest = start;
    if (std::size_t at = url.find_first_of("@/", start);
        at != std::string_view::npos && url[at] == '@') {
        if (std::size_t colon = url.find(':', start); colon < at && colon + 1 < at)
            spans.emplace_back(colon + 1, at - colon - 1);
        rest = at + 1;
    }
    for (std::size_t q = url.find('?', rest); q != std::string_view::npos;) {
        std::size_t begin = q + 1;
        std::size_t end = std::min(url.find('&', begin), url.size());
        std::string_view param = url.substr(begin, end - begin);
        std::size_t eq = param.find('=');
        if (eq != std::string_view::npos && eq + 1 < param.size() &&
            percent_decoded(param.substr(0, eq)) == "password")
            spans.emplace_back(begin + eq + 1, param.size() - eq - 1);
        q = end < url.size() ? end : std::string_view::npos;
    }
    return spans;
}

}  // namespace

bool is_postgresql_url(std::string_view text) {
    return text.rfind("postgresql://", 0) == 0 || text.rfind("postgres://", 0) == 0;
}

std::string redact_url_password(std::string_view url) {
    std::string out;
    std::size_t from = 0;
    for (auto [at, len] : password_spans(url)) {
        out.append(url.substr(from, at - from)).append("***");
        from = at + len;
    }
    return out.append(url.substr(from));
}

std::string hide_url_passwords(std::string_view url, std::string text) {
    for (auto [at, len] : password_spans(url)) {
        std::string_view password = url.substr(at, len);
        for (auto pos = text.find(password); pos != std::string::npos;
             pos = text.find(password, pos + 3))
            text.replace(pos, len, "***");
    }
    return text;
}

bool scrub_url_password(char* url) {
    std::string_view text(url);
    auto spans = password_spans(text);
    if (spans.empty()) return false;
    std::string shown = redact_url_password(text);
    if (shown.size() <= text.size()) {
        std::memcpy(url, shown.data(), shown.size());
        std::memset(url + shown.size(), 0, text.size() - shown.size());
    } else {
        for (auto [at, len] : spans) std::memset(url + at, '*', len);
    }
    return true;
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

Result<std::size_t> Ledger::add_skipped_all(const std::vector<Skip>& skips) {
    for (const auto& s : skips)
        if (auto id = add(s.job, s.scheduled_at, RunState::Skipped, s.reason); !id)
            return id.error();
    return skips.size();
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
