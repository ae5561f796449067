// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/duration.hpp"

#include <cstdint>
#include <string>

namespace lastcall {

namespace {
Error bad(std::string_view text, std::string_view why) {
    return Error{"invalid duration '" + std::string(text) + "': " + std::string(why)};
}
}  // namespace

Result<Millis> parse_duration(std::string_view text, const DurationGrammar& grammar) {
    if (text.empty()) return bad(text, "empty");
    if (text == "0") return Millis{0};
    const std::int64_t max_us = grammar.max_seconds * 1000000;
    const std::string too_large = std::string("too large (max ") + grammar.max_text + ")";
    const char* units = grammar.days ? "use ms, s, m, h or d" : "use ms, s, m or h";
    std::int64_t total_us = 0;  // microseconds, so "1.5ms" style fractions stay exact enough
    std::size_t i = 0;
    while (i < text.size()) {
        std::int64_t whole = 0;
        std::int64_t frac = 0, frac_scale = 1;
        std::size_t digits = 0;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
            whole = whole * 10 + (text[i] - '0');
            if (whole > max_us) return bad(text, too_large);
            ++i, ++digits;
        }
        if (i < text.size() && text[i] == '.') {
            ++i;
            while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
                if (frac_scale < 1000000) frac = frac * 10 + (text[i] - '0'), frac_scale *= 10;
                ++i, ++digits;
            }
        }
        if (digits == 0) return bad(text, "expected a number");
        std::size_t unit_start = i;
        while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
        std::string_view unit = text.substr(unit_start, i - unit_start);
        std::int64_t unit_us;
        if (unit == "ms")
            unit_us = 1000;
        else if (unit == "s")
            unit_us = 1000000;
        else if (unit == "m")
            unit_us = 60LL * 1000000;
        else if (unit == "h")
            unit_us = 3600LL * 1000000;
        else if (unit == "d" && grammar.days)
            unit_us = 24 * 3600LL * 1000000;
        else if (unit.empty())
            return bad(text, std::string("missing unit (") + units + ")");
        else
            return bad(text, "unknown unit '" + std::string(unit) + "' (" + units + ")");
        // Checked before multiplying: "2592000000h" must be refused, not overflow.
        if (whole > max_us / unit_us) return bad(text, too_large);
        total_us += whole * unit_us + frac * unit_us / frac_scale;
        if (total_us > max_us) return bad(text, too_large);
    }
    return Millis{total_us / 1000};
}

std::string format_duration(Millis d) {
    auto ms = d.count();
    if (ms == 0) return "0s";
    if (ms % 1000 != 0) return std::to_string(ms) + "ms";
    auto s = ms / 1000;
    std::string out;
    if (s >= 3600) out += std::to_string(s / 3600) + "h", s %= 3600;
    if (s >= 60) out += std::to_string(s / 60) + "m", s %= 60;
    if (s > 0) out += std::to_string(s) + "s";
    return out;
}

}  // namespace lastcall
