// SPDX-License-Identifier: Apache-2.0
// What every command line of lastcall shares on top of CLI11: one help layout and the global
// options. Only the cli/ sources include it (CLI11 stays out of the rest of the program).
#pragma once

// <iostream> without its static initializer, before CLI11 includes it. In GCC 12's libstdc++ each
// file that includes <iostream> holds a static std::ios_base::Init, and one in any file of the
// program constructs the eight standard streams and the classic locale before main: 0.35 ms and
// 14 page faults of a static C++ program's start-up, a third of what lastcall's start-up cost
// over catatonit's (bench/results/2026-12-05.md). lastcall writes with stdio and never uses the
// standard streams; CLI11 uses std::cout only to warn about retired or deprecated options, and
// in App::exit, which lastcall does not declare or call. The guard is libstdc++'s own; the test
// "no ios_base::Init" (tests/CMakeLists.txt) fails if any file brings the initializer back.
#include <istream>
#include <ostream>
#if defined(__GLIBCXX__) && !defined(_GLIBCXX_IOSTREAM)
#define _GLIBCXX_IOSTREAM 1
namespace std {
extern istream cin;
extern ostream cout;
extern ostream cerr;
extern ostream clog;
}  // namespace std
#endif
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lastcall {

// Help prints `usage` (one or more lines, each "Usage: ..." or indented) once, where CLI11 would
// print its own "Usage: NAME [OPTIONS]", which cannot say "-- COMMAND" or list alternatives.
class UsageFormatter : public CLI::Formatter {
  public:
    explicit UsageFormatter(std::string usage) : usage_(std::move(usage)) {}
    std::string make_usage(const CLI::App*, std::string) const override { return usage_ + "\n"; }

  private:
    std::string usage_;
};

inline void set_usage(CLI::App& app, std::string usage) {
    app.formatter(std::make_shared<UsageFormatter>(std::move(usage)));
}

// Whether args[i] is a "--" that ends the options: one right after an option may be that
// option's value (`--pre-stop -- --grace 5s` sets the hook to "--" and the grace to 5s); one
// right after a word that is not an option, or after an option that carries its value
// (`--grace=5s`), cannot be.
inline bool ends_options(const std::vector<std::string>& args, std::size_t i) {
    if (args[i] != "--") return false;
    if (i <= 1) return true;
    const std::string& before = args[i - 1];
    return !before.starts_with("-") || before.find('=') != std::string::npos;
}

// The option names a command line can mean, for adding only those options to the parser.
// CLI11 checks each option it adds against every one added before (quadratic in their number):
// adding lastcall's 38 options was 60% of the instructions of `lastcall --grace 5s -- CMD`
// (callgrind: 420,000 of 690,000; a bare `lastcall -- CMD`, which builds no parser, runs 170,000)
// and spread its start over more pages (bench/results/2026-12-06-dropin.md). An option the line
// does not name has nothing to parse, and CLI11 rejects an unknown word the same way whether
// or not other options exist. Every word up to the "--" that ends the options counts, also an
// option's value or a word of the command: a name too many is only a little slower, never a
// different parse. A request for help needs every option.
class OptionsOnLine {
  public:
    explicit OptionsOnLine(const std::vector<std::string>& args) {
        for (std::size_t i = 1; i < args.size() && !ends_options(args, i); ++i) {
            const std::string& a = args[i];
            if (a == "-h" || a.starts_with("--help")) all_ = true;
            if (a.starts_with("--")) {
                words_.push_back(a.substr(0, a.find('=')));
            } else if (a.size() >= 2 && a[0] == '-') {
                // -v, -vv, -v2: each letter may be a short flag (CLI11 stacks them).
                for (std::size_t k = 1; k < a.size(); ++k) words_.push_back({'-', a[k]});
                if (a.find('h') != std::string::npos) all_ = true;
            }
        }
    }
    OptionsOnLine() : all_(true) {}  // every option (a subcommand's parser)

    // names as CLI11 takes them: "--grace" or "-v,--verbose".
    bool operator()(std::string_view names) const {
        if (all_) return true;
        while (!names.empty()) {
            std::size_t comma = names.find(',');
            std::string_view name = names.substr(0, comma);
            if (std::find(words_.begin(), words_.end(), name) != words_.end()) return true;
            if (comma == std::string_view::npos) break;
            names.remove_prefix(comma + 1);
        }
        return false;
    }

  private:
    bool all_ = false;
    std::vector<std::string> words_;
};

// The options that go before or after a subcommand's name, as in git and systemctl: the
// logging of lastcall itself.
struct GlobalOptions {
    int verbose = 0;
    std::string log_level;   // empty: the command's default
    std::string log_format;  // empty: text
    // The level they ask for, or `fallback`: --log-level wins over -v.
    std::string level_or(const std::string& fallback) const {
        if (!log_level.empty()) return log_level;
        if (verbose > 0) return verbose >= 2 ? "trace" : "debug";
        return fallback;
    }
};

inline void add_global_options(CLI::App& app, GlobalOptions& g,
                               const OptionsOnLine& on_line = OptionsOnLine()) {
    if (on_line("-v,--verbose"))
        app.add_flag("-v,--verbose", g.verbose,
                     "Show the lifecycle (spawn, signals, states); -vv also traces. By default a "
                     "command prints only warnings, errors and a shutdown's one summary line; "
                     "services and jobs also say when each starts and ends");
    if (on_line("--log-level"))
        app.add_option("--log-level", g.log_level, "trace, debug, info (default), warn, error, off")
            ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
    if (on_line("--log-format"))
        app.add_option("--log-format", g.log_format, "text or json")
            ->check(CLI::IsMember({"text", "json"}));
}

// CLI11 messages are multi-word sentences; keep them on one line.
inline std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n') c = ' ';
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

// A subcommand's parse of args[2..]: nullopt to go on, or the exit code (help printed: 0; a
// usage error, one line "lastcall NAME: ... (see lastcall NAME --help)": 2).
inline std::optional<int> parse_subcommand(CLI::App& app, const std::vector<std::string>& args,
                                           const char* name) {
    std::vector<std::string> rest(args.begin() + 2, args.end());
    std::reverse(rest.begin(), rest.end());  // CLI11 takes its argument vector reversed
    try {
        app.parse(rest);
    } catch (const CLI::CallForHelp&) {
        std::fputs(app.help().c_str(), stdout);
        return 0;
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "lastcall %s: %s (see lastcall %s --help)\n", name,
                     one_line(e.what()).c_str(), name);
        return 2;
    }
    return std::nullopt;
}

// The subcommands, for the main help and for telling a subcommand from a command.
inline constexpr const char* kSubcommandHelp =
    "Subcommands (lastcall SUBCOMMAND --help for their options):\n"
    "  up       run the processes of ./Procfile side by side, each tree stopped on Ctrl-C\n"
    "  status   show the services of running lastcall instances (or of one: NAME, PID, CONFIG)\n"
    "  runs     print the run ledger of scheduled jobs; runs release RUN_ID lets a held job run\n"
    "  jobs     print each job's next fire times\n"
    "  report   draw a shutdown report (--report FILE): verdict, timeline, how each process ended\n"
    "Global options (-v, --log-level, --log-format) go before or after the subcommand. A program\n"
    "named like a subcommand runs as: lastcall -- NAME\n";

}  // namespace lastcall
