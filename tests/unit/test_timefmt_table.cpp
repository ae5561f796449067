// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include "lastcall/core/text_table.hpp"
#include "lastcall/core/timefmt.hpp"

using namespace lastcall;

TEST_CASE("an ISO time written by lastcall parses back to the same millisecond", "[timefmt]") {
    for (std::int64_t ms : {0LL, 1764754516248LL, 1764754516000LL, 4102444799999LL}) {
        CHECK(parse_iso_utc_ms(iso_utc_ms(ms)) == ms);
        CHECK(parse_iso_utc_ms(iso_utc(ms / 1000)) == ms / 1000 * 1000);
    }
}

TEST_CASE("text that is not lastcall's ISO time does not parse", "[timefmt]") {
    for (const char* bad :
         {"", "yesterday", "2026-12-03", "2026-12-03T15:45:16", "2026-12-03T15:45:16.2Z",
          "2026-12-03T15:45:16.248", "2026-12-03T15:45:16Zx", "2026-12-03T15:45:16.2a8Z"})
        CHECK_FALSE(parse_iso_utc_ms(bad));
}

TEST_CASE("relative times read as people say them", "[timefmt]") {
    const std::int64_t now = 1764754516248;
    CHECK(relative_time(now, now) == "just now");
    CHECK(relative_time(now - 999, now) == "just now");
    CHECK(relative_time(now - 42'000, now) == "42s ago");
    CHECK(relative_time(now - 119'000, now) == "119s ago");
    CHECK(relative_time(now - 180'000, now) == "3m ago");
    CHECK(relative_time(now - 5 * 3'600'000LL, now) == "5h ago");
    CHECK(relative_time(now - 3 * 86'400'000LL, now) == "3d ago");
    CHECK(relative_time(now + 600'000, now) == "in 10m");
}

TEST_CASE("a zoned time shows the wall-clock time, its offset and the zone's name", "[timefmt]") {
    const std::int64_t t = 1796698800;  // 2026-12-08T03:00:00Z
    CHECK(iso_zoned(t, 0, "UTC") == "2026-12-08T03:00:00+00:00[UTC]");
    CHECK(iso_zoned(t, 3600, "Europe/Berlin") == "2026-12-08T04:00:00+01:00[Europe/Berlin]");
    CHECK(iso_zoned(t, 19800, "Asia/Kolkata") == "2026-12-08T08:30:00+05:30[Asia/Kolkata]");
    CHECK(iso_zoned(t, -12600, "America/St_Johns") ==
          "2026-12-07T23:30:00-03:30[America/St_Johns]");
}

TEST_CASE("a table's columns are as wide as their widest cell, without trailing blanks",
          "[table]") {
    std::string t =
        format_table({{"ID", "JOB", "STATE"}, {"12", "backup", "completed"}, {"7", "x", ""}}, "  ");
    CHECK(t ==
          "  ID  JOB     STATE\n"
          "  12  backup  completed\n"
          "  7   x\n");
}
