// SPDX-License-Identifier: Apache-2.0
// parse_signal reads --stop-signal, --pdeathsig, both sides of --rewrite and the compat modes'
// signal options. Properties: no crash; an accepted signal is a real signal number (0 only when
// allowed); a named signal's signal_name() parses back to the same number.
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lastcall/core/signals.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    std::string_view text(reinterpret_cast<const char*>(data), size);
    for (bool allow_zero : {false, true}) {
        auto sig = parse_signal(text, allow_zero);
        if (!sig) continue;
        if (*sig < 0 || *sig > SIGRTMAX || (*sig == 0 && !allow_zero)) __builtin_trap();
        if (*sig == 0) continue;
        std::string name = signal_name(*sig);
        if (name.rfind("signal ", 0) == 0) continue;  // a number without a name (32, 33)
        auto back = parse_signal(name);
        if (!back || *back != *sig) __builtin_trap();
    }
    return 0;
}
