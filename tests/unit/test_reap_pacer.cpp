// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>
#include <chrono>

#include "lastcall/core/clock.hpp"
#include "lastcall/process/reap_pacer.hpp"

using namespace lastcall;
using namespace std::chrono_literals;

TEST_CASE("a lone exit is swept at its SIGCHLD") {
    FakeClock clock;
    ReapPacer pacer(5ms);
    CHECK(pacer.sweep_now());
    // A sweep that found nothing (the SIGCHLD of a stopped child) leaves the next one immediate.
    CHECK_FALSE(pacer.swept(clock.now(), 0));
    CHECK(pacer.sweep_now());
}

TEST_CASE("after a sweep that reaped, the next sweep waits for the interval") {
    FakeClock clock;
    ReapPacer pacer(5ms);
    auto next = pacer.swept(clock.now(), 3);
    REQUIRE(next);
    CHECK(*next == clock.now() + 5ms);
    // The SIGCHLDs of the burst in between do not sweep.
    CHECK_FALSE(pacer.sweep_now());
    clock.advance(5ms);
    // The paced sweep reaped more: the burst goes on, and so does the pacing.
    next = pacer.swept(clock.now(), 40);
    REQUIRE(next);
    CHECK(*next == clock.now() + 5ms);
    CHECK_FALSE(pacer.sweep_now());
}

TEST_CASE("a paced sweep that finds nothing ends the pacing") {
    FakeClock clock;
    ReapPacer pacer(5ms);
    pacer.swept(clock.now(), 1);
    clock.advance(5ms);
    CHECK_FALSE(pacer.swept(clock.now(), 0));
    CHECK(pacer.sweep_now());
}

TEST_CASE("the shutdown ends the pacing: every exit is swept at once") {
    FakeClock clock;
    ReapPacer pacer(5ms);
    pacer.swept(clock.now(), 10);
    pacer.stop_pacing();
    CHECK(pacer.sweep_now());
}

TEST_CASE("a costly sweep spaces the next one out to twenty times its cost, up to 50 ms") {
    // Each reap walks the list of children up to the first exited one: among thousands of
    // live children a sweep takes milliseconds, and sweeping every 5 ms kept PID 1 busy.
    FakeClock clock;
    ReapPacer pacer(5ms);
    auto next = pacer.swept(clock.now(), 100, 100us);  // cheap: the interval
    REQUIRE(next);
    CHECK(*next == clock.now() + 5ms);
    next = pacer.swept(clock.now(), 100, 1ms);
    REQUIRE(next);
    CHECK(*next == clock.now() + 20ms);
    next = pacer.swept(clock.now(), 100, 30ms);  // 16,384 orphans: capped
    REQUIRE(next);
    CHECK(*next == clock.now() + 50ms);
    // However costly, a sweep that reaped nothing ends the pacing.
    CHECK_FALSE(pacer.swept(clock.now(), 0, 30ms));
}
