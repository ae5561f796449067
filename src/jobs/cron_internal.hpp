// SPDX-License-Identifier: Apache-2.0
// The cron files' own parts (cron*.cpp): instants' bounds, the civil calendar, text helpers, the
// zone data and its transitions, and the fields of an expression.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/jobs/cron.hpp"

namespace lastcall::cron {

inline constexpr std::int64_t kDay = 86400;
// No real zone is further than 26 h from UTC (RFC 8536 bounds utoff near there too); every
// window that must contain "all instants that could show wall time w" uses this margin.
inline constexpr std::int32_t kMaxOffset = 26 * 3600;
inline constexpr std::int64_t kWindow = kMaxOffset + 3600;
// Instants accepted by next_after: 0001-01-01 .. 9999-12-31, so no arithmetic can overflow.
inline constexpr std::int64_t kMinInstant = -62135596800;
inline constexpr std::int64_t kMaxInstant = 253402300799;

// ---- civil calendar (proleptic Gregorian, H. Hinnant's algorithms; int64, no overflow here) ----

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const std::int64_t era = floor_div(y, 400);
    const std::int64_t yoe = y - era * 400;
    const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

struct Civil {
    std::int64_t year;
    unsigned month;
    unsigned day;
};

constexpr Civil civil_from_days(std::int64_t z) {
    z += 719468;
    const std::int64_t era = floor_div(z, 146097);
    const std::int64_t doe = z - era * 146097;
    const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const std::int64_t mp = (5 * doy + 2) / 153;
    const unsigned d = static_cast<unsigned>(doy - (153 * mp + 2) / 5 + 1);
    const unsigned m = static_cast<unsigned>(mp < 10 ? mp + 3 : mp - 9);
    return {yoe + era * 400 + (m <= 2), m, d};
}

constexpr unsigned weekday_from_days(std::int64_t z) {  // 0 = Sunday; 1970-01-01 was a Thursday
    return static_cast<unsigned>(z >= -4 ? (z + 4) % 7 : (z + 5) % 7 + 6);
}

constexpr bool is_leap(std::int64_t y) {
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

constexpr unsigned days_in_month(std::int64_t y, unsigned m) {
    constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : kDays[m - 1];
}

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(weekday_from_days(days_from_civil(2024, 3, 10)) == 0);
static_assert(civil_from_days(days_from_civil(2000, 2, 29)).day == 29);

inline Error fail(std::string message) {
    return Error{std::move(message)};
}

inline bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
inline bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
inline bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
inline char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

inline std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

inline std::vector<std::string_view> split_ws(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i])) ++i;
        const std::size_t start = i;
        while (i < s.size() && !is_space(s[i])) ++i;
        if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
}

// Parses a run of digits into an int, saturating so huge numbers still give a range error
// instead of overflowing.
inline std::optional<int> parse_uint(std::string_view s) {
    if (s.empty()) return std::nullopt;
    long long v = 0;
    for (char c : s) {
        if (!is_digit(c)) return std::nullopt;
        v = std::min<long long>(v * 10 + (c - '0'), 1000000000);
    }
    return static_cast<int>(v);
}

// ================================ time zones ================================

// Rule of a POSIX TZ string: "std offset [dst [offset] [,start[/time],end[/time]]]".
struct PosixRule {
    struct When {
        enum Kind { kJulian1, kJulian0, kMonthWeekDay } kind = kMonthWeekDay;
        int month = 0, week = 0, wday = 0, day = 0;
        std::int32_t time = 7200;  // seconds after local midnight; may be negative or > 24 h
    };
    std::int32_t std_off = 0;  // seconds east of UTC (the string itself counts westwards)
    std::int32_t dst_off = 0;
    bool has_dst = false;
    When start, end;
};

struct ZoneData {
    std::string name;
    std::int32_t initial_off = 0;         // before the first transition
    std::vector<std::int64_t> trans_at;   // ascending
    std::vector<std::int32_t> trans_off;  // offset in effect from trans_at[i]
    std::optional<PosixRule> rule;        // from the last transition on (or always if none)
};

struct Transition {
    std::int64_t at;
    std::int32_t before;
    std::int32_t after;
};

// The offset in force at `from` and every change in (from, to], table and rule combined.
std::int32_t changes(const ZoneData& z, std::int64_t from, std::int64_t to,
                     std::vector<Transition>& out);

// ================================ expressions ================================

struct FieldSpec {
    const char* name;
    int lo, hi;
    const char* const* names;  // three-letter names for values lo.. (null: numbers only)
};

inline constexpr const char* kMonthNames[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                              "jul", "aug", "sep", "oct", "nov", "dec"};
inline constexpr const char* kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

inline constexpr FieldSpec kSecond{"second", 0, 59, nullptr};
inline constexpr FieldSpec kMinute{"minute", 0, 59, nullptr};
inline constexpr FieldSpec kHour{"hour", 0, 23, nullptr};
inline constexpr FieldSpec kMday{"day-of-month", 1, 31, nullptr};
inline constexpr FieldSpec kMonth{"month", 1, 12, kMonthNames};
inline constexpr FieldSpec kWday{"day-of-week", 0, 7, kDayNames};  // 7 is Sunday again
inline constexpr FieldSpec kYear{"year", 1970, 2099, nullptr};  // cronexpr's range (crontab lines)

}  // namespace lastcall::cron
