// SPDX-License-Identifier: Apache-2.0
// Human durations on the command line: "250ms", "10s", "2m", "1h30m", "1.5s", plain "0".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "lastcall/core/error.hpp"

namespace lastcall {

using Millis = std::chrono::milliseconds;

// The one duration grammar of lastcall (flags, config keys, cron's `@every`). Units: ms, s, m,
// h, and d (24 hours) where `days` allows it; several may be concatenated ("1m30s"), fractions
// allowed ("1.5s"). A bare number without a unit is refused (is "5" seconds or milliseconds?),
// except "0". Bounded (30 days for deadlines, so their arithmetic can never overflow).
struct DurationGrammar {
    bool days = false;
    std::int64_t max_seconds = 30LL * 24 * 3600;
    const char* max_text = "30 days";
};
Result<Millis> parse_duration(std::string_view text, const DurationGrammar& grammar = {});

// The inverse, for logs and the report: "8s", "250ms", "1m30s".
std::string format_duration(Millis d);

}  // namespace lastcall
