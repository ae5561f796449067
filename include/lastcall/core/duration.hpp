// SPDX-License-Identifier: Apache-2.0
// Human durations on the command line: "250ms", "10s", "2m", "1h30m", "1.5s", plain "0".
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "lastcall/core/error.hpp"

namespace lastcall {

using Millis = std::chrono::milliseconds;

// Units: ms, s, m, h; several may be concatenated ("1m30s"). A bare number without a unit is
// refused (is "5" seconds or milliseconds?), except "0". Bounded to 30 days so deadline
// arithmetic can never overflow.
Result<Millis> parse_duration(std::string_view text);

// The inverse, for logs and the report: "8s", "250ms", "1m30s".
std::string format_duration(Millis d);

}  // namespace lastcall
