// SPDX-License-Identifier: Apache-2.0
// One replica of the ledger benchmark (bench/ledger.py, issue 20): claims every (fire time, job)
// of a fixed grid through the real Ledger, completes each claim it wins at once, and prints one
// JSON line with the counts and each claim() call's latency.
//
//   ledger_bench --ledger URL | --state-dir DIR --replica NAME --jobs 1000 --fires N
//                --start-at UNIXSECONDS [--lease-ms 30000] [--wait]
//
// Fire times are start_at, start_at + 60, ... (N of them); jobs are "job-0000".."job-NNNN". Every
// replica walks the same (time, job) order, so replicas started together contend for the same
// keys at the same moment. --wait: after the ledger is open, print "ready" and wait for a line on
// stdin before the first claim (the driver releases all replicas at once).
//
// A SQLite state dir admits one owner (flock on ledger.lock): the replica that gets the lock opens
// it exclusive, the others as the test suite's `Sqlite::another` does (exclusive = false), once
// the owner has created the file. PostgreSQL replicas all open it exclusive, as lastcall does.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lastcall/core/json.hpp"
#include "lastcall/jobs/ledger.hpp"

using namespace lastcall;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "ledger_bench: " << why
              << "\nusage: ledger_bench --ledger URL|--state-dir DIR --replica NAME --jobs N "
                 "--fires N --start-at UNIXSECONDS [--lease-ms MS] [--wait]\n";
    std::exit(2);
}

// Nearest-rank percentile of sorted values (p in 0..100), as bench/run.py's pct().
double pct(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0;
    auto k = static_cast<long>(p / 100.0 * static_cast<double>(sorted.size()) + 0.5) - 1;
    k = std::clamp<long>(k, 0, static_cast<long>(sorted.size()) - 1);
    return sorted[static_cast<std::size_t>(k)];
}

std::string latencies(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    char buf[256];
    std::snprintf(buf, sizeof buf, R"({"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f})", pct(v, 50),
                  pct(v, 90), pct(v, 99), v.empty() ? 0.0 : v.back());
    return buf;
}

double micros(Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

Result<std::unique_ptr<Ledger>> open_ledger(const LedgerLocation& where, const LedgerIdentity& id) {
    if (!where.url.empty()) return Ledger::open(where, true, id);
    auto owner = Ledger::open(where, true, id);
    if (owner || owner.error().message.find("in use by another lastcall") == std::string::npos)
        return owner;
    // Another replica owns the state dir: share its file. It may still be creating it.
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (true) {
        auto shared = Ledger::open(where, false, id);
        if (shared || Clock::now() > deadline) return shared;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace

int main(int argc, char** argv) {
    // The ledger logs through spdlog; stdout carries only this tool's lines.
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "ledger_bench", std::make_shared<spdlog::sinks::stderr_sink_st>()));

    LedgerLocation where;
    std::string replica;
    long jobs = -1, fires = -1;
    std::int64_t start_at = -1, lease_ms = 30'000;
    bool wait = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--ledger")
            where.url = value();
        else if (arg == "--state-dir")
            where.state_dir = value();
        else if (arg == "--replica")
            replica = value();
        else if (arg == "--jobs")
            jobs = std::stol(value());
        else if (arg == "--fires")
            fires = std::stol(value());
        else if (arg == "--start-at")
            start_at = std::stoll(value());
        else if (arg == "--lease-ms")
            lease_ms = std::stoll(value());
        else if (arg == "--wait")
            wait = true;
        else
            usage("unknown argument " + arg);
    }
    if (where.url.empty() == where.state_dir.empty())
        usage("give exactly one of --ledger and --state-dir");
    if (replica.empty() || jobs < 0 || fires < 0 || start_at < 0)
        usage("--replica, --jobs, --fires and --start-at are required");

    LedgerIdentity id{replica, replica + "/" + std::to_string(::getpid()), lease_ms};
    auto ledger = open_ledger(where, id);
    if (!ledger) {
        std::cerr << "ledger_bench: " << ledger.error().message << '\n';
        return 1;
    }
    if (wait) {
        std::cout << "ready" << std::endl;
        std::string go;
        std::getline(std::cin, go);
    }

    std::vector<std::string> names;
    for (long j = 0; j < jobs; ++j) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "job-%04ld", j);
        names.emplace_back(buf);
    }
    std::vector<double> claim_us, complete_us;
    claim_us.reserve(static_cast<std::size_t>(jobs * fires));
    long won = 0, lost = 0, skipped = 0, errors = 0, complete_errors = 0, refused = 0;
    std::string first_error;

    const auto begin = Clock::now();
    for (long f = 0; f < fires; ++f) {
        const std::int64_t t = start_at + 60 * f;
        for (const std::string& job : names) {
            ClaimRequest req{job, t, {}, Concurrency::Allow, ""};
            auto c0 = Clock::now();
            auto claim = (*ledger)->claim(req);
            claim_us.push_back(micros(Clock::now() - c0));
            if (!claim) {
                ++errors;
                if (first_error.empty()) first_error = claim.error().message;
                continue;
            }
            if (claim->outcome == Claim::Outcome::Lost) {
                ++lost;
                continue;
            }
            if (claim->outcome == Claim::Outcome::Skipped) {
                ++skipped;
                continue;
            }
            ++won;
            auto d0 = Clock::now();
            auto done = (*ledger)->complete(claim->id, RunOutcome{0, {}});
            complete_us.push_back(micros(Clock::now() - d0));
            if (!done) {
                ++complete_errors;
                if (first_error.empty()) first_error = done.error().message;
            } else if (!*done) {
                ++refused;
            }
        }
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();

    std::string name;
    json_quote(name, replica);
    std::string err;
    json_quote(err, first_error);
    std::printf(
        "{\"replica\":%s,\"backend\":\"%s\",\"claims\":%zu,\"won\":%ld,\"lost\":%ld,"
        "\"skipped\":%ld,\"errors\":%ld,\"complete_errors\":%ld,\"complete_refused\":%ld,"
        "\"elapsed_s\":%.3f,\"lat_us\":%s,\"complete_lat_us\":%s,\"first_error\":%s}\n",
        name.c_str(), std::string((*ledger)->backend()).c_str(), claim_us.size(), won, lost,
        skipped, errors, complete_errors, refused, elapsed, latencies(claim_us).c_str(),
        latencies(complete_us).c_str(), err.c_str());
    std::fflush(stdout);
    return 0;
}
