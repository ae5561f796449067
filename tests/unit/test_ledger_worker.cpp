// SPDX-License-Identifier: Apache-2.0
// The ledger worker (jobs/ledger_worker.hpp) with its real thread, over a real SQLite ledger
// that the test can stall as a hung server or a stalled disk would: the loop hears every answer
// later, on the loop, and an answer that does not come by the call's deadline is "unknown" at the
// deadline, whatever the thread is doing. The fake host's clock is advanced to the deadline; the
// thread's answers are waited for on its eventfd (FakeHost::pump_watched), never with a sleep.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>

#include "fake_host.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/ledger_worker.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "stallable_ledger.hpp"
#include "temp_dir.hpp"

using namespace lastcall;
using lastcall::test::FakeHost;
using namespace std::chrono_literals;

namespace {

// A worker with its thread over a stallable SQLite ledger, and a second handle on the same file
// to read what landed.
struct Worker {
    Worker() {
        auto real = Ledger::open({dir.path, ""}, true);
        REQUIRE(real);
        auto wrapped = std::make_unique<StallableLedger>(std::move(*real), false);
        ledger = wrapped.get();
        auto w = LedgerWorker::start(std::move(wrapped), host, LedgerWorker::Mode::Thread);
        REQUIRE(w);
        worker = std::move(*w);
        auto r = Ledger::open({dir.path, ""}, false);
        REQUIRE(r);
        reader = std::move(*r);
    }
    // Runs the loop's side until `done` holds: each answer arrives on the worker's eventfd.
    template <typename F>
    void pump_until(F&& done) {
        while (!done()) REQUIRE(host.pump_watched(10000));
    }
    // The thread has begun `n` calls (one of them is stalled now).
    void wait_for_calls(int n) {
        while (ledger->calls() < n) std::this_thread::yield();
    }
    std::size_t rows() { return reader->list({})->size(); }

    lastcall::test::TempDir dir{"worker"};
    FakeHost host;
    StallableLedger* ledger = nullptr;
    std::unique_ptr<LedgerWorker> worker;
    std::unique_ptr<Ledger> reader;
};

// The order in which the calls' answers reach the loop, by the names the test gave them.
struct Order {
    std::function<void(Result<std::int64_t>)> note(const char* what) {
        return [this, what](Result<std::int64_t>) { names.push_back(what); };
    }
    std::vector<std::string> names;
};

std::function<Result<std::int64_t>(Ledger&)> add_skipped(std::int64_t at) {
    return [at](Ledger& l) { return l.add("backup", at, RunState::Skipped, "test"); };
}

}  // namespace

TEST_CASE("a ledger call is answered on the loop after its caller returned, never inside it",
          "[ledger_worker]") {
    Worker w;
    std::optional<Result<std::int64_t>> answer;
    w.worker->call<std::int64_t>("add", 2000ms, add_skipped(60),
                                 [&](Result<std::int64_t> r) { answer.emplace(std::move(r)); });
    CHECK_FALSE(answer);  // not inside call(): the caller's state is never re-entered
    w.pump_until([&] { return answer.has_value(); });
    REQUIRE(*answer);
    CHECK(**answer == 1);
    CHECK(w.rows() == 1);
    CHECK(w.worker->in_flight() == 0);
}

TEST_CASE("calls run one at a time in the order given", "[ledger_worker]") {
    Worker w;
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 5; ++i)
        w.worker->call<std::int64_t>("add", 2000ms, add_skipped(60 * (i + 1)),
                                     [&](Result<std::int64_t> r) { ids.push_back(*r); });
    w.pump_until([&] { return ids.size() == 5; });
    CHECK(ids == std::vector<std::int64_t>{1, 2, 3, 4, 5});
}

TEST_CASE(
    "a call the ledger does not answer by its deadline is answered unknown at the deadline, "
    "while the thread is still stuck in it",
    "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    std::optional<Result<std::int64_t>> answer;
    std::optional<Result<std::int64_t>> late;
    w.worker->call<std::int64_t>(
        "record run 7 completed", 2000ms, add_skipped(60),
        [&](Result<std::int64_t> r) { answer.emplace(std::move(r)); },
        [&](Result<std::int64_t> r) { late.emplace(std::move(r)); });
    w.wait_for_calls(1);
    w.host.advance(1999ms);
    CHECK_FALSE(answer);
    w.host.advance(1ms);
    REQUIRE(answer);
    REQUIRE_FALSE(*answer);
    CHECK_THAT(answer->error().message,
               Catch::StartsWith("record run 7 completed: no answer within 2s (abandoned: its "
                                 "outcome is unknown)"));
    // The thread's real answer comes when the ledger does, to the one who asked for it.
    w.ledger->unstall();
    w.pump_until([&] { return late.has_value(); });
    REQUIRE(*late);
    CHECK(w.rows() == 1);
}

TEST_CASE("a call still queued behind a stuck one when its deadline passes is never begun",
          "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    int answered = 0;
    std::optional<Result<std::int64_t>> second;
    w.worker->call<std::int64_t>("first", 2000ms, add_skipped(60),
                                 [&](Result<std::int64_t>) { ++answered; });
    w.wait_for_calls(1);
    w.worker->call<std::int64_t>("second", 1000ms, add_skipped(120), [&](Result<std::int64_t> r) {
        ++answered;
        second.emplace(std::move(r));
    });
    w.host.advance(1000ms);
    REQUIRE(second);
    REQUIRE_FALSE(*second);
    CHECK_THAT(second->error().message,
               Catch::Contains("not attempted: the ledger was still busy with an earlier call"));
    w.host.advance(1000ms);
    CHECK(answered == 2);
    w.ledger->unstall();
    // A third call goes through once the first returned: the second was skipped, not run.
    std::optional<Result<std::int64_t>> third;
    w.worker->call<std::int64_t>("third", 2000ms, add_skipped(180),
                                 [&](Result<std::int64_t> r) { third.emplace(std::move(r)); });
    w.pump_until([&] { return third.has_value(); });
    REQUIRE(*third);
    auto rows = *w.reader->list({});
    REQUIRE(rows.size() == 2);
    for (const auto& r : rows) CHECK(r.scheduled_at != 120);
    CHECK(w.ledger->calls() == 2);
}

TEST_CASE(
    "settling at the end stops waiting at its bound, and a stuck thread does not hold "
    "lastcall's exit",
    "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    std::optional<Result<std::int64_t>> answer;
    w.worker->call<std::int64_t>("record run 3 interrupted", 60000ms, add_skipped(60),
                                 [&](Result<std::int64_t> r) { answer.emplace(std::move(r)); });
    w.wait_for_calls(1);
    // The fake clock does not move by itself: `until` is already past, as at the grace's end.
    w.worker->settle(w.host.clock().now());
    REQUIRE(answer);
    CHECK_FALSE(*answer);
    // The worker goes while its thread is stuck in the ledger: it is left behind, not joined.
    StallableLedger* ledger = w.ledger;
    w.worker.reset();
    ledger->unstall();  // the detached thread holds the ledger: it returns and ends on its own
}

TEST_CASE("a claim goes ahead of the records queued before it, and records keep their order",
          "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    Order order;
    // The first record is taken by the thread and stalls; the rest queue behind it.
    w.worker->record<std::int64_t>("record 1", 2000ms, add_skipped(60), order.note("record 1"));
    w.wait_for_calls(1);
    w.worker->record<std::int64_t>("record 2", 2000ms, add_skipped(120), order.note("record 2"));
    w.worker->record<std::int64_t>("record 3", 2000ms, add_skipped(180), order.note("record 3"));
    w.worker->call<std::int64_t>("claim", 60000ms, add_skipped(240), order.note("claim"));
    w.ledger->unstall();
    w.pump_until([&] { return order.names.size() == 4; });
    CHECK(order.names == std::vector<std::string>{"record 1", "claim", "record 2", "record 3"});
}

TEST_CASE("a run's final record goes ahead of the other records queued before it, behind the calls",
          "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    Order order;
    // A backlog of skipped fire times; a run's ending made after them must not wait for them
    // all (issue 42: 723 runs' endings were still queued behind such a backlog at the exit).
    w.worker->record<std::int64_t>("skip 1", 2000ms, add_skipped(60), order.note("skip 1"));
    w.wait_for_calls(1);
    w.worker->record<std::int64_t>("skip 2", 2000ms, add_skipped(120), order.note("skip 2"));
    w.worker->final_record<std::int64_t>("ending 1", 2000ms, add_skipped(180),
                                         order.note("ending 1"));
    w.worker->final_record<std::int64_t>("ending 2", 2000ms, add_skipped(240),
                                         order.note("ending 2"));
    w.worker->call<std::int64_t>("claim", 60000ms, add_skipped(300), order.note("claim"));
    w.ledger->unstall();
    w.pump_until([&] { return order.names.size() == 5; });
    CHECK(order.names ==
          std::vector<std::string>{"skip 1", "claim", "ending 1", "ending 2", "skip 2"});
}

TEST_CASE(
    "settling past its bound also answers the calls made by the callers it answered: nothing "
    "is left pending unanswered",
    "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    // Let go at the end whatever failed: a thread left stalled would hold the test binary.
    struct Unstall {
        StallableLedger* ledger;
        ~Unstall() { ledger->unstall(); }
    } unstall{w.ledger};
    std::vector<std::string> heard;
    // As the endings' batches do: the answer to one batch sends the next.
    std::function<void(int)> send = [&](int batch) {
        w.worker->final_record<std::int64_t>("record batch " + std::to_string(batch), 2000ms,
                                             add_skipped(60 * batch),
                                             [&, batch](Result<std::int64_t> r) {
                                                 heard.push_back(r ? "written" : r.error().message);
                                                 if (batch < 3) send(batch + 1);
                                             });
    };
    send(1);
    w.wait_for_calls(1);
    w.worker->settle(w.host.clock().now());
    CHECK(w.worker->in_flight() == 0);
    REQUIRE(heard.size() == 3);
    CHECK_THAT(heard[0], Catch::StartsWith("record batch 1: not written before lastcall's exit "
                                           "(abandoned: its outcome is unknown)"));
    CHECK_THAT(heard[2], Catch::StartsWith("record batch 3: not written before lastcall's exit "
                                           "(not attempted"));
}

TEST_CASE("a record queued longer than its budget is not failed: its budget runs from its start",
          "[ledger_worker]") {
    Worker w;
    w.ledger->stall();
    std::optional<Result<std::int64_t>> first, second;
    w.worker->record<std::int64_t>("record 1", 2000ms, add_skipped(60),
                                   [&](Result<std::int64_t> r) { first.emplace(std::move(r)); });
    w.wait_for_calls(1);
    w.worker->record<std::int64_t>("record 2", 2000ms, add_skipped(120),
                                   [&](Result<std::int64_t> r) { second.emplace(std::move(r)); });
    w.host.advance(5000ms);  // both past their budgets, by the loop's clock
    CHECK_FALSE(first);
    CHECK_FALSE(second);
    w.ledger->unstall();
    w.pump_until([&] { return first && second; });
    CHECK(*first);
    CHECK(*second);
    CHECK(w.rows() == 2);
}

TEST_CASE(
    "a close the ledger does not finish within its budget is left to the thread, and the loop "
    "goes on",
    "[ledger_worker]") {
    Worker w;
    std::optional<Result<std::int64_t>> answer;
    w.worker->call<std::int64_t>("add", 2000ms, add_skipped(60),
                                 [&](Result<std::int64_t> r) { answer.emplace(std::move(r)); });
    w.pump_until([&] { return answer.has_value(); });
    // As SQLite's checkpoint on a stalled disk: the close does not return.
    w.ledger->stall_close();
    CHECK_FALSE(w.worker->close(50ms));
    CHECK(w.rows() == 1);  // what landed stays (the WAL is durable)
    // The thread left behind finishes the close once the ledger lets it, on its own.
    w.ledger->unstall();
}

TEST_CASE("a close that finishes within its budget is waited for", "[ledger_worker]") {
    Worker w;
    CHECK(w.worker->close(10000ms));
}

// ---- the scheduler's claims over the real worker ----

namespace {

// A scheduler with the worker's real thread over a stallable SQLite ledger (`shared`: as a
// PostgreSQL ledger shared by replicas, replica "a" with a 3 s lease), and a second handle on
// the same file to read what landed.
struct ThreadedJobs {
    ThreadedJobs(const std::string& toml, bool shared) {
        auto cfg = parse_jobs_toml(toml, "test.toml");
        REQUIRE(cfg);
        LedgerIdentity me;
        if (shared) me = {"a", "a/1", 3000, "", ""};
        auto real = Ledger::open({dir.path, ""}, true, me);
        REQUIRE(real);
        auto wrapped = std::make_unique<StallableLedger>(std::move(*real), shared);
        ledger = wrapped.get();
        scheduler.emplace(std::move(cfg->jobs), std::move(wrapped), LedgerWorker::Mode::Thread);
        host.deliver_to(&*scheduler);
        REQUIRE(scheduler->attach_host(host));
        auto r = Ledger::open({dir.path, ""}, false);
        REQUIRE(r);
        reader = std::move(*r);
        // The worker's first call (the recovery at start) is answered before the test begins.
        REQUIRE(host.pump_watched(10000));
    }
    // A thread left stalled would hold the test binary.
    ~ThreadedJobs() {
        if (ledger) ledger->unstall();
    }
    // The ledger stalls, and the next minute's fire time is claimed: the claim is in the ledger,
    // stuck. Its fire time.
    std::int64_t claim_stuck() {
        ledger->stall();
        int calls = ledger->calls();
        std::int64_t at = host.next_minute();
        while (ledger->calls() <= calls) std::this_thread::yield();
        return at;
    }
    // The ledger answers again, and the records settle as at lastcall's end. `ran` runs ran.
    void unstall_and_settle(std::size_t ran = 0) {
        ledger->unstall();
        scheduler->settle_records();
        CHECK(host.spawned_argv0("backup").size() == ran);
    }
    // Runs the loop's side until `done` holds: each answer arrives on the worker's eventfd.
    template <typename F>
    void pump_until(F&& done) {
        while (!done()) REQUIRE(host.pump_watched(10000));
    }
    std::vector<RunRecord> rows_of(std::int64_t scheduled_at) {
        auto all = reader->list({});
        REQUIRE(all);
        std::vector<RunRecord> out;
        for (auto& r : *all)
            if (r.scheduled_at == scheduled_at) out.push_back(std::move(r));
        return out;
    }
    std::string report() {
        JsonWriter j;
        j.begin_object();
        scheduler->contribute_report(j);
        j.end_object();
        return j.str();
    }

    lastcall::test::TempDir dir{"worker"};
    FakeHost host;
    StallableLedger* ledger = nullptr;
    std::optional<JobScheduler> scheduler;
    std::unique_ptr<Ledger> reader;
};

constexpr const char* kEveryMinute = R"(
[jobs.backup]
schedule = "* * * * *"
command = ["backup"]
)";

}  // namespace

TEST_CASE(
    "a fire time whose claim is answered after its deadline has one row and one terminal state, "
    "whether the claim landed late or was never begun",
    "[ledger_worker][jobs]") {
    ThreadedJobs j(kEveryMinute, false);
    std::int64_t first = j.claim_stuck();
    j.host.advance(2000ms);  // its deadline: the outcome is unknown
    std::int64_t second = j.host.next_minute();
    j.host.advance(2000ms);  // the second claim, still queued behind the first, is never begun
    j.unstall_and_settle();  // the first claim lands, after its deadline
    auto landed = j.rows_of(first);
    REQUIRE(landed.size() == 1);
    CHECK(landed[0].state == RunState::Interrupted);
    CHECK_THAT(landed[0].reason, Catch::StartsWith("not started: its claim was answered after"));
    auto never = j.rows_of(second);
    REQUIRE(never.size() == 1);
    CHECK(never[0].state == RunState::Skipped);
    CHECK_THAT(never[0].reason,
               Catch::StartsWith("not started: `started` could not be recorded: claim the run of "
                                 "job backup") &&
                   Catch::Contains("not attempted"));
}

TEST_CASE(
    "on a shared ledger a claim answered after its deadline that landed is recorded interrupted "
    "once and is not counted unclaimed",
    "[ledger_worker][jobs][cluster]") {
    ThreadedJobs j(kEveryMinute, true);
    std::int64_t at = j.claim_stuck();
    j.host.advance(1000ms);  // a third of the lease: the claim's deadline
    CHECK_THAT(j.report(), Catch::Contains(R"("unclaimed":1)"));
    j.unstall_and_settle();
    auto rows = j.rows_of(at);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].state == RunState::Interrupted);
    CHECK_THAT(rows[0].reason, Catch::StartsWith("not started: its claim was answered after"));
    CHECK_THAT(j.report(), Catch::Contains(R"("unclaimed":0)"));
}

TEST_CASE(
    "a queued run whose start is answered after its deadline ends with one terminal state, "
    "never left started",
    "[ledger_worker][jobs]") {
    ThreadedJobs j(std::string(kEveryMinute) + "overlap = \"queue\"\n", false);
    j.host.next_minute();
    j.pump_until([&] { return j.host.spawned_argv0("backup").size() == 1; });
    pid_t leader = j.host.spawned_argv0("backup").at(0);
    std::int64_t queued = j.host.next_minute();  // queued behind the running run
    j.pump_until([&] { return j.rows_of(queued).size() == 1; });
    // Only the start blocks. A whole-ledger stall caught whichever call came first under load
    // (the leader's ending, or its pid), and the start, submitted after the clock moved, was
    // answered in time and ran (the sanitized suite at -j4, 7 runs in 32).
    j.ledger->stall_starts();
    int starts = j.ledger->starts();
    // The leader's exit starts the queued run: its `started` is the call the ledger is stuck in.
    j.host.exit(leader, W_EXITCODE(0, 0));
    while (j.ledger->starts() <= starts) j.host.pump_watched(10);
    j.host.advance(2000ms);  // its deadline: the outcome is unknown, the run is not started
    j.unstall_and_settle(1);
    auto rows = j.rows_of(queued);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].state == RunState::Interrupted);
    CHECK_THAT(rows[0].reason, Catch::StartsWith("not started: its start was answered after"));
}
