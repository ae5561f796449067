// SPDX-License-Identifier: Apache-2.0
// parse_duration reads --grace, --drain-delay, --coalesce and durations in config files.
// Properties: it never crashes or overflows (UBSan aborts on signed overflow), what it accepts
// lies within 0..30 days, and format_duration's output parses back to the same value (the report
// and the logs print durations that a user may paste back into a command line).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lastcall/core/duration.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto d = parse_duration(text);
    if (!d) return 0;
    if (d->count() < 0 || *d > std::chrono::hours(24 * 30)) __builtin_trap();
    auto again = parse_duration(format_duration(*d));
    if (!again || *again != *d) __builtin_trap();
    return 0;
}
