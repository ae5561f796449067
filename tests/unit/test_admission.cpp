// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <optional>
#include <random>
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
    t.reset();
    CHECK(a.active() == 0);
    CHECK(a.stats().released == 1);
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

// The race the registry exists for: work counted in after the drain saw active == 0 would use a
// resource the drain has closed. On the one loop thread the check and the count are one call;
// this walks many random interleavings of admit, start, release, rollback and close over a pool
// of outstanding tickets and checks, at every step, that nothing is admitted after close(), that
// the active count only goes down from there, and that every ticket ends exactly once.
TEST_CASE("no unit of work is admitted after close, and every ticket ends exactly once",
          "[admission]") {
    std::mt19937 rng(12345);
    for (int round = 0; round < 300; ++round) {
        Admission a;
        std::vector<Ticket> pool;
        std::optional<std::size_t> active_at_close;
        std::uint64_t started = 0, admitted = 0;
        for (int step = 0; step < 400; ++step) {
            switch (rng() % 6) {
                case 0:
                case 1:
                    if (auto t = a.try_admit()) {
                        REQUIRE_FALSE(active_at_close);  // admitted after close(): the race
                        ++admitted;
                        pool.push_back(std::move(*t));
                    } else {
                        REQUIRE(active_at_close);
                    }
                    break;
                case 2:
                    if (!pool.empty() && !pool.back().is_started()) {
                        pool.back().started();
                        started += pool.back().is_started();  // a no-op once it has ended
                    }
                    break;
                case 3:  // ended (released if it started, else rolled back by the destructor)
                    if (!pool.empty()) pool.erase(pool.begin() + rng() % pool.size());
                    break;
                case 4:
                    if (!pool.empty()) pool[rng() % pool.size()].rollback();
                    break;
                case 5:
                    if (rng() % 20 == 0 && !active_at_close) active_at_close = a.close();
                    break;
            }
            if (active_at_close) REQUIRE(a.active() <= *active_at_close);
            REQUIRE(a.active() <= pool.size());
        }
        pool.clear();
        auto s = a.stats();
        INFO("round " << round);
        REQUIRE(s.active == 0);
        REQUIRE(s.admitted == admitted);
        REQUIRE(s.admitted == s.released + s.rolled_back);
        REQUIRE(s.released == started);
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
