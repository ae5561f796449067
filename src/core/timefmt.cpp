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

std::string iso_utc_ms(std::int64_t unix_ms) {
    std::int64_t secs = floor_div(unix_ms, 1000);
    char buf[48];
    std::size_t n = format_seconds(secs, buf, sizeof buf);
    std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(unix_ms - secs * 1000));
    return buf;
}

}  // namespace lastcall
