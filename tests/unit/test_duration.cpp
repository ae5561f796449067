// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include "lastcall/core/duration.hpp"

using namespace lastcall;
using namespace std::chrono_literals;

TEST_CASE("durations accept ms, s, m, h and combinations", "[duration]") {
    CHECK(parse_duration("250ms").value() == 250ms);
    CHECK(parse_duration("10s").value() == 10s);
    CHECK(parse_duration("2m").value() == 2min);
    CHECK(parse_duration("1h30m").value() == 90min);
    CHECK(parse_duration("1.5s").value() == 1500ms);
    CHECK(parse_duration("0").value() == 0ms);
    CHECK(parse_duration("0s").value() == 0ms);
}

TEST_CASE("a duration without a unit or with a bad unit is refused with the reason", "[duration]") {
    auto r = parse_duration("5");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("missing unit"));
    CHECK_THAT(parse_duration("5x").error().message, Catch::Contains("unknown unit 'x'"));
    CHECK_FALSE(parse_duration("").ok());
    CHECK_FALSE(parse_duration("s").ok());
    CHECK_FALSE(parse_duration("-1s").ok());
    CHECK_FALSE(parse_duration("1s ").ok());
}

TEST_CASE("huge durations are refused instead of overflowing", "[duration]") {
    CHECK_FALSE(parse_duration("99999999999999999999h").ok());
    CHECK_FALSE(parse_duration("800h").ok());
    CHECK_FALSE(parse_duration("2592000000h").ok());
    CHECK_FALSE(parse_duration("2592000000000m").ok());
    CHECK(parse_duration("720h").ok());
}

TEST_CASE("durations format back to their shortest form", "[duration]") {
    CHECK(format_duration(8s) == "8s");
    CHECK(format_duration(250ms) == "250ms");
    CHECK(format_duration(90s) == "1m30s");
    CHECK(format_duration(0ms) == "0s");
}
