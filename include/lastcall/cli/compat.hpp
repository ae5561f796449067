// SPDX-License-Identifier: Apache-2.0
// Drop-in modes: the command lines and environments of tini (docker-init) and dumb-init, parsed
// the way those programs parse them, into the same Options the native CLI produces.
//
// A mode is chosen by the name lastcall is invoked as (a symlink named tini, docker-init or
// dumb-init), by `--compat tini|docker-init|dumb-init` (after lastcall's own options, if any), or
// both. The peer's contract wins: every signal is forwarded as the peer forwards it, and lastcall
// never starts a shutdown or kills on its own while the child runs; its texts (usage, version,
// errors) are the peer's. What stays lastcall's: subreaping, and stopping and reaping what the
// child leaves behind (docs/migrating.md lists the differences).
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/cli/cli.hpp"

namespace lastcall {

// The environment as the compat parsers see it; nullopt for an unset variable.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_environment();

// The mode selected by argv[0]'s basename ("tini", "docker-init", "dumb-init"), if any.
std::optional<CompatMode> compat_mode_for_program(std::string_view argv0);

// Where help, version and error text goes (tini prints help on stdout, dumb-init on stderr).
struct CompatOutput {
    std::FILE* out = stdout;
    std::FILE* err = stderr;
};

// args[0] is the program name used in messages. Usage errors print what the peer prints and
// exit 1; --help, --version and -l print and exit 0.
ParsedCommandLine parse_tini(const std::vector<std::string>& args, const EnvLookup& env,
                             CompatOutput io = {});
ParsedCommandLine parse_dumb_init(const std::vector<std::string>& args, const EnvLookup& env,
                                  CompatOutput io = {});

// The entry point for parse_command_line: a compat parse when argv[0] or a leading
// `--compat NAME` asks for one (the flag wins when both name a mode), nullopt for the native
// command line.
std::optional<ParsedCommandLine> parse_compat_command_line(const std::vector<std::string>& args);

// tini's -v count / TINI_VERBOSITY (0 fatal only, 1 warnings: the default, 2 info, 3 debug,
// 4 trace) as a log level.
std::string tini_log_level(int verbosity);

}  // namespace lastcall
