// SPDX-License-Identifier: Apache-2.0
// Cron expressions come from the TOML config ([jobs.*] schedule), written by people. Properties:
// parse() never crashes on any bytes; for an accepted schedule, next_after() from a few instants
// (taken from the input, clamped to years 1..9999 and beyond) returns a time strictly later and,
// asked again from that time, a strictly later one still: the scheduler's loop relies on that.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "lastcall/jobs/cron.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    using std::chrono::seconds;
    // The first 8 bytes (when there are more) choose the instant; the rest is the expression.
    std::int64_t raw = 1700000000;
    if (size > 8) {
        std::memcpy(&raw, data, 8);
        data += 8, size -= 8;
    }
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto utc = cron::TimeZone::utc();
    auto schedule = cron::parse(text, utc);
    if (!schedule) return 0;
    // Beyond both ends of the supported range too: next_after must refuse, not overflow.
    std::int64_t instants[] = {raw % 400000000000, 0, -62135596800 - 1, 253402300799};
    for (std::int64_t at : instants) {
        cron::sys_seconds t{seconds{at}};
        auto next = schedule->next_after(t);
        if (!next) continue;
        if (*next <= t) __builtin_trap();
        auto after = schedule->next_after(*next);
        if (after && *after <= *next) __builtin_trap();
    }
    return 0;
}
