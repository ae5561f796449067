// SPDX-License-Identifier: Apache-2.0
// Wall-clock timestamps as lastcall writes them everywhere (logs, report, ledger listings, job
// environment): ISO 8601 in UTC, "2026-12-03T09:25:48Z" or with milliseconds ".123Z". One
// formatter, so every file and line lastcall writes sorts and parses the same way.
#pragma once

#include <cstdint>
#include <string>

namespace lastcall {

// Whole seconds since the Unix epoch -> "YYYY-MM-DDTHH:MM:SSZ".
std::string iso_utc(std::int64_t unix_seconds);
// Milliseconds since the Unix epoch -> "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string iso_utc_ms(std::int64_t unix_ms);

}  // namespace lastcall
