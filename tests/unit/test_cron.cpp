// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "lastcall/jobs/cron.hpp"

using namespace lastcall::cron;
using std::chrono::seconds;

namespace Catch {
template <>
struct StringMaker<sys_seconds> {
    static std::string convert(sys_seconds t) {
        return "@" + std::to_string(t.time_since_epoch().count());
    }
};
}  // namespace Catch

namespace {

sys_seconds utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
    using namespace std::chrono;
    return sys_days{year{y} / month{mo} / day{d}} + hours{h} + minutes{mi} + seconds{s};
}

sys_seconds epoch(long long s) {
    return sys_seconds{seconds{s}};
}

Schedule must_parse(std::string_view expr, const TimeZone& zone = TimeZone::utc()) {
    auto r = parse(expr, zone);
    INFO(expr << ": " << (r ? std::string() : r.error().message));
    REQUIRE(r);
    return *r;
}

std::string parse_error(std::string_view expr) {
    auto r = parse(expr, TimeZone::utc());
    INFO(expr);
    REQUIRE_FALSE(r);
    return r.error().message;
}

TimeZone zone(std::string_view name) {
    auto z = TimeZone::load(name);
    INFO(name << ": " << (z ? std::string() : z.error().message));
    REQUIRE(z);
    return *z;
}

std::vector<sys_seconds> fires(const Schedule& s, sys_seconds from, int n) {
    std::vector<sys_seconds> out;
    for (int k = 0; k < n; ++k) {
        auto next = s.next_after(from);
        if (!next) break;
        out.push_back(*next);
        from = *next;
    }
    return out;
}

}  // namespace

// ---------------------------------------------------------------- syntax

TEST_CASE("five fields fire on the minute, strictly after the given instant", "[cron]") {
    auto s = must_parse("* * * * *");
    CHECK(s.next_after(utc(2024, 5, 1, 10, 0, 0)) == utc(2024, 5, 1, 10, 1, 0));
    CHECK(s.next_after(utc(2024, 5, 1, 10, 0, 59)) == utc(2024, 5, 1, 10, 1, 0));
    CHECK(s.next_after(utc(2024, 12, 31, 23, 59, 30)) == utc(2025, 1, 1, 0, 0, 0));
}

TEST_CASE("a sixth field is a leading seconds field", "[cron]") {
    auto s = must_parse("*/20 30 9 * * *");
    CHECK(fires(s, utc(2024, 5, 1, 9, 30, 0), 3) == std::vector{utc(2024, 5, 1, 9, 30, 20),
                                                                utc(2024, 5, 1, 9, 30, 40),
                                                                utc(2024, 5, 2, 9, 30, 0)});
}

TEST_CASE("ranges, steps, a/n and lists combine in one field", "[cron]") {
    // minutes 5,6,7 + 10,25,40,55 + 50 + 58 (58/5 = 58 only)
    auto s = must_parse("5-7,10-59/15,50,58/5 0 * * *");
    std::vector<sys_seconds> want;
    for (int m : {5, 6, 7, 10, 25, 40, 50, 55, 58}) want.push_back(utc(2024, 1, 1, 0, m));
    CHECK(fires(s, utc(2023, 12, 31, 23, 59), 9) == want);
    CHECK(s.next_after(utc(2024, 1, 1, 0, 58)) == utc(2024, 1, 2, 0, 5));
}

TEST_CASE("month and weekday names are case-insensitive and ranges of names work", "[cron]") {
    auto a = must_parse("0 12 * jan-Mar mon-FRI");
    auto b = must_parse("0 12 * 1-3 1-5");
    for (auto t = utc(2024, 1, 1); t < utc(2025, 6, 1); t += std::chrono::days{5})
        REQUIRE(a.next_after(t) == b.next_after(t));
}

TEST_CASE("7 and a range ending in SUN both mean Sunday", "[cron]") {
    auto seven = must_parse("0 0 * * 7");
    auto zero = must_parse("0 0 * * 0");
    auto fri_sun = must_parse("0 0 * * FRI-SUN");
    auto five_seven = must_parse("0 0 * * 5-7");
    const auto from = utc(2024, 5, 1);  // a Wednesday
    CHECK(seven.next_after(from) == utc(2024, 5, 5));
    CHECK(zero.next_after(from) == utc(2024, 5, 5));
    CHECK(fires(fri_sun, from, 3) ==
          std::vector{utc(2024, 5, 3), utc(2024, 5, 4), utc(2024, 5, 5)});
    CHECK(fires(five_seven, from, 3) == fires(fri_sun, from, 3));
}

TEST_CASE("macros expand to their classic five-field meaning", "[cron]") {
    const auto from = utc(2024, 5, 15, 13, 17, 5);  // a Wednesday
    CHECK(must_parse("@yearly").next_after(from) == utc(2025, 1, 1));
    CHECK(must_parse("@ANNUALLY").next_after(from) == utc(2025, 1, 1));
    CHECK(must_parse("@monthly").next_after(from) == utc(2024, 6, 1));
    CHECK(must_parse("@weekly").next_after(from) == utc(2024, 5, 19));
    CHECK(must_parse("@daily").next_after(from) == utc(2024, 5, 16));
    CHECK(must_parse("@midnight").next_after(from) == utc(2024, 5, 16));
    CHECK(must_parse("@hourly").next_after(from) == utc(2024, 5, 15, 14));
}

TEST_CASE("day-of-month and day-of-week both restricted fire when either matches", "[cron]") {
    // The 13th, or any Friday (Vixie cron's OR rule).
    auto s = must_parse("0 0 13 * FRI");
    CHECK(fires(s, utc(2024, 9, 1), 4) ==
          std::vector{utc(2024, 9, 6), utc(2024, 9, 13), utc(2024, 9, 20), utc(2024, 9, 27)});
    CHECK(s.next_after(utc(2024, 9, 27)) == utc(2024, 10, 4));
    CHECK(fires(s, utc(2024, 10, 4), 2) == std::vector{utc(2024, 10, 11), utc(2024, 10, 13)});
}

TEST_CASE("a day field written with a leading star combines with AND, as in Vixie cron", "[cron]") {
    // "*/2" restricts the days, but starts with '*': odd days that are also Mondays.
    auto s = must_parse("0 0 */2 * MON");
    CHECK(fires(s, utc(2024, 9, 1), 3) ==
          std::vector{utc(2024, 9, 9), utc(2024, 9, 23), utc(2024, 10, 7)});
    // "1-31" does not start with '*': restricted, so OR with Monday = every day.
    auto every_day = must_parse("0 0 1-31 * MON");
    CHECK(every_day.next_after(utc(2024, 9, 1)) == utc(2024, 9, 2));
    CHECK(every_day.next_after(utc(2024, 9, 3)) == utc(2024, 9, 4));
}

TEST_CASE("February 29 fires only in leap years", "[cron]") {
    auto s = must_parse("0 0 29 2 *");
    CHECK(fires(s, utc(2021, 1, 1), 3) ==
          std::vector{utc(2024, 2, 29), utc(2028, 2, 29), utc(2032, 2, 29)});
    CHECK(s.next_after(utc(2096, 3, 1)) == utc(2104, 2, 29));  // 2100 is not a leap year
}

TEST_CASE("a rare AND of a date and a weekday is still found (Feb 29 on a Sunday)", "[cron]") {
    auto s = must_parse("0 0 29 FEB */7");  // */7 = 0,7 = Sunday; leading '*' means AND
    CHECK(fires(s, utc(1970, 1, 1), 2) == std::vector{utc(1976, 2, 29), utc(2004, 2, 29)});
}

TEST_CASE("dates that can never occur are rejected at parse time", "[cron]") {
    CHECK(parse_error("0 0 30 2 *") ==
          "day-of-month field: '30' never occurs in the months of '2'");
    CHECK(parse_error("0 0 31 APR,JUN,SEP,NOV *").find("never occurs") != std::string::npos);
    CHECK(parse_error("0 0 31 4 */2").find("never occurs") != std::string::npos);
    // With the OR rule the weekday alone still fires, so this one is fine.
    auto s = must_parse("0 0 30 2 MON");
    CHECK(s.next_after(utc(2024, 1, 31)) == utc(2024, 2, 5));
}

TEST_CASE("parse errors name the field and the offending token", "[cron]") {
    CHECK(parse_error("61 * * * *") == "minute field: 61 is out of range 0-59");
    CHECK(parse_error("* 24 * * *") == "hour field: 24 is out of range 0-23");
    CHECK(parse_error("* * 0 * *") == "day-of-month field: 0 is out of range 1-31");
    CHECK(parse_error("* * * 13 *") == "month field: 13 is out of range 1-12");
    CHECK(parse_error("* * * * 8") == "day-of-week field: 8 is out of range 0-7");
    CHECK(parse_error("60 * * * * *") == "second field: 60 is out of range 0-59");
    CHECK(parse_error("* * * JANUARY *") == "month field: unknown name 'JANUARY'");
    CHECK(parse_error("* * * * MON-FUN") ==
          "day-of-week field: range 'MON-FUN': unknown name 'FUN'");
    CHECK(parse_error("* * * * JAN") == "day-of-week field: unknown name 'JAN'");
    CHECK(parse_error("MON * * * *") == "minute field: 'MON' is not a number");
    CHECK(parse_error("30-10 * * * *") == "minute field: range '30-10' is reversed");
    CHECK(parse_error("*/0 * * * *") == "minute field: step 0 in '*/0' is out of range 1-60");
    CHECK(parse_error("1,,2 * * * *") == "minute field: empty list item in '1,,2'");
    CHECK(parse_error("1-5/x * * * *") == "minute field: bad step 'x' in '1-5/x'");
    CHECK(parse_error("-5 * * * *") == "minute field: range '-5': missing value");
    CHECK(parse_error("*-5 * * * *") == "minute field: range '*-5': '*' is not a number");
    CHECK(parse_error("99999999999999999999 * * * *") ==
          "minute field: 99999999999999999999 is out of range 0-59");
    CHECK(parse_error("* * * *").find("expected 5 fields") == 0);
    CHECK(parse_error("* * * * * * *").find("got 7") != std::string::npos);
    CHECK(parse_error("") == "empty cron expression");
    CHECK(parse_error("   ") == "empty cron expression");
    CHECK(parse_error("@fortnightly") == "unknown macro '@fortnightly'");
    CHECK(parse_error("@hourly 5").find("takes no fields") != std::string::npos);
    CHECK(parse_error("@reboot").find("@reboot") == 0);
    CHECK(parse_error("L * * * *") == "minute field: 'L' is not a number");
}

TEST_CASE("the parser returns errors, never throws, on arbitrary bytes", "[cron]") {
    std::mt19937 rng(12345);
    const std::string alphabet = "0123456789*/-,@ \tLW#?HJFMSsundaymonjanfebCRON_TZ=Europe/.";
    for (int k = 0; k < 20000; ++k) {
        std::string s;
        const int len = static_cast<int>(rng() % 40);
        for (int i = 0; i < len; ++i)
            s +=
                rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
        lastcall::Result<Schedule> r = lastcall::Error{};
        REQUIRE_NOTHROW(r = parse(s, TimeZone::utc()));
        if (r) REQUIRE_NOTHROW(r->next_after(utc(2024, 1, 1)));
    }
}

// ---------------------------------------------------------------- @every

TEST_CASE("@every fires on a lattice from the anchor, strictly after the instant", "[cron]") {
    auto s = must_parse("@every 1h30m");
    CHECK(s.is_interval());
    CHECK(s.interval() == seconds{5400});
    // Default anchor is the epoch: restarts keep the phase.
    CHECK(s.next_after(epoch(0)) == epoch(5400));
    CHECK(s.next_after(epoch(5399)) == epoch(5400));
    CHECK(s.next_after(epoch(5400)) == epoch(10800));
    auto a = s.anchored_at(epoch(100));
    CHECK(a.next_after(epoch(100)) == epoch(5500));
    CHECK(a.next_after(epoch(50)) == epoch(100));  // before the anchor the lattice continues
    CHECK(must_parse("@every 30s").next_after(epoch(31)) == epoch(60));
    CHECK(must_parse("@EVERY 2d").interval() == seconds{172800});
    CHECK(must_parse("@every 1h1m1s").interval() == seconds{3661});
}

TEST_CASE("@every ignores DST: the interval is elapsed time", "[cron]") {
    auto ny = zone("America/New_York");
    auto s = must_parse("@every 1h", ny).anchored_at(epoch(1730610000));  // 01:00 EDT Nov 3
    CHECK(fires(s, epoch(1730610000), 2) == std::vector{epoch(1730613600), epoch(1730617200)});
}

TEST_CASE("@every rejects missing, zero, unitless, sub-second and unknown durations", "[cron]") {
    CHECK(parse_error("@every").find("@every takes one duration") == 0);
    CHECK(parse_error("@every 0s") == "@every: interval must be positive: '0s'");
    CHECK(parse_error("@every 5") ==
          "@every: invalid duration '5': missing unit (use ms, s, m, h or d)");
    CHECK(parse_error("@every 500ms") == "@every: sub-second intervals are not supported: '500ms'");
    CHECK(parse_error("@every 1.5s") == "@every: sub-second intervals are not supported: '1.5s'");
    CHECK(parse_error("@every 1w") ==
          "@every: invalid duration '1w': unknown unit 'w' (use ms, s, m, h or d)");
    CHECK(parse_error("@every h") == "@every: invalid duration 'h': expected a number");
    CHECK(parse_error("@every 99999999999d").find("too large (max 100 years)") !=
          std::string::npos);
    CHECK(parse_error("@every 1h 2m").find("@every takes one duration") == 0);
}

// ---------------------------------------------------------------- time zones

TEST_CASE("CRON_TZ= prefix overrides the zone passed to parse", "[cron]") {
    auto s = must_parse("CRON_TZ=Asia/Kolkata 0 9 * * *", zone("America/New_York"));
    CHECK(s.zone().name() == "Asia/Kolkata");
    CHECK(s.next_after(utc(2024, 5, 1)) == utc(2024, 5, 1, 3, 30));
    auto plain = must_parse("0 9 * * *", zone("Asia/Kolkata"));
    CHECK(plain.next_after(utc(2024, 5, 1)) == utc(2024, 5, 1, 3, 30));
}

TEST_CASE("unknown or path-like CRON_TZ names are rejected", "[cron]") {
    CHECK(parse_error("CRON_TZ=Mars/Olympus * * * * *").find("CRON_TZ: unknown time zone") == 0);
    CHECK(parse_error("CRON_TZ=../../etc/passwd * * * * *") ==
          "CRON_TZ: invalid time zone name '../../etc/passwd'");
    CHECK(parse_error("CRON_TZ=/etc/passwd * * * * *").find("invalid time zone name") !=
          std::string::npos);
    CHECK(parse_error("CRON_TZ=Europe/Berlin").find("empty") != std::string::npos);
    CHECK(parse_error("CRON_TZ= * * * * *").find("needs a zone name") != std::string::npos);
}

TEST_CASE("a spring-forward gap fires once, at the first instant after the gap", "[cron]") {
    auto ny = zone("America/New_York");
    // 2024-03-10: 02:00 EST jumps to 03:00 EDT at 07:00 UTC (1710054000).
    auto daily = must_parse("30 2 * * *", ny);
    CHECK(fires(daily, utc(2024, 3, 9, 12), 2) ==
          std::vector{epoch(1710054000), utc(2024, 3, 11, 6, 30)});
    // Every quarter hour: 02:00..02:45 do not exist; together with 03:00 they fire once.
    auto quarter = must_parse("*/15 * * * *", ny);
    CHECK(fires(quarter, utc(2024, 3, 10, 6, 40), 3) ==
          std::vector{utc(2024, 3, 10, 6, 45), epoch(1710054000), utc(2024, 3, 10, 7, 15)});
}

TEST_CASE("an ambiguous fall-back wall time fires once, at its first occurrence", "[cron]") {
    auto ny = zone("America/New_York");
    // 2024-11-03: 02:00 EDT falls back to 01:00 EST at 06:00 UTC; 01:30 happens twice.
    auto daily = must_parse("30 1 * * *", ny);
    CHECK(fires(daily, utc(2024, 11, 2, 12), 2) ==
          std::vector{epoch(1730611800), utc(2024, 11, 4, 6, 30)});
    // An hourly job skips the repeated hour: 01:00 EDT, then 02:00 EST (two hours later).
    auto hourly = must_parse("0 * * * *", ny);
    CHECK(fires(hourly, utc(2024, 11, 3, 4, 30), 3) ==
          std::vector{utc(2024, 11, 3, 5), utc(2024, 11, 3, 7), utc(2024, 11, 3, 8)});
}

TEST_CASE("starting inside the repeated hour does not fire its wall times again", "[cron]") {
    auto ny = zone("America/New_York");
    auto quarter = must_parse("*/15 * * * *", ny);
    // 01:20 EST (second pass, 06:20 UTC): 01:30 and 01:45 already fired in the first pass.
    CHECK(quarter.next_after(utc(2024, 11, 3, 6, 20)) == utc(2024, 11, 3, 7, 0));
    // 01:20 EDT (first pass) still sees 01:30 EDT.
    CHECK(quarter.next_after(utc(2024, 11, 3, 5, 20)) == utc(2024, 11, 3, 5, 30));
}

TEST_CASE("southern-hemisphere and half-hour DST follow the same rules", "[cron]") {
    auto syd = zone("Australia/Sydney");
    // 2024-10-06 02:00 AEST -> 03:00 AEDT; 2024-04-07 03:00 AEDT -> 02:00 AEST.
    CHECK(must_parse("30 2 * * *", syd).next_after(utc(2024, 10, 5, 0)) == epoch(1728144000));
    CHECK(must_parse("30 2 * * *", syd).next_after(utc(2024, 4, 6, 0)) == epoch(1712417400));
    auto lhi = zone("Australia/Lord_Howe");  // 02:00 -> 02:30, a 30-minute gap
    CHECK(must_parse("15 2 * * *", lhi).next_after(utc(2024, 10, 5, 0)) == epoch(1728142200));
}

TEST_CASE("a skipped calendar day (Samoa, 2011-12-30) fires once after the jump", "[cron]") {
    auto apia = zone("Pacific/Apia");
    auto noon = must_parse("0 12 * * *", apia);
    // 2011-12-29 23:59:59 -10:00 is followed by 2011-12-31 00:00:00 +14:00 (1325239200):
    // noon on the 29th, the missing 30th at the jump, noon on the 31st.
    const auto jump = epoch(1325239200);
    CHECK(fires(noon, jump - std::chrono::hours{13}, 3) ==
          std::vector{jump - std::chrono::hours{12}, jump, jump + std::chrono::hours{12}});
}

TEST_CASE("DST after the last table entry follows the zone's POSIX rule", "[cron]") {
    auto ny = zone("America/New_York");
    // 2050-03-13 is the second Sunday of March; 02:30 is skipped, 03:00 EDT = 2530767600.
    CHECK(must_parse("30 2 * * *", ny).next_after(utc(2050, 3, 12, 12)) == epoch(2530767600));
    CHECK(must_parse("0 12 * * *", ny).next_after(utc(2050, 7, 1)) == utc(2050, 7, 1, 16));
}

TEST_CASE("POSIX TZ strings give the same offsets as the zoneinfo file", "[cron]") {
    auto posix = TimeZone::from_posix("EST5EDT,M3.2.0,M11.1.0");
    REQUIRE(posix);
    auto ny = zone("America/New_York");
    for (auto t = utc(2008, 1, 1); t < utc(2030, 1, 1); t += std::chrono::hours{7 * 24 + 5})
        REQUIRE(posix->offset_at(t) == ny.offset_at(t));
    auto berlin = TimeZone::from_posix("CET-1CEST,M3.5.0,M10.5.0/3");
    REQUIRE(berlin);
    CHECK(berlin->offset_at(utc(2024, 7, 1)) == seconds{7200});
    CHECK(berlin->offset_at(utc(2024, 12, 1)) == seconds{3600});
    CHECK(TimeZone::from_posix("<+0530>-5:30")->offset_at(utc(2024, 1, 1)) == seconds{19800});
    CHECK_FALSE(TimeZone::from_posix("EST5EDT,M13.2.0,M11.1.0"));
    CHECK_FALSE(TimeZone::from_posix("X"));
}

TEST_CASE("a fire time is shown in its schedule's zone, with the offset that day and the name",
          "[cron]") {
    auto berlin = TimeZone::from_posix("CET-1CEST,M3.5.0,M10.5.0/3");
    REQUIRE(berlin);
    auto daily = must_parse("0 3 * * *", *berlin);
    auto winter = daily.next_after(utc(2026, 12, 7));
    REQUIRE(winter);
    CHECK(fire_time_text(daily, *winter) ==
          "2026-12-07T03:00:00+01:00[CET-1CEST,M3.5.0,M10.5.0/3]");
    auto summer = daily.next_after(utc(2027, 7, 1));
    REQUIRE(summer);
    CHECK(fire_time_text(daily, *summer) ==
          "2027-07-01T03:00:00+02:00[CET-1CEST,M3.5.0,M10.5.0/3]");
    auto hourly = must_parse("CRON_TZ=UTC 0 * * * *", *berlin);
    CHECK(fire_time_text(hourly, utc(2026, 12, 7, 5)) == "2026-12-07T05:00:00+00:00[UTC]");
}

TEST_CASE("resolve maps wall times: normal, ambiguous -> first, gap -> jump instant", "[cron]") {
    auto ny = zone("America/New_York");
    auto wall = [](sys_seconds t) { return local_seconds{t.time_since_epoch()}; };
    CHECK(ny.resolve(wall(utc(2024, 7, 1, 12))) == utc(2024, 7, 1, 16));
    CHECK(ny.resolve(wall(utc(2024, 11, 3, 1, 30))) == utc(2024, 11, 3, 5, 30));
    CHECK(ny.resolve(wall(utc(2024, 3, 10, 2, 30))) == utc(2024, 3, 10, 7, 0));
    CHECK(ny.to_local(utc(2024, 11, 3, 6, 30)) == wall(utc(2024, 11, 3, 1, 30)));
}

TEST_CASE("TZ environment variable selects the default zone", "[cron]") {
    const char* old = std::getenv("TZ");
    const std::string saved = old ? old : "";
    setenv("TZ", "Asia/Tokyo", 1);
    auto tokyo = parse("0 9 * * *");
    setenv("TZ", ":Europe/Berlin", 1);
    auto berlin = parse("0 9 * * *");
    setenv("TZ", "JST-9", 1);
    auto posix = parse("0 9 * * *");
    setenv("TZ", "", 1);
    auto empty = parse("0 9 * * *");
    if (old)
        setenv("TZ", saved.c_str(), 1);
    else
        unsetenv("TZ");
    REQUIRE(tokyo);
    REQUIRE(berlin);
    REQUIRE(posix);
    REQUIRE(empty);
    CHECK(tokyo->next_after(utc(2024, 4, 30, 12)) == utc(2024, 5, 1, 0));
    CHECK(berlin->next_after(utc(2024, 5, 1)) == utc(2024, 5, 1, 7));
    CHECK(posix->next_after(utc(2024, 4, 30, 12)) == utc(2024, 5, 1, 0));
    CHECK(empty->next_after(utc(2024, 5, 1)) == utc(2024, 5, 1, 9));
}

TEST_CASE("truncated or corrupt TZif data is an error, not a crash", "[cron]") {
    std::ifstream in("/usr/share/zoneinfo/America/New_York", std::ios::binary);
    REQUIRE(in);
    const std::string bytes{std::istreambuf_iterator<char>(in), {}};
    REQUIRE(TimeZone::from_tzif("ny", bytes));
    for (std::size_t n = 0; n < bytes.size(); n += 7)
        REQUIRE_NOTHROW(TimeZone::from_tzif("ny", std::string_view(bytes).substr(0, n)));
    CHECK_FALSE(TimeZone::from_tzif("ny", std::string_view(bytes).substr(0, 60)));
    std::mt19937 rng(7);
    for (int k = 0; k < 2000; ++k) {
        std::string mutated = bytes;
        for (int i = 0; i < 4; ++i) mutated[rng() % mutated.size()] = static_cast<char>(rng());
        auto z = TimeZone::from_tzif("mutated", mutated);
        if (z) {
            auto s = parse("*/7 */3 * * *", *z);
            REQUIRE(s);
            REQUIRE_NOTHROW(s->next_after(utc(2024, 3, 10)));
        }
    }
    CHECK(TimeZone::from_tzif("x", "not a tzif file at all, but long enough to have a header")
              .error()
              .message == "time zone 'x': not a TZif file");
}

TEST_CASE("instants outside years 1..9999 have no next fire time", "[cron]") {
    auto s = must_parse("* * * * *");
    CHECK_FALSE(s.next_after(epoch(400000000000LL)));
    CHECK_FALSE(s.next_after(epoch(-100000000000LL)));
    CHECK_FALSE(s.next_after(utc(9999, 12, 31, 23, 59, 30)));
    CHECK(s.next_after(utc(9999, 12, 31, 23, 58, 30)) == utc(9999, 12, 31, 23, 59));
}
