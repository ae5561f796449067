// SPDX-License-Identifier: Apache-2.0
#include "lastcall/cli/cli.hpp"
#include "lastcall/shutdown/grace.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include <unistd.h>

#include "lastcall/cli/cli11_app.hpp"
#include "lastcall/cli/compat.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/jobs/ledger.hpp"

namespace lastcall {

std::string_view to_string(Scope s) {
    switch (s) {
        case Scope::Child:
            return "child";
        case Scope::Group:
            return "group";
        case Scope::Tree:
            return "tree";
    }
    return "?";
}

namespace {

// Which command line parse_native reads: lastcall's own, the options in front of a --compat
// (no command expected), or the options `lastcall up` shares with lastcall (no command either).
enum class NativeRole { Main, CompatPrefix, Up };

// One line naming the option, then where to read more: exit code 2.
int usage_error(const std::string& message, NativeRole role = NativeRole::Main) {
    const char* who = role == NativeRole::Up ? "lastcall up" : "lastcall";
    std::fprintf(stderr, "%s: %s (see %s --help)\n", who, message.c_str(), who);
    return 2;
}

Scope parse_scope(const std::string& s) {
    if (s == "child") return Scope::Child;
    if (s == "group") return Scope::Group;
    return Scope::Tree;
}

// Index of "--" or of the first word that is neither an option nor an option's value;
// args.size() when there is none.
std::size_t find_command_start(const CLI::App& app, const std::vector<std::string>& args) {
    for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--" || a.empty() || a[0] != '-' || a == "-") return i;
        if (a.find('=') != std::string::npos) continue;  // --grace=5s
        const CLI::Option* opt = app.get_option_no_throw(a);
        if (opt && opt->get_type_size_max() > 0 && opt->get_items_expected_min() > 0) ++i;
    }
    return args.size();
}

// Index of a `--compat`/`--compat=NAME` word among the leading native options (0: none). With
// strict (invoked as a peer), every word before it must be a known native option, so that a
// peer's own flags are never mistaken for lastcall's.
std::size_t find_compat_flag(const CLI::App& app, const std::vector<std::string>& args,
                             bool strict) {
    for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--compat" || a.starts_with("--compat=")) return i;
        if (a == "--" || a.empty() || a[0] != '-' || a == "-") return 0;
        std::string name = a.substr(0, a.find('='));
        const CLI::Option* opt = app.get_option_no_throw(name);
        if (!opt) {
            if (strict) return 0;
            continue;
        }
        if (a.find('=') != std::string::npos) continue;  // --grace=5s
        if (opt->get_type_size_max() > 0 && opt->get_items_expected_min() > 0) ++i;
    }
    return 0;
}

// Whether a `--compat`/`--compat=NAME` word comes before the "--" that ends the options:
// find_compat_flag can find one only then.
bool mentions_compat_flag(const std::vector<std::string>& args) {
    for (std::size_t i = 1; i < args.size() && !ends_options(args, i); ++i)
        if (args[i] == "--compat" || args[i].starts_with("--compat=")) return true;
    return false;
}

ParsedCommandLine parse_native(const std::vector<std::string>& args, std::set<std::string>* given,
                               NativeRole role);
ParsedCommandLine with_native_prefix(const std::vector<std::string>& args, std::size_t at);

}  // namespace

// The two lines that need no parser of lastcall's own are answered here, in a small frame:
// parse_native's holds a CLI::App, and entering it cost a bare start a page of stack (a fault).
ParsedCommandLine parse_command_line(const std::vector<std::string>& args) {
    // The common case, `lastcall -- CMD...` or `lastcall CMD...` without a single option, has
    // nothing to parse: building the CLI11 parser alone was most of lastcall's own start-up work
    // (bench/results/2026-12-03.md). Options' defaults are the documented ones.
    // Not under a peer's name (`tini -- app` is tini's command line, not lastcall's).
    bool dashdash = args.size() >= 3 && args[1] == "--";
    bool as_peer = !args.empty() && compat_mode_for_program(args[0]).has_value();
    if (!as_peer && (dashdash || (args.size() >= 2 && !args[1].empty() && args[1][0] != '-'))) {
        Options o;
        o.command.assign(args.begin() + (dashdash ? 2 : 1), args.end());
        return {std::move(o), 0};
    }
    // The drop-in, `docker-init -- app` (docker run --init) or `tini -s -- app`: the peer's
    // getopt parse alone. lastcall's parser is only needed to find a --compat after lastcall's
    // own options, and with none of those words on the line there is none to find; building it
    // was most of what a tini-named start cost over a bare one, in time and in peak RSS
    // (bench/results/2026-12-06-dropin.md).
    if (as_peer && !mentions_compat_flag(args))
        if (auto compat = parse_compat_command_line(args)) return std::move(*compat);
    return parse_native(args, nullptr, NativeRole::Main);
}

namespace {

// The text of the options that Options keeps in another form (a duration, a signal, a scope),
// as the line gives it; defaults are the documented ones.
struct NativeValues {
    std::string grace = kDefaultGraceText, drain_delay = "0", coalesce = "100ms", stop_signal,
                pdeathsig;
    std::string kill_scope = "tree", forward_to = "group", tracker = "auto", log_format = "text";
    std::string ready_on = "spawn";
    std::vector<std::string> rewrites;
    std::vector<int> success_exits;
    bool version = false;
    std::string compat;
    GlobalOptions global;
};

// The options of the shutdown: its budget, its signal, readiness and the pre-stop hook.
void add_stop_options(CLI::App& app, Options& o, NativeValues& v, const OptionsOnLine& on_line) {
    if (on_line("--grace"))
        app.add_option("--grace", v.grace,
                       "Budget from the first stop request to SIGKILL (default 8s)");
    if (on_line("--drain-delay"))
        app.add_option("--drain-delay", v.drain_delay,
                       "Wait this long after readiness goes off before signalling (default 0)");
    if (on_line("--coalesce"))
        app.add_option("--coalesce", v.coalesce,
                       "Termination signals closer than this are one burst (default 100ms)");
    if (on_line("--stop-signal"))
        app.add_option(
            "--stop-signal", v.stop_signal,
            "Signal the tree receives at shutdown (default: the one received, TERM on exit)");
    if (on_line("--ready-file"))
        app.add_option("--ready-file", o.ready_file,
                       "Created when the child started, removed first thing at shutdown");
    if (on_line("--ready-on"))
        app.add_option("--ready-on", v.ready_on,
                       "When systemd hears READY=1: spawn (the child started) or notify (the child "
                       "sent its own READY=1 to the socket in its NOTIFY_SOCKET)")
            ->check(CLI::IsMember({"spawn", "notify"}));
    if (on_line("--pre-stop"))
        app.add_option("--pre-stop", o.pre_stop, "Shell command run once at the start of shutdown");
}

// Services, jobs, their ledger, the report and the metrics.
void add_config_options(CLI::App& app, Options& o, const OptionsOnLine& on_line) {
    if (on_line("--stay"))
        app.add_flag("--stay", o.stay,
                     "Without a command or jobs, keep running once every service has ended "
                     "(default: exit, 1 if one failed)");
    if (on_line("--config"))
        app.add_option("--config", o.config_path,
                       "TOML file with [services.*] (and [jobs.*]); the command becomes optional");
    if (on_line("--crontab"))
        app.add_option(
            "--crontab", o.crontab_path,
            "Crontab file whose lines run as scheduled jobs; the command becomes optional");
    if (on_line("--state-dir"))
        app.add_option("--state-dir", o.state_dir,
                       "Directory of the run ledger (default: the config's state_dir, else "
                       "$STATE_DIRECTORY, else one per config file under /var/lib/lastcall, or "
                       "$XDG_STATE_HOME/lastcall when not root)");
    if (on_line("--ledger"))
        app.add_option(
            "--ledger", o.ledger_url,
            "A postgresql:// URL: the run ledger shared by every replica of a deployment, "
            "each fire time run once across them (default: SQLite in the state dir)");
    if (on_line("--replica-id"))
        app.add_option(
            "--replica-id", o.replica_id,
            "This replica's name in a shared ledger (default: the host name, a pod's name)");
    if (on_line("--report"))
        app.add_option("--report", o.report_path,
                       "Write the JSON shutdown report here (atomically)");
    if (on_line("--metrics-file"))
        app.add_option("--metrics-file", o.metrics_path,
                       "Write metrics here in the Prometheus text format (atomically; at start, "
                       "every 15s, and at exit), for node_exporter's textfile collector");
    if (on_line("--metrics-listen"))
        app.add_option("--metrics-listen", o.metrics_listen,
                       "Serve the same metrics at http://ADDR/metrics (HOST:PORT, :PORT for every "
                       "interface, [IPV6]:PORT); needs libmicrohttpd12");
}

// Who gets signals, how the tree is tracked, the child's credentials, and the global options.
void add_process_options(CLI::App& app, Options& o, NativeValues& v, const OptionsOnLine& on_line) {
    if (on_line("--kill-scope"))
        app.add_option("--kill-scope", v.kill_scope, "Who receives the stop signal")
            ->check(CLI::IsMember({"tree", "group", "child"}));
    if (on_line("--forward-to"))
        app.add_option("--forward-to", v.forward_to,
                       "Who receives forwarded signals (default group)")
            ->check(CLI::IsMember({"tree", "group", "child"}));
    if (on_line("--tracker"))
        app.add_option("--tracker", v.tracker, "How the tree is tracked (default auto)")
            ->check(CLI::IsMember({"auto", "cgroup", "proc"}));
    if (on_line("--rewrite"))
        app.add_option("--rewrite", v.rewrites,
                       "Rewrite a received signal, SIG:SIG (to 0 drops it)");
    if (on_line("--success-exit"))
        app.add_option("--success-exit", v.success_exits, "Report this child exit code as 0")
            ->check(CLI::Range(0, 255));
    if (on_line("--pdeathsig"))
        app.add_option("--pdeathsig", v.pdeathsig, "Signal the child gets if lastcall dies");
    if (on_line("--user")) app.add_option("--user", o.user, "Run the child as USER[:GROUP]");
    if (on_line("--no-new-privs"))
        app.add_flag("--no-new-privs", o.no_new_privs, "Set PR_SET_NO_NEW_PRIVS for the child");
    add_global_options(app, v.global, on_line);
    if (on_line("--version")) app.add_flag("--version", v.version, "Print the version and exit");
    if (on_line("--compat"))
        app.add_option("--compat", v.compat,
                       "tini, docker-init or dumb-init: parse the rest of the line as that program "
                       "does; lastcall's own options may come before it (a symlink named tini, "
                       "docker-init or dumb-init does the same)");
}

// `lastcall -v up`: global options before a subcommand's name. The subcommand gets them after its
// name, where it parses them (a program of that name runs as `lastcall -- up`).
ParsedCommandLine hoist_subcommand(const std::vector<std::string>& args, std::size_t split) {
    ParsedCommandLine hoisted;
    hoisted.subcommand = {args[0], args[split]};
    hoisted.subcommand.insert(hoisted.subcommand.end(), args.begin() + static_cast<long>(split) + 1,
                              args.end());
    hoisted.subcommand.insert(hoisted.subcommand.end(), args.begin() + 1,
                              args.begin() + static_cast<long>(split));
    return hoisted;
}

// The durations and signals, checked; 0 when they are fine, else the usage error's exit code.
int apply_durations(const NativeValues& v, Options& o, NativeRole role) {
    auto dur = [&](const std::string& text, const char* name, std::chrono::milliseconds& out) {
        auto d = parse_duration(text);
        if (!d) return usage_error(std::string(name) + ": " + d.error().message, role), false;
        out = *d;
        return true;
    };
    if (!dur(v.grace, "--grace", o.grace) || !dur(v.drain_delay, "--drain-delay", o.drain_delay) ||
        !dur(v.coalesce, "--coalesce", o.coalesce))
        return 2;
    if (o.drain_delay > o.grace)
        return usage_error("--drain-delay " + format_duration(o.drain_delay) +
                               " is longer than --grace " + format_duration(o.grace) +
                               ": the drain delay is spent inside the grace budget",
                           role);
    return 0;
}

int apply_signals(const NativeValues& v, Options& o, NativeRole role) {
    if (!v.stop_signal.empty()) {
        auto s = parse_signal(v.stop_signal);
        if (!s) return usage_error("--stop-signal: " + s.error().message, role);
        o.stop_signal = *s;
    }
    if (!v.pdeathsig.empty()) {
        auto s = parse_signal(v.pdeathsig);
        if (!s) return usage_error("--pdeathsig: " + s.error().message, role);
        o.pdeathsig = *s;
    }
    for (const auto& rw : v.rewrites) {
        auto colon = rw.find(':');
        if (colon == std::string::npos)
            return usage_error("--rewrite '" + rw + "': expected FROM:TO", role);
        auto from = parse_signal(rw.substr(0, colon));
        auto to = parse_signal(rw.substr(colon + 1), /*allow_zero=*/true);
        if (!from) return usage_error("--rewrite: " + from.error().message, role);
        if (!to) return usage_error("--rewrite: " + to.error().message, role);
        o.rewrite[*from] = *to;
    }
    return 0;
}

// The parsed texts into Options; 0, or the usage error's exit code.
int apply_native_values(const CLI::App& app, const NativeValues& v, Options& o, NativeRole role) {
    if (int code = apply_durations(v, o, role)) return code;
    if (int code = apply_signals(v, o, role)) return code;
    // Resolved here, before anything starts: an id out of range, an empty or unknown name must
    // stop lastcall, never leave the command running as root.
    if (const CLI::Option* user = app.get_option_no_throw("--user"); user && user->count() > 0) {
        auto creds = lookup_credentials(o.user);
        if (!creds) return usage_error("--user '" + o.user + "': " + creds.error().message, role);
        o.credentials = std::move(*creds);
    }
    o.success_exits.insert(v.success_exits.begin(), v.success_exits.end());
    o.kill_scope = parse_scope(v.kill_scope);
    o.forward_to = parse_scope(v.forward_to);
    o.tracker = v.tracker == "cgroup" ? TrackerKind::Cgroup
                : v.tracker == "proc" ? TrackerKind::Proc
                                      : TrackerKind::Auto;
    o.log_format = v.log_format == "json" ? LogFormat::Json : LogFormat::Text;
    o.ready_on = v.ready_on == "notify" ? ReadyOn::Notify : ReadyOn::Spawn;
    return 0;
}

// After the parse: a command where one is needed (none before a --compat or after up), and
// (with given) the names of the options given. 0, or the exit code of the usage error said.
int check_native_command(const CLI::App& app, const Options& o, std::set<std::string>* given,
                         NativeRole role) {
    if (role == NativeRole::CompatPrefix && !o.command.empty())
        return usage_error("unexpected '" + o.command.front() + "' before --compat", role);
    if (role == NativeRole::Up && !o.command.empty()) {
        // `lastcall up web` is foreman's `foreman start web`: the answer names lastcall's way.
        std::string names;
        for (const auto& word : o.command)
            if (!word.starts_with("-")) names += (names.empty() ? "" : ",") + word;
        std::fprintf(stderr,
                     "lastcall up: '%s' is not an option; to run only some processes: "
                     "lastcall up --only %s\n",
                     o.command.front().c_str(), names.c_str());
        return 2;
    }
    if (given)
        for (const CLI::Option* opt : app.get_options())
            if (opt->count() > 0) given->insert(opt->get_name());
    if (role == NativeRole::Main && o.command.empty() && o.config_path.empty() &&
        o.crontab_path.empty())
        return usage_error("no command given", role);
    return 0;
}

// The native command line, or only lastcall's own options (in front of a --compat, or after
// `lastcall up`): then no command is expected, and the names of the options given are collected
// in *given.
[[gnu::noinline]] ParsedCommandLine parse_native(const std::vector<std::string>& args,
                                                 std::set<std::string>* given, NativeRole role) {
    Options o;
    bool as_peer = !args.empty() && compat_mode_for_program(args[0]).has_value();
    CLI::App app{
        "lastcall: an init and process supervisor that shuts a whole process tree down within a "
        "budget and records how it ended.",
        "lastcall"};
    set_usage(app,
              "Usage: lastcall [OPTIONS] [--] COMMAND [ARGS...]\n"
              "       lastcall [OPTIONS] SUBCOMMAND [ARGS...]");
    app.footer(kSubcommandHelp);
    NativeValues v;
    // Only the options the line names are built (OptionsOnLine says why); --help builds them all.
    OptionsOnLine on_line(args);
    add_stop_options(app, o, v, on_line);
    add_config_options(app, o, on_line);
    add_process_options(app, o, v, on_line);

    if (role == NativeRole::Main) {
        // Invoked as tini, docker-init or dumb-init, or with --compat: the peer's flag set, after
        // lastcall's own options if any precede --compat.
        if (std::size_t at = find_compat_flag(app, args, as_peer); at > 1)
            return with_native_prefix(args, at);
        if (auto compat = parse_compat_command_line(args)) return std::move(*compat);
    }
    // Options end at "--" or at the first word that is not an option, so "lastcall sh -c x" passes
    // -c to sh (getopt's "+" convention, as in tini and env).
    std::size_t split = find_command_start(app, args);
    if (role == NativeRole::Main && split > 1 && split < args.size() && is_subcommand(args[split]))
        return hoist_subcommand(args, split);
    std::vector<std::string> reversed(args.rend() - static_cast<long>(split), args.rend() - 1);
    if (split < args.size()) {
        o.command.assign(args.begin() + static_cast<long>(split), args.end());
        if (o.command.front() == "--") o.command.erase(o.command.begin());
    }
    try {
        app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::fputs(app.help().c_str(), stdout);
        return {std::nullopt, 0};
    } catch (const CLI::ParseError& e) {
        return {std::nullopt, usage_error(one_line(e.what()), role)};
    }
    if (!v.compat.empty())
        return {std::nullopt, usage_error("--compat must come after lastcall's own options and "
                                          "before the peer's",
                                          role)};
    if (v.version) {
        std::printf("lastcall %s\n", LASTCALL_VERSION);
        return {std::nullopt, 0};
    }
    o.log_level = v.global.level_or(o.log_level);
    if (!v.global.log_format.empty()) v.log_format = v.global.log_format;
    if (int code = check_native_command(app, o, given, role)) return {std::nullopt, code};
    if (int code = apply_native_values(app, v, o, role)) return {std::nullopt, code};
    return {std::move(o), 0};
}

// `lastcall [OPTIONS] --compat NAME PEER-ARGS`: the peer's parse, then lastcall's own options
// given in front override it. Asking for a drain feature (a grace, a drain delay, a pre-stop
// hook, a ready file, a stop signal, a coalescing window) turns lastcall's shutdown back on: a
// termination signal then starts it instead of being forwarded.
ParsedCommandLine with_native_prefix(const std::vector<std::string>& args, std::size_t at) {
    std::vector<std::string> native(args.begin(), args.begin() + static_cast<long>(at));
    std::vector<std::string> peer{args[0]};
    peer.insert(peer.end(), args.begin() + static_cast<long>(at), args.end());
    auto compat = parse_compat_command_line(peer);
    if (!compat || !compat->options) return compat ? std::move(*compat) : ParsedCommandLine{};
    std::set<std::string> given;
    auto mine = parse_native(native, &given, NativeRole::CompatPrefix);
    if (!mine.options) return mine;
    Options& o = *compat->options;
    const Options& n = *mine.options;
    auto has = [&](const char* name) { return given.count(name) > 0; };
    if (has("--grace")) o.grace = n.grace;
    if (has("--drain-delay")) o.drain_delay = n.drain_delay;
    if (has("--coalesce")) o.coalesce = n.coalesce;
    if (has("--stop-signal")) o.stop_signal = n.stop_signal;
    if (has("--ready-file")) o.ready_file = n.ready_file;
    if (has("--ready-on")) o.ready_on = n.ready_on;
    if (has("--pre-stop")) o.pre_stop = n.pre_stop;
    if (has("--config")) o.config_path = n.config_path;
    if (has("--stay")) o.stay = n.stay;
    if (has("--crontab")) o.crontab_path = n.crontab_path;
    if (has("--state-dir")) o.state_dir = n.state_dir;
    if (has("--ledger")) o.ledger_url = n.ledger_url;
    if (has("--replica-id")) o.replica_id = n.replica_id;
    if (has("--report")) o.report_path = n.report_path;
    if (has("--metrics-file")) o.metrics_path = n.metrics_path;
    if (has("--metrics-listen")) o.metrics_listen = n.metrics_listen;
    if (has("--kill-scope")) o.kill_scope = n.kill_scope;
    if (has("--forward-to")) o.forward_to = n.forward_to;
    if (has("--tracker")) o.tracker = n.tracker;
    for (auto [from, to] : n.rewrite) o.rewrite[from] = to;
    o.success_exits.insert(n.success_exits.begin(), n.success_exits.end());
    if (has("--pdeathsig")) o.pdeathsig = n.pdeathsig;
    if (has("--user")) {
        o.user = n.user;
        o.credentials =
            n.credentials;  // what the spawner uses: the name alone ran the child as root
    }
    if (has("--no-new-privs")) o.no_new_privs = n.no_new_privs;
    // lastcall's own level given explicitly: its own lines follow it (the peer's too, as before).
    if (has("--log-level") || has("--verbose")) o.log_level = o.own_log_level = n.log_level;
    if (has("--log-format")) o.log_format = n.log_format;
    for (const char* drain :
         {"--grace", "--drain-delay", "--pre-stop", "--ready-file", "--stop-signal", "--coalesce"})
        if (has(drain)) o.forward_termination = false;
    // A shutdown that lastcall runs itself has lastcall's budget unless told otherwise; so does
    // the stop of services and jobs, which the peer does not have (tini's budget of 0 SIGKILLed
    // every service at once when the command ended).
    bool own_units = has("--config") || has("--crontab");
    if ((!o.forward_termination || own_units) && !has("--grace")) o.grace = n.grace;
    return std::move(*compat);
}

// lastcall's own options that have no meaning in `lastcall up`, and why: each is refused by name
// (exit 2) instead of being accepted and ignored.
struct NotForUp {
    std::string_view option, why;
};
constexpr NotForUp kNotForUp[] = {
    {"--config",
     "lastcall up runs ./Procfile (-f FILE); a config's services and jobs run "
     "with lastcall --config FILE"},
    {"--crontab",
     "a Procfile has no scheduled jobs; crontab lines run with lastcall "
     "--crontab FILE"},
    {"--state-dir", "a Procfile has no scheduled jobs, so no run ledger"},
    {"--ledger", "a Procfile has no scheduled jobs, so no run ledger"},
    {"--replica-id", "a Procfile has no scheduled jobs, so no run ledger"},
    {"--stay", "lastcall up ends when a process ends, as foreman does"},
    {"--ready-on", "it is the main command's readiness, and lastcall up has no main command"},
    {"--kill-scope",
     "it chooses who of the main command's tree gets the stop signal, and "
     "lastcall up has no main command (each process's whole tree gets it)"},
    {"--forward-to",
     "it chooses who of the main command's tree gets forwarded signals, and "
     "lastcall up has no main command"},
    {"--pdeathsig", "it is the main command's, and lastcall up has no main command"},
    {"--compat", "tini, docker-init and dumb-init run one command, not a Procfile"},
};

// The first word before a "--" that names an option refused above, with its reason.
const NotForUp* refused_for_up(const std::vector<std::string>& words) {
    for (std::size_t i = 0; i < words.size() && words[i] != "--"; ++i) {
        std::string_view name = std::string_view(words[i]).substr(0, words[i].find('='));
        for (const auto& refused : kNotForUp)
            if (name == refused.option) return &refused;
    }
    return nullptr;
}

}  // namespace

ParsedUpCommandLine parse_up_command_line(const std::vector<std::string>& args) {
    UpOptions up;
    CLI::App app{
        "lastcall up: run the processes of ./Procfile side by side, with ./.env in their "
        "environment and each output line prefixed with its process name. Ctrl-C stops every "
        "process's whole tree; a second Ctrl-C kills them at once.",
        "lastcall up"};
    set_usage(app, "Usage: lastcall up [OPTIONS]");
    app.footer(
        "lastcall's own options that apply to a run go before or after up (lastcall --help): "
        "--grace, --drain-delay, --coalesce, --stop-signal, --pre-stop, --ready-file, --report, "
        "--metrics-file, --metrics-listen, --tracker, --user, --no-new-privs, --success-exit, "
        "--rewrite. Those about a main command, a config or the run ledger are refused by name.");
    app.add_option("-f,--procfile", up.procfile, "The Procfile (default ./Procfile)");
    app.add_option("-e,--env", up.env_file, "Environment file (default ./.env, if present)");
    app.add_option("--only", up.only, "Run only these processes (comma-separated)")->delimiter(',');
    app.add_option("--except", up.except, "Run every process but these (comma-separated)")
        ->delimiter(',');
    app.add_option("-p,--port", up.port,
                   "Base port: each process type gets PORT = base + 100 x its place in the "
                   "Procfile, as foreman assigns it (default: .env's PORT, the environment's, "
                   "else 5000)")
        ->check(CLI::Range(1, 65535));
    GlobalOptions global;
    add_global_options(app, global);
    // The words up does not know are lastcall's own options (--grace 5s, --metrics-listen :9100)
    // and words that are no option at all: parse_native reads them as lastcall reads them.
    app.allow_extras();
    if (auto code = parse_subcommand(app, args, "up")) return {std::nullopt, *code};
    std::vector<std::string> rest = app.remaining();
    if (const NotForUp* refused = refused_for_up(rest)) {
        std::fprintf(stderr, "lastcall up: %.*s does not apply to lastcall up: %.*s\n",
                     static_cast<int>(refused->option.size()), refused->option.data(),
                     static_cast<int>(refused->why.size()), refused->why.data());
        return {std::nullopt, 2};
    }
    rest.insert(rest.begin(), args[0]);
    ParsedCommandLine native = parse_native(rest, nullptr, NativeRole::Up);
    if (!native.options) return {std::nullopt, native.exit_code};
    up.options = std::move(*native.options);
    up.options.log_level = global.level_or(up.options.log_level);
    if (global.log_format == "json") up.options.log_format = LogFormat::Json;
    up.env_file_given = app.count("--env") > 0;
    if (!up.only.empty() && !up.except.empty()) {
        std::fprintf(stderr, "lastcall up: --only and --except exclude each other\n");
        return {std::nullopt, 2};
    }
    return {std::move(up), 0};
}

}  // namespace lastcall

namespace lastcall {

bool scrub_ledger_password(int argc, char** argv, std::string_view ledger_url) {
    if (ledger_url.empty()) return false;
    constexpr std::string_view kJoined = "--ledger=";
    bool scrubbed = false;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg(argv[i]);
        char* url = nullptr;
        if (arg == ledger_url)
            url = argv[i];
        else if (arg.starts_with(kJoined) && arg.substr(kJoined.size()) == ledger_url)
            url = argv[i] + kJoined.size();
        if (url && scrub_url_password(url)) scrubbed = true;
    }
    return scrubbed;
}

bool scrub_ledger_password(int argc, char** argv, const Options& options) {
    return scrub_ledger_password(argc - static_cast<int>(options.command.size()), argv,
                                 options.ledger_url);
}

std::string ledger_password_was_readable() {
    return "--ledger: the URL's password was readable by every process in lastcall's command "
           "line (/proc/" +
           std::to_string(::getpid()) +
           "/cmdline) until now; give it in PGPASSWORD or a PGPASSFILE instead";
}

bool is_subcommand(std::string_view word) {
    return std::find(kSubcommandNames.begin(), kSubcommandNames.end(), word) !=
           kSubcommandNames.end();
}

}  // namespace lastcall
