// SPDX-License-Identifier: Apache-2.0
// Wall-clock timestamps as lastcall writes them everywhere (logs, report, ledger listings, job
// environment): ISO 8601 in UTC, "2026-12-03T09:25:48Z" or with milliseconds ".123Z". One
// formatter, so every file and line lastcall writes sorts and parses the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lastcall {

// Whole seconds since the Unix epoch -> "YYYY-MM-DDTHH:MM:SSZ".
std::string iso_utc(std::int64_t unix_seconds);
// Milliseconds since the Unix epoch -> "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string iso_utc_ms(std::int64_t unix_ms);
// Either format back to milliseconds since the epoch; nullopt if it is neither.
std::optional<std::int64_t> parse_iso_utc_ms(std::string_view text);
// A time in a named zone whose offset at that time is known, for people and programs alike:
// "2026-12-08T03:00:00+01:00[Europe/Berlin]", RFC 9557's form (ISO 8601 with the offset, then
// the zone's name): the wall-clock time a job's schedule is written in, and the instant.
std::string iso_zoned(std::int64_t unix_seconds, std::int32_t offset_seconds,
                      std::string_view zone_name);
// A time in the local zone of the C library ($TZ, else /etc/localtime), as a table shows it:
// date "2026-12-07", time "11:02:05", and the zone's abbreviation then ("CET", "UTC"; "+0530"
// for a zone that has none).
struct LocalTimeText {
    std::string date, time, zone;
};
LocalTimeText local_time_text(std::int64_t unix_seconds);
// How long before (or after) `now_ms` a time is, for people reading a table: "just now",
// "42s ago", "3m ago", "5h ago", "2d ago", "in 10m".
std::string relative_time(std::int64_t unix_ms, std::int64_t now_ms);

}  // namespace lastcall
