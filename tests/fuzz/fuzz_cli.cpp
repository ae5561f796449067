// SPDX-License-Identifier: Apache-2.0
// The whole command line, the compat modes included: the input is argv split at NUL bytes, and
// its first byte picks the name lastcall is invoked as (lastcall, tini, docker-init, dumb-init),
// since that name selects the compat parser. Properties: no crash, no exception escapes, and a
// parse either yields options or an exit code, and options always carry a command or a config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lastcall/cli/cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    if (size == 0) return 0;
    static const char* const kNames[] = {"lastcall", "/usr/bin/tini", "docker-init", "dumb-init"};
    std::vector<std::string> args{kNames[data[0] % 4]};
    std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
    std::size_t start = 0;
    while (start <= rest.size() && !rest.empty()) {
        std::size_t nul = rest.find('\0', start);
        if (nul == std::string::npos) nul = rest.size();
        args.push_back(rest.substr(start, nul - start));
        start = nul + 1;
    }
    if (args.size() > 64) return 0;  // argv length is not what is being tested
    auto parsed = parse_command_line(args);
    if (parsed.options && parsed.options->command.empty() && parsed.options->config_path.empty())
        __builtin_trap();
    if (!parsed.options && parsed.exit_code < 0) __builtin_trap();
    return 0;
}
