#include "lastcall/compat/compat.hpp"

#include <getopt.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lastcall/core/signals.hpp"

namespace lastcall {

namespace {

// What `tini --version` and `dumb-init --version` claim to be. docker reads the tini line in
// `docker info` ("tini version X - ...") and refuses an init whose answer it cannot parse.
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
    opterr = 0;  // errors are reported here, as one line naming the problem
}

// The text for a '?' or ':' answer from getopt.
std::string getopt_error(int answer, char** argv) {
    const char* word = optind > 0 ? argv[optind - 1] : "";
    bool long_form = std::strncmp(word, "--", 2) == 0;
    if (answer == ':') {
        if (long_form) return "option '" + std::string(word) + "' requires an argument";
        return "option requires an argument -- '" + std::string(1, static_cast<char>(optopt)) + "'";
    }
    if (optopt == 0 || long_form) return "unrecognized option '" + std::string(word) + "'";
    return "invalid option -- '" + std::string(1, static_cast<char>(optopt)) + "'";
}

ParsedCommandLine usage_error(std::FILE* err, const std::string& program, const std::string& what,
                              const char* hint) {
    std::fprintf(err, "%s: %s (%s)\n", program.c_str(), what.c_str(), hint);
    return {std::nullopt, 1};
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
    long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 255) return std::nullopt;
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

void print_tini_usage(std::FILE* out, const std::string& program) {
    std::fprintf(
        out,
        "%s (tini version %s - lastcall %s)\n"
        "Usage: %s [OPTIONS] PROGRAM -- [ARGS] | --version\n"
        "\n"
        "Execute a program under the supervision of lastcall, in tini compatibility mode.\n"
        "\n"
        "Command line options:\n"
        "\n"
        "  --version: Show version and exit.\n"
        "  -h: Show this help message and exit.\n"
        "  -s: Register as a process subreaper (lastcall always does when not PID 1; -s only\n"
        "      silences the warning about it).\n"
        "  -p SIGNAL: Trigger SIGNAL when parent dies, e.g. \"-p SIGKILL\".\n"
        "  -v: Generate more verbose output. Repeat up to 3 times.\n"
        "  -w: Print a warning when processes are getting reaped.\n"
        "  -g: Send signals to the child's process group.\n"
        "  -e EXIT_CODE: Remap EXIT_CODE (from 0 to 255) to 0.\n"
        "  -l: Show license and exit.\n"
        "\n"
        "Environment variables:\n"
        "\n"
        "  TINI_SUBREAPER: Register as a process subreaper.\n"
        "  TINI_VERBOSITY: Set the verbosity level (default: 1).\n"
        "  TINI_KILL_PROCESS_GROUP: Send signals to the child's process group.\n"
        "\n"
        "Beyond tini: what is left of the tree when the child exits is signalled too, SIGKILLed\n"
        "after 8 s, and every descendant is reaped before exit. See `lastcall --help`.\n",
        program.c_str(), kTiniVersion, LASTCALL_VERSION, program.c_str());
}

void print_dumb_init_help(std::FILE* out, const std::string& program) {
    std::fprintf(
        out,
        "dumb-init v%s (lastcall %s)\n"
        "Usage: %s [option] command [[arg] ...]\n"
        "\n"
        "lastcall in dumb-init compatibility mode: a process supervisor that forwards signals\n"
        "to children, designed to run as PID 1 in minimal container environments.\n"
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
        "Environment: DUMB_INIT_SETSID=0 (no setsid, signals to the child only),\n"
        "DUMB_INIT_DEBUG=1 (as -v). See `lastcall --help` for lastcall's own options.\n",
        kDumbInitVersion, LASTCALL_VERSION, program.c_str());
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

ParsedCommandLine parse_tini(const std::vector<std::string>& args, const EnvLookup& env,
                             CompatOutput io) {
    const std::string program = args.empty() ? "tini" : basename_of(args[0]);
    constexpr const char* kHint = "see tini -h";
    // tini answers --version only when it is the sole argument; anywhere else getopt rejects it.
    if (args.size() == 2 && args[1] == "--version") {
        std::fprintf(io.out, "tini version %s - lastcall %s\n", kTiniVersion, LASTCALL_VERSION);
        return {std::nullopt, 0};
    }
    Options o;
    // tini puts the child in a new group of its own session (no setsid) and signals only it.
    o.new_session = false;
    bool subreaper = false, group = false;
    int verbosity = 1;

    Argv argv(args);
    reset_getopt();
    // No '+': tini's getopt permutes, so options after PROGRAM are tini's unless "--" ends them.
    int c;
    while ((c = ::getopt(argv.argc(), argv.argv(), ":hsp:vwgle:")) != -1) {
        switch (c) {
            case 'h':
                print_tini_usage(io.out, program);
                return {std::nullopt, 0};
            case 's':
                subreaper = true;
                break;
            case 'p': {
                auto sig = tini_signal(optarg);
                if (!sig)
                    return usage_error(io.err, program,
                                       "not a valid signal for -p: '" + std::string(optarg) +
                                           "' (a name like SIGKILL)",
                                       kHint);
                o.pdeathsig = *sig;
                break;
            }
            case 'v':
                ++verbosity;
                break;
            case 'w':
                o.warn_on_reap = true;
                break;
            case 'g':
                group = true;
                break;
            case 'e': {
                auto code = tini_exit_code(optarg);
                if (!code)
                    return usage_error(
                        io.err, program,
                        "not a valid exit code for -e: '" + std::string(optarg) + "' (0 to 255)",
                        kHint);
                o.success_exits.insert(*code);
                break;
            }
            case 'l':
                std::fprintf(io.out,
                             "lastcall %s in tini compatibility mode. It contains no code from "
                             "tini, so tini's MIT license does not apply to it; lastcall's own "
                             "terms come with its distribution.\n",
                             LASTCALL_VERSION);
                return {std::nullopt, 0};
            default:
                return usage_error(io.err, program, getopt_error(c, argv.argv()), kHint);
        }
    }
    // As in tini, the environment is read after the flags; TINI_VERBOSITY replaces any -v count.
    if (env("TINI_SUBREAPER")) subreaper = true;
    if (env("TINI_KILL_PROCESS_GROUP")) group = true;
    if (auto v = env("TINI_VERBOSITY")) verbosity = std::atoi(v->c_str());

    o.command = argv.from(optind);
    if (o.command.empty()) return usage_error(io.err, program, "no program given", kHint);
    o.forward_to = o.kill_scope = group ? Scope::Group : Scope::Child;
    o.log_level = tini_log_level(verbosity);
    o.warn_implicit_subreaper = !subreaper;
    return {std::move(o), 0};
}

ParsedCommandLine parse_dumb_init(const std::vector<std::string>& args, const EnvLookup& env,
                                  CompatOutput io) {
    const std::string program = args.empty() ? "dumb-init" : basename_of(args[0]);
    constexpr const char* kHint = "see dumb-init --help";
    static const option kLong[] = {
        {"help", no_argument, nullptr, 'h'},          {"single-child", no_argument, nullptr, 'c'},
        {"rewrite", required_argument, nullptr, 'r'}, {"verbose", no_argument, nullptr, 'v'},
        {"version", no_argument, nullptr, 'V'},       {nullptr, 0, nullptr, 0},
    };
    Options o;
    bool setsid = true, debug = false;

    Argv argv(args);
    reset_getopt();
    // '+': dumb-init stops at the first word that is not an option ("dumb-init sh -c x").
    int c;
    while ((c = ::getopt_long(argv.argc(), argv.argv(), "+:hvVcr:", kLong, nullptr)) != -1) {
        switch (c) {
            case 'h':
                print_dumb_init_help(io.err, program);
                return {std::nullopt, 0};
            case 'v':
                debug = true;
                break;
            case 'V':
                std::fprintf(io.err, "dumb-init v%s (lastcall %s)\n", kDumbInitVersion,
                             LASTCALL_VERSION);
                return {std::nullopt, 0};
            case 'c':
                setsid = false;
                break;
            case 'r': {
                auto rw = dumb_init_rewrite(optarg);
                if (!rw)
                    return usage_error(io.err, program,
                                       "-r option takes <signum>:<signum>, where <signum> is "
                                       "between 1 and 31 (0 as the target drops), not '" +
                                           std::string(optarg) + "'",
                                       kHint);
                o.rewrite[rw->first] = rw->second;
                break;
            }
            default:
                return usage_error(io.err, program, getopt_error(c, argv.argv()), kHint);
        }
    }
    o.command = argv.from(optind);
    if (o.command.empty()) return usage_error(io.err, program, "no program given", kHint);
    if (auto v = env("DUMB_INIT_DEBUG"); v && *v == "1") debug = true;
    if (auto v = env("DUMB_INIT_SETSID"); v && *v == "0") setsid = false;

    // setsid mode: the child leads a new session and every signal goes to its whole group;
    // single-child mode: no setsid, and only the child is signalled.
    o.new_session = setsid;
    o.forward_to = o.kill_scope = setsid ? Scope::Group : Scope::Child;
    // dumb-init is silent unless asked; lastcall keeps its warnings (escalation, survivors).
    o.log_level = debug ? "debug" : "warn";
    // dumb-init's child exits 2 when the exec fails, whatever the reason.
    o.exec_failure_exit = 2;
    return {std::move(o), 0};
}

std::optional<ParsedCommandLine> parse_compat_command_line(const std::vector<std::string>& args) {
    if (args.empty()) return std::nullopt;
    auto run = [](CompatMode mode, const std::vector<std::string>& a) {
        return mode == CompatMode::Tini ? parse_tini(a, process_environment())
                                        : parse_dumb_init(a, process_environment());
    };
    if (auto mode = compat_mode_for_program(args[0])) return run(*mode, args);
    if (args.size() < 2) return std::nullopt;
    std::string name;
    std::size_t rest = 0;
    if (args[1] == "--compat") {
        if (args.size() < 3) {
            std::fprintf(stderr, "lastcall: --compat needs a value: tini or dumb-init\n");
            return ParsedCommandLine{std::nullopt, 2};
        }
        name = args[2];
        rest = 3;
    } else if (args[1].starts_with("--compat=")) {
        name = args[1].substr(std::strlen("--compat="));
        rest = 2;
    } else {
        return std::nullopt;
    }
    std::optional<CompatMode> mode;
    if (name == "tini" || name == "docker-init") mode = CompatMode::Tini;
    if (name == "dumb-init") mode = CompatMode::DumbInit;
    if (!mode) {
        std::fprintf(stderr, "lastcall: --compat '%s': expected tini or dumb-init\n", name.c_str());
        return ParsedCommandLine{std::nullopt, 2};
    }
    // The rest of the line is parsed as that program's, with its name in messages.
    std::vector<std::string> compat_args{name};
    compat_args.insert(compat_args.end(), args.begin() + static_cast<long>(rest), args.end());
    return run(*mode, compat_args);
}

}  // namespace lastcall
