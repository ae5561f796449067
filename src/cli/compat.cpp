// SPDX-License-Identifier: Apache-2.0
#include "lastcall/cli/compat.hpp"

#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "lastcall/core/signals.hpp"

namespace lastcall {

namespace {

// What `tini --version` and `dumb-init --version` print, byte for byte as Debian's builds of
// tini 0.19.0 and dumb-init 1.2.5 do: docker reads the tini line in `docker info`, and scripts
// compare the dumb-init one.
constexpr const char* kTiniVersion = "0.19.0";
constexpr const char* kDumbInitVersion = "1.2.5";
// dumb-init accepts only the classic signals for -r.
constexpr int kDumbInitMaxSignal = 31;

std::string basename_of(std::string_view path) {
    auto slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// getopt permutes argv in place and keeps pointers into it: this owns the strings for as long
// as the parse runs, and hands out the (possibly reordered) rest afterwards.
class Argv {
  public:
    explicit Argv(const std::vector<std::string>& args) : storage_(args) {
        for (auto& s : storage_) ptrs_.push_back(s.data());
        ptrs_.push_back(nullptr);
    }
    int argc() const { return static_cast<int>(storage_.size()); }
    char** argv() { return ptrs_.data(); }
    std::vector<std::string> from(int index) const {
        std::vector<std::string> out;
        for (int i = index; i < argc(); ++i) out.emplace_back(ptrs_[static_cast<std::size_t>(i)]);
        return out;
    }

  private:
    std::vector<std::string> storage_;
    std::vector<char*> ptrs_;
};

// getopt keeps its position in globals; optind = 0 makes glibc start over (and re-read the
// ordering flags), so that every parse is independent of the previous one.
void reset_getopt() {
    optind = 0;
    opterr = 0;  // printed here, to the CompatOutput, in glibc's own words
}

// glibc's getopt message for a '?' or ':' answer, as the peers print it (argv[0] as invoked).
// longs: getopt_long's table (dumb-init); null: plain getopt (tini), which reads "--bogus" as
// the option '-'.
void print_getopt_error(std::FILE* err, int answer, char** argv, const option* longs) {
    const char* word = optind > 0 ? argv[optind - 1] : "";
    if (!longs || std::strncmp(word, "--", 2) != 0) {
        if (answer == ':')
            std::fprintf(err, "%s: option requires an argument -- '%c'\n", argv[0], optopt);
        else
            std::fprintf(err, "%s: invalid option -- '%c'\n", argv[0], optopt);
        return;
    }
    // glibc's getopt_long, word for word: an exact name or a unique abbreviation names the
    // option in full; several abbreviated matches are listed in the table's order; an unknown
    // word is quoted whole, '=' and value included.
    std::string_view typed(word + 2);
    std::string_view flag = typed.substr(0, typed.find('='));
    const option* found = nullptr;
    std::vector<const option*> matches;
    for (const option* o = longs; o->name; ++o) {
        std::string_view name(o->name);
        if (name == flag) {
            found = o;
            break;
        }
        if (name.starts_with(flag)) matches.push_back(o);
    }
    if (!found && matches.size() == 1) found = matches.front();
    if (!found && matches.size() > 1) {
        std::fprintf(err, "%s: option '%s' is ambiguous; possibilities:", argv[0], word);
        for (const option* o : matches) std::fprintf(err, " '--%s'", o->name);
        std::fprintf(err, "\n");
    } else if (!found) {
        std::fprintf(err, "%s: unrecognized option '%s'\n", argv[0], word);
    } else if (answer == ':') {
        std::fprintf(err, "%s: option '--%s' requires an argument\n", argv[0], found->name);
    } else {
        std::fprintf(err, "%s: option '--%s' doesn't allow an argument\n", argv[0], found->name);
    }
}

// tini's own fatal lines ("[FATAL tini (PID)] ..."), printed before it exits 1.
void tini_fatal(std::FILE* err, const std::string& what) {
    std::fprintf(err, "[FATAL tini (%d)] %s\n", static_cast<int>(::getpid()), what.c_str());
}

// tini -p takes the names of its own table: upper case, with the SIG prefix, no real-time ones.
std::optional<int> tini_signal(const std::string& text) {
    if (!text.starts_with("SIG")) return std::nullopt;
    for (char c : text)
        if (!(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9')) return std::nullopt;
    auto sig = parse_signal(text);
    if (!sig || *sig >= SIGRTMIN) return std::nullopt;
    return *sig;
}

// tini -e: strtol in base 10, the whole word consumed, 0..255.
std::optional<int> tini_exit_code(const char* text) {
    char* end = nullptr;
    errno = 0;
    // As tini's strtol check: the whole text must be read, so "" is 0 (tini -e '' runs).
    long v = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > 255) return std::nullopt;
    return static_cast<int>(v);
}

// dumb-init -r: sscanf("%d:%d"), so leading blanks, signs and trailing text pass as they do there.
std::optional<std::pair<int, int>> dumb_init_rewrite(const char* text) {
    int from = 0, to = 0;
    if (std::sscanf(text, "%d:%d", &from, &to) != 2) return std::nullopt;
    if (from < 1 || from > kDumbInitMaxSignal || to < 0 || to > kDumbInitMaxSignal)
        return std::nullopt;
    return std::pair{from, to};
}

// tini's usage, word for word (scripts and people compare it with tini's); program is the
// basename it was invoked as.
void print_tini_usage(std::FILE* out, const std::string& program) {
    const char* p = program.c_str();
    std::fprintf(out, "%s (tini version %s)\n", p, kTiniVersion);
    std::fprintf(out, "Usage: %s [OPTIONS] PROGRAM -- [ARGS] | --version\n\n", p);
    std::fprintf(out, "Execute a program under the supervision of a valid init process (%s)\n\n",
                 p);
    std::fprintf(out,
                 "Command line options:\n\n"
                 "  --version: Show version and exit.\n"
                 "  -h: Show this help message and exit.\n"
                 "  -s: Register as a process subreaper (requires Linux >= 3.4).\n"
                 "  -p SIGNAL: Trigger SIGNAL when parent dies, e.g. \"-p SIGKILL\".\n"
                 "  -v: Generate more verbose output. Repeat up to 3 times.\n"
                 "  -w: Print a warning when processes are getting reaped.\n"
                 "  -g: Send signals to the child's process group.\n"
                 "  -e EXIT_CODE: Remap EXIT_CODE (from 0 to 255) to 0.\n"
                 "  -l: Show license and exit.\n"
                 "\n"
                 "Environment variables:\n\n"
                 "  TINI_SUBREAPER: Register as a process subreaper (requires Linux >= 3.4).\n"
                 "  TINI_VERBOSITY: Set the verbosity level (default: 1).\n"
                 "  TINI_KILL_PROCESS_GROUP: Send signals to the child's process group.\n"
                 "\n");
}

// dumb-init's help, word for word; argv0 as invoked (dumb-init prints argv[0] unchanged).
void print_dumb_init_help(std::FILE* out, const std::string& argv0) {
    std::fprintf(
        out,
        "dumb-init v%s\n"
        "Usage: %s [option] command [[arg] ...]\n"
        "\n"
        "dumb-init is a simple process supervisor that forwards signals to children.\n"
        "It is designed to run as PID1 in minimal container environments.\n"
        "\n"
        "Optional arguments:\n"
        "   -c, --single-child   Run in single-child mode.\n"
        "                        In this mode, signals are only proxied to the\n"
        "                        direct child and not any of its descendants.\n"
        "   -r, --rewrite s:r    Rewrite received signal s to new signal r before proxying.\n"
        "                        To ignore (not proxy) a signal, rewrite it to 0.\n"
        "                        This option can be specified multiple times.\n"
        "   -v, --verbose        Print debugging information to stderr.\n"
        "   -h, --help           Print this help message and exit.\n"
        "   -V, --version        Print the current version and exit.\n"
        "\n"
        "Full help is available online at https://github.com/Yelp/dumb-init\n",
        kDumbInitVersion, argv0.c_str());
}

}  // namespace

EnvLookup process_environment() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    };
}

std::optional<CompatMode> compat_mode_for_program(std::string_view argv0) {
    std::string name = basename_of(argv0);
    if (name == "tini" || name == "docker-init") return CompatMode::Tini;
    if (name == "dumb-init") return CompatMode::DumbInit;
    return std::nullopt;
}

std::string tini_log_level(int verbosity) {
    if (verbosity <= 0) return "error";
    if (verbosity == 1) return "warn";
    if (verbosity == 2) return "info";
    if (verbosity == 3) return "debug";
    return "trace";
}

namespace {

// What tini's flags and environment decide beyond the Options they set directly.
struct TiniFlags {
    bool subreaper = false, group = false;
    int verbosity = 1;
};

// One flag of tini's getopt loop. nullopt: go on; else the parse ends there (help, license, a
// bad value or an unknown flag).
std::optional<ParsedCommandLine> take_tini_flag(int c, Options& o, TiniFlags& f, Argv& argv,
                                                const std::string& program, CompatOutput io) {
    switch (c) {
        case 'h':
            print_tini_usage(io.out, program);
            return ParsedCommandLine{std::nullopt, 0};
        case 's':
            f.subreaper = true;
            return std::nullopt;
        case 'p': {
            auto sig = tini_signal(optarg);
            if (!sig) {
                tini_fatal(io.err, "Not a valid option for -p: " + std::string(optarg));
                return ParsedCommandLine{std::nullopt, 1};
            }
            o.self_pdeathsig = *sig;
            return std::nullopt;
        }
        case 'v':
            ++f.verbosity;
            return std::nullopt;
        case 'w':
            o.warn_on_reap = true;
            return std::nullopt;
        case 'g':
            f.group = true;
            return std::nullopt;
        case 'e': {
            auto code = tini_exit_code(optarg);
            if (!code) {
                tini_fatal(io.err, "Not a valid option for -e: " + std::string(optarg));
                return ParsedCommandLine{std::nullopt, 1};
            }
            o.success_exits.insert(*code);
            return std::nullopt;
        }
        case 'l':
            std::fprintf(io.out,
                         "lastcall %s in tini compatibility mode. It contains no code from "
                         "tini, so tini's MIT license does not apply to it; lastcall's own "
                         "terms come with its distribution.\n",
                         LASTCALL_VERSION);
            return ParsedCommandLine{std::nullopt, 0};
        default:
            print_getopt_error(io.err, c, argv.argv(), nullptr);
            print_tini_usage(io.err, program);
            return ParsedCommandLine{std::nullopt, 1};
    }
}

// As in tini, the environment is read after the flags; TINI_VERBOSITY replaces any -v count.
void read_tini_environment(const EnvLookup& env, TiniFlags& f) {
    if (env("TINI_SUBREAPER")) f.subreaper = true;
    if (env("TINI_KILL_PROCESS_GROUP")) f.group = true;
    if (auto v = env("TINI_VERBOSITY")) f.verbosity = std::atoi(v->c_str());
    // tini keeps it unsigned: a negative value is a huge one, and shows everything.
    if (f.verbosity < 0) f.verbosity = INT_MAX;
}

// tini's way of running its child, as lastcall's options.
void apply_tini_flags(const TiniFlags& f, Options& o) {
    o.forward_to = o.kill_scope = f.group ? Scope::Group : Scope::Child;
    // tini exits as soon as its child has; as PID 1 that makes the kernel kill every other
    // process of the container at once. lastcall ends what the child left behind the same way,
    // without a grace: SIGTERM, then SIGKILL right away, then it exits.
    o.grace = std::chrono::milliseconds{0};
    o.log_level = tini_log_level(f.verbosity);
    // lastcall's own lines: its warnings and errors as tini prints its own; its debug lines only
    // one -v beyond tini's most verbose (-vvvv).
    o.own_log_level = f.verbosity <= 0 ? "error" : f.verbosity >= 5 ? "debug" : "warn";
    o.warn_implicit_subreaper = !f.subreaper;
}

}  // namespace

ParsedCommandLine parse_tini(const std::vector<std::string>& args, const EnvLookup& env,
                             CompatOutput io) {
    const std::string program = args.empty() ? "tini" : basename_of(args[0]);
    // tini answers --version only when it is the sole argument; anywhere else getopt rejects it.
    if (args.size() == 2 && args[1] == "--version") {
        std::fprintf(io.out, "tini version %s\n", kTiniVersion);
        return {std::nullopt, 0};
    }
    Options o;
    o.compat = CompatMode::Tini;
    o.forward_termination = true;
    o.restore_inherited_signals = true;
    // tini puts the child in a new group of its own session (no setsid) and signals only it.
    o.new_session = false;
    TiniFlags flags;

    Argv argv(args);
    reset_getopt();
    // No '+': tini's getopt permutes, so options after PROGRAM are tini's unless "--" ends them.
    int c;
    while ((c = ::getopt(argv.argc(), argv.argv(), ":hsp:vwgle:")) != -1)
        if (auto end = take_tini_flag(c, o, flags, argv, program, io)) return std::move(*end);
    read_tini_environment(env, flags);

    o.command = argv.from(optind);
    if (o.command.empty()) {
        print_tini_usage(io.err, program);
        return {std::nullopt, 1};
    }
    apply_tini_flags(flags, o);
    // tini's exec failure: 127 for ENOENT, 126 for EACCES, 1 otherwise (set in the supervisor).
    return {std::move(o), 0};
}

namespace {

// What dumb-init's flags and environment decide beyond the Options they set directly.
struct DumbInitFlags {
    bool setsid = true, debug = false;
};

const option kDumbInitLong[] = {
    {"help", no_argument, nullptr, 'h'},          {"single-child", no_argument, nullptr, 'c'},
    {"rewrite", required_argument, nullptr, 'r'}, {"verbose", no_argument, nullptr, 'v'},
    {"version", no_argument, nullptr, 'V'},       {nullptr, 0, nullptr, 0},
};

// One flag of dumb-init's getopt loop. nullopt: go on; else the parse ends there.
std::optional<ParsedCommandLine> take_dumb_init_flag(int c, Options& o, DumbInitFlags& f,
                                                     Argv& argv, const std::string& argv0,
                                                     CompatOutput io) {
    switch (c) {
        case 'h':
            print_dumb_init_help(io.err, argv0);
            return ParsedCommandLine{std::nullopt, 0};
        case 'v':
            f.debug = true;
            return std::nullopt;
        case 'V':
            std::fprintf(io.err, "dumb-init v%s\n", kDumbInitVersion);
            return ParsedCommandLine{std::nullopt, 0};
        case 'c':
            f.setsid = false;
            return std::nullopt;
        case 'r': {
            auto rw = dumb_init_rewrite(optarg);
            if (!rw) {
                std::fprintf(io.err,
                             "Usage: -r option takes <signum>:<signum>, where <signum> is "
                             "between 1 and %d.\n"
                             "This option can be specified multiple times.\n"
                             "Use --help for full usage.\n",
                             kDumbInitMaxSignal);
                return ParsedCommandLine{std::nullopt, 1};
            }
            o.rewrite[rw->first] = rw->second;
            return std::nullopt;
        }
        default:
            print_getopt_error(io.err, c, argv.argv(), kDumbInitLong);
            return ParsedCommandLine{std::nullopt, 1};
    }
}

// Only the exact value changes anything; unset and empty mean the default (as in dumb-init).
// dumb-init says so in debug mode, at once, before anything else it prints.
void read_dumb_init_environment(const EnvLookup& env, DumbInitFlags& f, CompatOutput io) {
    if (auto v = env("DUMB_INIT_DEBUG"); v && *v == "1") {
        f.debug = true;
        std::fprintf(io.err, "[dumb-init] Running in debug mode.\n");
    }
    if (auto v = env("DUMB_INIT_SETSID"); v && *v == "0") {
        f.setsid = false;
        if (f.debug) std::fprintf(io.err, "[dumb-init] Not running in setsid mode.\n");
    }
}

// dumb-init's way of running its child, as lastcall's options.
void apply_dumb_init_flags(const DumbInitFlags& f, Options& o) {
    // setsid mode: the child leads a new session and every signal goes to its whole group;
    // single-child mode: no setsid, and only the child is signalled.
    o.new_session = f.setsid;
    o.forward_to = o.kill_scope = f.setsid ? Scope::Group : Scope::Child;
    // In setsid mode the child's group is orphaned (its parent is in another session): the
    // kernel drops TSTP/TTIN/TTOU sent to it, so dumb-init sends SIGSTOP instead unless -r says
    // otherwise.
    if (f.setsid)
        for (int sig : {SIGTSTP, SIGTTOU, SIGTTIN}) o.rewrite.try_emplace(sig, SIGSTOP);
    // dumb-init sends SIGTERM through its rewrite table when the child exits: the stop signal
    // for what the child left behind is the rewritten one.
    if (auto it = o.rewrite.find(SIGTERM); it != o.rewrite.end() && it->second != 0)
        o.stop_signal = it->second;
    // dumb-init is silent unless asked; lastcall keeps its warnings (survivors).
    o.log_level = f.debug ? "debug" : "warn";
    o.own_log_level = "warn";
    // dumb-init's child exits 2 when the exec fails, whatever the reason.
    o.exec_failure_exit = 2;
}

}  // namespace

ParsedCommandLine parse_dumb_init(const std::vector<std::string>& args, const EnvLookup& env,
                                  CompatOutput io) {
    const std::string argv0 = args.empty() ? "dumb-init" : args[0];
    Options o;
    o.compat = CompatMode::DumbInit;
    o.forward_termination = true;
    DumbInitFlags flags;

    Argv argv(args);
    reset_getopt();
    // '+': dumb-init stops at the first word that is not an option ("dumb-init sh -c x").
    int c;
    while ((c = ::getopt_long(argv.argc(), argv.argv(), "+:hvVcr:", kDumbInitLong, nullptr)) != -1)
        if (auto end = take_dumb_init_flag(c, o, flags, argv, argv0, io)) return std::move(*end);
    o.command = argv.from(optind);
    if (o.command.empty()) {
        std::fprintf(io.err, "Usage: %s [option] program [args]\nTry %s --help for full usage.\n",
                     argv0.c_str(), argv0.c_str());
        return {std::nullopt, 1};
    }
    read_dumb_init_environment(env, flags, io);
    apply_dumb_init_flags(flags, o);
    return {std::move(o), 0};
}

std::optional<ParsedCommandLine> parse_compat_command_line(const std::vector<std::string>& args) {
    if (args.empty()) return std::nullopt;
    auto run = [](CompatMode mode, const std::vector<std::string>& a) {
        return mode == CompatMode::Tini ? parse_tini(a, process_environment())
                                        : parse_dumb_init(a, process_environment());
    };
    std::string name;
    std::size_t rest = 0;
    if (args.size() >= 2 && args[1] == "--compat") {
        if (args.size() < 3) {
            std::fprintf(stderr, "lastcall: --compat needs a value: tini or dumb-init\n");
            return ParsedCommandLine{std::nullopt, 2};
        }
        name = args[2];
        rest = 3;
    } else if (args.size() >= 2 && args[1].starts_with("--compat=")) {
        name = args[1].substr(std::strlen("--compat="));
        rest = 2;
    } else if (auto mode = compat_mode_for_program(args[0])) {
        return run(*mode, args);
    } else {
        return std::nullopt;
    }
    // An explicit --compat wins over the invocation name (`COPY lastcall /sbin/tini` with an
    // ENTRYPOINT that also says --compat tini): both spellings together are the same request.
    auto mode = compat_mode_for_program(name);
    if (!mode || name.find('/') != std::string::npos) {
        std::fprintf(stderr, "lastcall: --compat '%s': expected tini, docker-init or dumb-init\n",
                     name.c_str());
        return ParsedCommandLine{std::nullopt, 2};
    }
    // The rest of the line is parsed as that program's, with the name it was invoked as in its
    // messages when that is the same program (a symlink), else with the --compat name.
    std::string argv0 = compat_mode_for_program(args[0]) == mode ? args[0] : name;
    std::vector<std::string> compat_args{argv0};
    compat_args.insert(compat_args.end(), args.begin() + static_cast<long>(rest), args.end());
    return run(*mode, compat_args);
}

}  // namespace lastcall
