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
// How long before (or after) `now_ms` a time is, for people reading a table: "just now",
// "42s ago", "3m ago", "5h ago", "2d ago", "in 10m".
std::string relative_time(std::int64_t unix_ms, std::int64_t now_ms);

}  // namespace lastcall
