// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "lastcall/shutdown/admission.hpp"

using namespace lastcall;

TEST_CASE("an admitted ticket that starts is released exactly once", "[admission]") {
    Admission a;
    {
        auto t = a.try_admit();
        REQUIRE(t);
        CHECK(a.active() == 1);
        t->started();
        t->release();
        t->release();
        CHECK(a.active() == 0);
    }
    auto s = a.stats();
    CHECK(s.released == 1);
    CHECK(s.rolled_back == 0);
}

TEST_CASE("a ticket dropped before it started is rolled back, not released", "[admission]") {
    Admission a;
    { auto t = a.try_admit(); }
    auto s = a.stats();
    CHECK(s.rolled_back == 1);
    CHECK(s.released == 0);
    CHECK(a.active() == 0);
}

TEST_CASE("once intake is closed nothing is admitted and the count only goes down", "[admission]") {
    Admission a;
    auto t = a.try_admit();
    t->started();
    CHECK(a.close() == 1);
    CHECK_FALSE(a.try_admit());
    CHECK(a.stats().refused == 1);
    bool idle = false;
    a.on_idle([&] { idle = true; });
    t.reset();
    CHECK(idle);
    CHECK(a.active() == 0);
}

TEST_CASE("a moved ticket is finished once, by its last owner", "[admission]") {
    Admission a;
    auto t = a.try_admit();
    t->started();
    Ticket moved = std::move(*t);
    t.reset();
    CHECK(a.active() == 1);
    moved.release();
    CHECK(a.active() == 0);
    CHECK(a.stats().released == 1);
}

// The race the registry exists for: a worker reads "open", the drain closes and sees active == 0
// and tears the shared resource down, and only then the worker counts itself in and uses the torn
// down resource. Workers hammer admit/start/release (and rollbacks) while a drainer closes intake
// at a random moment, waits for zero and then "closes the pool". Any unit that starts after the
// drain observed zero is a violation.
TEST_CASE("no unit of work starts after a concurrent drain observed zero active units",
          "[admission][stress]") {
    constexpr int kRounds = 300;
    constexpr int kWorkers = 6;
    std::mt19937 seed_rng(12345);
    for (int round = 0; round < kRounds; ++round) {
        Admission a;
        std::atomic<bool> drained_at_zero{false};
        std::atomic<bool> pool_open{true};
        std::atomic<long> started_after_drain{0}, used_closed_pool{0}, started{0}, refusals{0};
        std::atomic<bool> go{false};
        std::vector<std::thread> workers;
        for (int w = 0; w < kWorkers; ++w) {
            unsigned seed = seed_rng();
            workers.emplace_back([&, seed] {
                std::mt19937 rng(seed);
                while (!go.load()) std::this_thread::yield();
                for (int i = 0; i < 2000; ++i) {
                    auto t = a.try_admit();
                    if (!t) {  // intake closed: this worker is done
                        ++refusals;
                        break;
                    }
                    if (rng() % 8 == 0) continue;  // cancelled before start: destructor rolls back
                    if (drained_at_zero.load()) ++started_after_drain;
                    t->started();
                    ++started;
                    if (!pool_open.load()) ++used_closed_pool;
                    if (rng() % 4 == 0) std::this_thread::yield();
                    if (!pool_open.load()) ++used_closed_pool;
                    t->release();
                }
            });
        }
        std::thread drainer([&, delay = seed_rng() % 200] {
            while (!go.load()) std::this_thread::yield();
            for (unsigned i = 0; i < delay; ++i) std::this_thread::yield();
            a.close();
            bool idle =
                a.wait_idle_until(std::chrono::steady_clock::now() + std::chrono::seconds(10));
            if (idle) {
                drained_at_zero = true;
                pool_open = false;  // the shared resource closes only after the drain
            }
        });
        go = true;
        drainer.join();
        for (auto& w : workers) w.join();

        INFO("round " << round);
        REQUIRE(drained_at_zero.load());
        REQUIRE(started_after_drain.load() == 0);
        REQUIRE(used_closed_pool.load() == 0);
        auto s = a.stats();
        REQUIRE(s.active == 0);
        REQUIRE_FALSE(s.open);
        REQUIRE(s.admitted == s.released + s.rolled_back);
        REQUIRE(s.released == static_cast<std::uint64_t>(started.load()));
        // Every refusal a worker saw is counted once (on a loaded machine the workers may all
        // finish their loops before the drain closes intake: then there are none).
        REQUIRE(s.refused == static_cast<std::uint64_t>(refusals.load()));
    }
}

TEST_CASE("admission counts registered, executing and released per entry path", "[admission]") {
    Admission a;
    auto main = a.try_admit(EntryPath::Main);
    auto fire = a.try_admit(EntryPath::JobFire);
    auto never = a.try_admit(EntryPath::Restart);
    main->started();
    fire->started();
    never->rollback();
    CHECK(a.stats().of(EntryPath::Main).executing == 1);
    fire->release();
    a.close();
    CHECK_FALSE(a.try_admit(EntryPath::ServiceStart));
    auto s = a.stats();
    CHECK(s.of(EntryPath::Main).registered == 1);
    CHECK(s.of(EntryPath::Main).executing == 1);
    CHECK(s.of(EntryPath::JobFire).registered == 1);
    CHECK(s.of(EntryPath::JobFire).executing == 0);
    CHECK(s.of(EntryPath::JobFire).released == 1);
    CHECK(s.of(EntryPath::Restart).rolled_back == 1);
    CHECK(s.of(EntryPath::ServiceStart).refused == 1);
    main->release();
    CHECK(a.stats().of(EntryPath::Main).released == 1);
    CHECK(a.stats().of(EntryPath::Main).executing == 0);
}
