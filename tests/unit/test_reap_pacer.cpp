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
