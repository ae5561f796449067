// SPDX-License-Identifier: Apache-2.0
// Command line -> Options. CLI11 lives only in cli.cpp.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/cli/options.hpp"

namespace lastcall {

// What main() does after parsing: run with these options, or exit now with this code (after
// --help, --version, or a usage error, which has already been printed as one line).
struct ParsedCommandLine {
    std::optional<Options> options;
    int exit_code = 0;
    // `lastcall [GLOBAL OPTIONS] SUBCOMMAND ...`: the command line to run the subcommand with,
    // the global options moved after its name. Empty otherwise.
    std::vector<std::string> subcommand = {};
};

// The words that name a subcommand (main.cpp maps each to its entry point).
inline constexpr std::array<std::string_view, 5> kSubcommandNames{"up", "status", "runs", "jobs",
                                                                  "report"};
bool is_subcommand(std::string_view word);

ParsedCommandLine parse_command_line(const std::vector<std::string>& args);

// A password in --ledger's URL is in lastcall's /proc/PID/cmdline, which every process may read,
// units included: overwritten in argv itself (lastcall's own arguments, not the command's), the
// URL left with *** for it. True when there was one.
bool scrub_ledger_password(int argc, char** argv, const Options& options);
// The same for any command line whose argv[1..argc) are all lastcall's own (`lastcall runs`):
// every subcommand that takes --ledger scrubs through it, once no hand-over to the twin (which
// execs this very argv, core/twin.hpp) can follow.
bool scrub_ledger_password(int argc, char** argv, std::string_view ledger_url);
// The one warning that a scrubbed password was readable until now.
std::string ledger_password_was_readable();

// `lastcall up [OPTIONS]`: the Procfile dev runner (up.cpp).
struct UpOptions {
    Options options;  // lastcall's own options given before or after up (parse_native's)
    std::string procfile = "Procfile";
    std::string env_file = ".env";
    bool env_file_given = false;  // a missing default .env is fine, a missing named one is not
    std::vector<std::string> only, except;
    // -p/--port: the base of the PORT each process gets, as foreman assigns it (the n-th
    // process type of the Procfile gets base + 100 * n); none: .env's PORT, then the
    // environment's, then 5000.
    std::optional<int> port;
};
struct ParsedUpCommandLine {
    std::optional<UpOptions> up;
    int exit_code = 0;
};
ParsedUpCommandLine parse_up_command_line(const std::vector<std::string>& args);

}  // namespace lastcall
