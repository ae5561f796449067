// SPDX-License-Identifier: Apache-2.0
// --rewrite FROM:TO, through the real command-line parser (the map is built there). Properties:
// no crash; when accepted, the map holds one entry whose source is a real signal and whose target
// is a real signal or 0 (drop).
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lastcall/cli/cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    std::string spec(reinterpret_cast<const char*>(data), size);
    // A NUL cannot occur in a real argv element.
    if (spec.find('\0') != std::string::npos) return 0;
    auto parsed = parse_command_line({"lastcall", "--rewrite", spec, "--", "true"});
    if (!parsed.options) return 0;
    const auto& map = parsed.options->rewrite;
    if (map.size() != 1) __builtin_trap();
    auto [from, to] = *map.begin();
    if (from < 1 || from > SIGRTMAX || to < 0 || to > SIGRTMAX) __builtin_trap();
    return 0;
}
