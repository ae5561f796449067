// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/timefmt.hpp"

#include <cstdio>
#include <ctime>

namespace lastcall {

namespace {

// Floor division: a time before 1970 still gets a millisecond part in [0, 999].
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    return a / b - (a % b != 0 && a < 0);
}

std::size_t format_seconds(std::int64_t unix_seconds, char* buf, std::size_t size) {
    std::time_t t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    return std::strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
}

}  // namespace

std::string iso_utc(std::int64_t unix_seconds) {
    char buf[48];
    std::size_t n = format_seconds(unix_seconds, buf, sizeof buf);
    std::snprintf(buf + n, sizeof buf - n, "Z");
    return buf;
}

std::optional<std::int64_t> parse_iso_utc_ms(std::string_view text) {
    std::string s(text);
    std::tm tm{};
    int ms = 0, used = 0;
    if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                    &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &used) != 6)
        return std::nullopt;
    std::string_view rest = std::string_view(s).substr(static_cast<std::size_t>(used));
    if (rest.size() == 5 && rest[0] == '.' && rest[4] == 'Z') {
        for (char c : rest.substr(1, 3))
            if (c < '0' || c > '9') return std::nullopt;
        ms = (rest[1] - '0') * 100 + (rest[2] - '0') * 10 + (rest[3] - '0');
    } else if (rest != "Z") {
        return std::nullopt;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return static_cast<std::int64_t>(::timegm(&tm)) * 1000 + ms;
}

std::string relative_time(std::int64_t unix_ms, std::int64_t now_ms) {
    std::int64_t d = now_ms - unix_ms;
    bool future = d < 0;
    std::int64_t s = (future ? -d : d) / 1000;
    if (s < 1) return "just now";
    std::string amount = s < 120      ? std::to_string(s) + "s"
                         : s < 7200   ? std::to_string(s / 60) + "m"
                         : s < 172800 ? std::to_string(s / 3600) + "h"
                                      : std::to_string(s / 86400) + "d";
    return future ? "in " + amount : amount + " ago";
}

std::string iso_zoned(std::int64_t unix_seconds, std::int32_t offset_seconds,
                      std::string_view zone_name) {
    char buf[48];
    std::size_t n = format_seconds(unix_seconds + offset_seconds, buf, sizeof buf);
    const char sign = offset_seconds < 0 ? '-' : '+';
    const std::int32_t off = offset_seconds < 0 ? -offset_seconds : offset_seconds;
    std::snprintf(buf + n, sizeof buf - n, "%c%02d:%02d", sign, off / 3600, off / 60 % 60);
    return std::string(buf) + "[" + std::string(zone_name) + "]";
}

LocalTimeText local_time_text(std::int64_t unix_seconds) {
    std::time_t t = static_cast<std::time_t>(unix_seconds);
    std::tm tm{};
    ::localtime_r(&t, &tm);
    char date[32], time[16], zone[16];
    std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
    std::strftime(time, sizeof time, "%H:%M:%S", &tm);
    // A POSIX TZ string may name no abbreviation (glibc then gives the offset's digits or "");
    // the numeric offset is never ambiguous.
    if (tm.tm_zone && *tm.tm_zone && std::string_view(tm.tm_zone) != " ")
        std::snprintf(zone, sizeof zone, "%s", tm.tm_zone);
    else
        std::strftime(zone, sizeof zone, "%z", &tm);
    return {date, time, zone};
}

std::string iso_utc_ms(std::int64_t unix_ms) {
    std::int64_t secs = floor_div(unix_ms, 1000);
    char buf[48];
    std::size_t n = format_seconds(secs, buf, sizeof buf);
    std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(unix_ms - secs * 1000));
    return buf;
}

}  // namespace lastcall
