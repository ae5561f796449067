// SPDX-License-Identifier: Apache-2.0
// lastcall: run one command as PID 1 or as a subreaper, forward signals to its tree, drain and
// reap the whole tree within a budget, and record how it ended.
//
// main() is the table of contents: subcommands, command line, configuration, logging, the point
// of no return, the components, the run.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/cli/cli.hpp"
#include "lastcall/cli/compat.hpp"
#include "lastcall/cli/jobs_cli.hpp"
#include "lastcall/cli/report_cli.hpp"
#include "lastcall/cli/status_cli.hpp"
#include "lastcall/cli/up.hpp"
#include "lastcall/core/clock.hpp"
#include "lastcall/core/instance.hpp"
#include "lastcall/core/log.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "lastcall/metrics/metrics.hpp"
#include "lastcall/metrics/metrics_http.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/services/service_manager.hpp"
#include "lastcall/services/service_status.hpp"
#include "lastcall/shutdown/report.hpp"
#include "lastcall/supervisor/supervisor.hpp"
#include "lastcall/systemd/notifier.hpp"
#include "lastcall/systemd/socket_activation.hpp"

namespace {

using namespace lastcall;

// Whether the line is `lastcall up ...`: a supervised run, of the Procfile's processes.
// Invoked as tini, docker-init or dumb-init, `NAME up` runs a program called up.
bool is_up(const std::vector<std::string>& args) {
    return args.size() >= 2 && args[1] == "up" && !compat_mode_for_program(args[0]);
}

// `lastcall NAME ...` runs a read-only subcommand; anything else is the supervisor's own command
// line (a program named like a subcommand runs as `lastcall -- NAME`), or `lastcall up`.
std::optional<int> run_subcommand(const std::vector<std::string>& args, const sigset_t& handled) {
    struct Subcommand {
        std::string_view name;
        int (*run)(const std::vector<std::string>& args);  // null: up, which main() runs
    };
    static constexpr Subcommand kSubcommands[] = {
        {"up", nullptr},    {"status", run_status}, {"runs", run_runs},
        {"jobs", run_jobs}, {"report", run_report},
    };
    static_assert(std::size(kSubcommands) == kSubcommandNames.size(),
                  "every name in kSubcommandNames (cli.hpp) has its entry point here");
    // Invoked as tini, docker-init or dumb-init, `NAME up` runs a program called up.
    if (args.size() < 2 || compat_mode_for_program(args[0])) return std::nullopt;
    for (const auto& sub : kSubcommands) {
        if (args[1] != sub.name || !sub.run) continue;
        // The read-only subcommands keep the default dispositions: Ctrl-C ends them as any
        // command.
        ::sigprocmask(SIG_UNBLOCK, &handled, nullptr);
        return sub.run(args);
    }
    return std::nullopt;
}

// Who this lastcall is in the run ledger: the replica's name (--replica-id, else the host
// name: a pod's name in Kubernetes), and for its leases this process's own instance id.
LedgerIdentity ledger_identity(const Options& options, const JobsSetup& jobs) {
    LedgerIdentity id;
    id.replica = options.replica_id;
    if (id.replica.empty()) {
        char host[256] = {};
        id.replica = ::gethostname(host, sizeof host - 1) == 0 ? host : "localhost";
    }
    id.owner = id.replica + "/" + instance_id();
    if (!jobs.ledger_url.empty()) {
        id.lease_ms = jobs.lease.count();
        id.cluster = jobs.cluster ? *jobs.cluster : cluster_key_of(jobs.jobs);
        id.jobs = job_commands(jobs.jobs);
    }
    return id;
}

// What the config file (and --crontab) asks for beside the command. A bad [services.*] or
// [jobs.*] table ends the run before anything starts, like a usage error.
struct Configuration {
    std::vector<ServiceSpec> services;
    JobsSetup jobs;
};

Result<Configuration> load_configuration(const Options& options) {
    // Read once for both: a config from a pipe (`--config <(...)`) has one reader.
    std::string text;
    if (!options.config_path.empty()) {
        auto read = read_file(options.config_path);
        if (!read) return read.error();
        text = std::move(*read);
    }
    auto services = load_config_services(options.config_path, text);
    if (!services) return services.error();
    auto jobs = load_jobs(options, &text);
    if (!jobs) return jobs.error();
    // Every unit runs as its own `user`/`group`, else as --user: never as root by omission.
    for (auto& s : *services) s.user = unit_credentials(s.user, s.group, options.credentials);
    for (auto& j : jobs->jobs) j.user = unit_credentials(j.user, j.group, options.credentials);
    // Nothing to run would be a lastcall that waits forever for nothing, silently.
    if (options.command.empty() && services->empty() && jobs->jobs.empty())
        return Error{(options.config_path.empty() ? options.crontab_path : options.config_path) +
                     ": defines no service and no job, and no command was given"};
    return Configuration{std::move(*services), std::move(*jobs)};
}

// What the static binary cannot do goes to its dynamic twin (core/twin.hpp) as soon as the
// command line shows it, before the config and the crontab are read: the twin reads them again,
// and one that cannot be read twice goes to it unread. (A config's own `ledger` or `user` can
// only hand over once read.)
void hand_over_what_needs_the_twin(const Options& options) {
    if (!options.metrics_listen.empty()) twin::hand_over("--metrics-listen needs libmicrohttpd");
    if (!options.ledger_url.empty()) twin::hand_over(kPostgresLedgerNeedsLibpq);
    twin::hand_over_before_reading(options.config_path);
    twin::hand_over_before_reading(options.crontab_path);
}

// The parts that live beside the main child for the whole run.
struct Components {
    std::unique_ptr<SocketActivation> activation;
    std::unique_ptr<Notifier> notifier;
    std::unique_ptr<ServiceManager> services;
    std::unique_ptr<JobScheduler> scheduler;
    std::unique_ptr<MetricsFile> metrics;
    std::unique_ptr<MetricsServer> metrics_server;

    void attach_to(Supervisor& supervisor) {
        supervisor.add_component(activation.get());
        supervisor.add_component(notifier.get());
        // Before the services and the scheduler: its last write (at `finished`) reads the
        // ledger, which the scheduler closes in its own `finished`.
        if (metrics) supervisor.add_component(metrics.get());
        if (metrics_server) supervisor.add_component(metrics_server.get());
        if (!services->empty()) supervisor.add_component(services.get());
        if (scheduler) supervisor.add_component(scheduler.get());
    }
};

// `procfile`: the service manager's options of `lastcall up` (narrated output, its .env, the
// Procfile named in the status file); none: a config's services.
Result<Components> create_components(const Options& options, Configuration& config,
                                     const Clock& clock,
                                     std::unique_ptr<MetricsServer> metrics_server,
                                     std::optional<ServiceManagerOptions> procfile) {
    Components c;
    c.metrics_server = std::move(metrics_server);
    // Socket activation first: its fds must be checked before lastcall opens any of its own.
    auto activation = SocketActivation::from_environment();
    if (!activation) return activation.error();
    c.activation = std::move(*activation);
    auto notifier = Notifier::from_environment(options, clock);
    if (!notifier) return notifier.error();
    c.notifier = std::move(*notifier);
    ServiceManagerOptions service_options = procfile.value_or(ServiceManagerOptions{});
    // The services' and the job runs' lines, one writer and one column for both (the main
    // command's output is its own: never captured).
    auto output = std::make_shared<UnitOutput>(STDOUT_FILENO, UnitOutput::color_for(STDOUT_FILENO));
    service_options.output = output;
    service_options.state_path = status_path_for(instance_id());
    service_options.instance = instance_id();
    // A Procfile's processes are each main: the first to end ends the run, as with foreman.
    service_options.end_when_idle =
        !procfile && options.command.empty() && config.jobs.jobs.empty() && !options.stay;
    if (!options.config_path.empty())
        service_options.config_path = real_path(options.config_path).value_or(options.config_path);
    c.services = std::make_unique<ServiceManager>(std::move(config.services), service_options);
    // The run ledger opens before anything starts: a read-only or full state dir stops lastcall
    // here with the reason, instead of runs that go unrecorded.
    if (!config.jobs.jobs.empty()) {
        // Before any unit starts: PGPASSWORD and the like are this ledger's from now on.
        if (!config.jobs.ledger_url.empty()) Environment::withhold_ledger_credentials();
        auto ledger = Ledger::open({config.jobs.state_dir, config.jobs.ledger_url}, true,
                                   ledger_identity(options, config.jobs));
        if (!ledger) return Error{"run ledger: " + ledger.error().message};
        c.scheduler =
            std::make_unique<JobScheduler>(std::move(config.jobs.jobs), std::move(*ledger));
        if (config.jobs.retention) c.scheduler->set_retention(*config.jobs.retention);
        c.scheduler->set_output(output);
    }
    std::vector<SupervisorComponent*> metric_sources{c.scheduler.get()};
    if (!c.services->empty()) metric_sources.push_back(c.services.get());
    if (!options.metrics_path.empty())
        c.metrics = std::make_unique<MetricsFile>(options.metrics_path, metric_sources, clock);
    if (c.metrics_server) c.metrics_server->set_sources(metric_sources);
    return c;
}

// Exec'd by the static binary (core/twin.hpp): its parent's mask is the one to pass on, not the
// one the static binary had just blocked.
std::optional<twin::HandedOver> take_over_from_static_binary(char** argv,
                                                             sigset_t& inherited_mask) {
    auto handed_over = twin::take_handed_over();
    if (handed_over) inherited_mask = handed_over->inherited_mask;
    // Until the point of no return, a run that needs what only the dynamic build can do (libpq,
    // libmicrohttpd, NSS) is handed over to it where the need shows: in a --user lookup, here.
    twin::open_startup_window(argv, inherited_mask);
    return handed_over;
}

// A run refused at its set-up still replaces the previous run's report (`start_failed`,
// docs/report.md): left in place, the last one (clean, exit code 0) would speak for this run.
// What the options say; no tracker, process or shutdown exists yet.
Status report_set_up_failure(const Options& options, const Error& error, int code) {
    if (options.report_path.empty()) return Ok{};
    ReportInput in;
    in.command = options.command;
    in.exit_code = code;
    in.kill_scope = std::string(to_string(options.kill_scope));
    in.grace = options.grace;
    in.drain_delay = options.drain_delay;
    return write_start_failure_report(options.report_path, std::move(in), error.message);
}

// Before logging is set up, an error that ends the run before anything starts: on stderr, with
// the exit code of a usage error, and in the report unless `reportable` is false (its directory
// was the error).
int start_up_error(const Options& options, const Error& error, bool up, bool reportable = true) {
    const char* who = up ? "lastcall up" : "lastcall";
    std::fprintf(stderr, "%s: %s\n", who, error.message.c_str());
    if (!reportable) return 2;
    if (auto st = report_set_up_failure(options, error, 2); !st)
        std::fprintf(stderr, "%s: shutdown report not written: %s\n", who,
                     st.error().message.c_str());
    return 2;
}

// Bound before anything starts: a port in use or a missing libmicrohttpd is a start-up error, not
// a run without the metrics it was asked for. Null without --metrics-listen.
Result<std::unique_ptr<MetricsServer>> bind_metrics_server(const Options& options) {
    std::unique_ptr<MetricsServer> metrics_server;
    if (!options.metrics_listen.empty()) {
        auto server = MetricsServer::open(options.metrics_listen);
        if (!server) return server.error();
        metrics_server = std::move(*server);
    }
    return metrics_server;
}

// No hand-over to the twin (an exec of this argv) can follow: its copy of the password is no
// longer needed.
void scrub_password_from_command_line(int argc, char** argv, const Options& options) {
    if (scrub_ledger_password(argc, argv, options))
        spdlog::warn("{}", ledger_password_was_readable());
}

void log_hand_over(const std::optional<twin::HandedOver>& handed_over) {
    if (handed_over) {
        spdlog::debug("handed over by the static binary: {}", handed_over->why);
        if (handed_over->version != LASTCALL_VERSION)
            spdlog::warn(
                "handed over by a static lastcall {} to this dynamic one, {}: install "
                "both from one package",
                handed_over->version, LASTCALL_VERSION);
    }
}

// A stderr reader that stopped reading gets a short chance, then the count of what it lost.
void flush_logs() {
    flush_log_backlog(std::chrono::milliseconds(200));
    if (auto lost = log_lines_lost()) {
        spdlog::warn("lost {} log lines (stderr was not being read)", lost);
        flush_log_backlog(std::chrono::milliseconds(50));
    }
    spdlog::shutdown();  // logs are flushed last, after the report and the cgroup removal
}

}  // namespace

int main(int argc, char** argv) {
    // The very first thing: a termination signal sent while lastcall parses its options, reads
    // its config and sets up logging (tens of ms, more with a large config) stays pending and is
    // acted on as soon as the loop runs, instead of killing lastcall without a report (or, as
    // PID 1, being dropped by the kernel). Nothing before this line can fail or take time.
    sigset_t handled = handled_signals();
    sigset_t inherited_mask;  // what lastcall's parent handed it, for tini mode's child
    ::sigprocmask(SIG_BLOCK, &handled, &inherited_mask);
    auto handed_over = take_over_from_static_binary(argv, inherited_mask);

    std::vector<std::string> args(argv, argv + argc);
    if (auto code = run_subcommand(args, handled)) return *code;

    ParsedCommandLine parsed;
    if (!is_up(args)) {
        parsed = parse_command_line(args);
        // `lastcall -v up`: the global options went before the subcommand's name.
        if (!parsed.subcommand.empty()) {
            args = std::move(parsed.subcommand);
            if (auto code = run_subcommand(args, handled)) return *code;
        }
    }
    // `lastcall up`: the Procfile's processes are the services, read before anything starts.
    std::optional<UpRun> up;
    if (is_up(args)) {
        PreparedUp prepared = prepare_up(args);
        if (!prepared.run) return prepared.exit_code;
        up = std::move(prepared.run);
        parsed.options = std::move(up->options);
    }
    if (!parsed.options) return parsed.exit_code;
    Options& options = *parsed.options;
    // What its parent handed lastcall (the mask as it was before the first line of main), for a
    // child that must get the same (tini mode). Blocking changed no disposition.
    if (options.restore_inherited_signals)
        options.inherited_signals = inherited_signals(inherited_mask);

    hand_over_what_needs_the_twin(options);
    // Where the report goes is checked first: every later refusal is written there.
    if (auto st = check_output_dir("--report", options.report_path); !st)
        return start_up_error(options, st.error(), up.has_value(), false);
    auto config = up ? Result<Configuration>{Configuration{std::move(up->services), {}}}
                     : load_configuration(options);
    if (!config) return start_up_error(options, config.error(), up.has_value());
    if (auto st = check_output_dir("--metrics-file", options.metrics_path); !st)
        return start_up_error(options, st.error(), up.has_value());
    // A config's `ledger`: the ledger opens after the point of no return, too late to hand over.
    if (!config->jobs.jobs.empty() && !config->jobs.ledger_url.empty())
        twin::hand_over(kPostgresLedgerNeedsLibpq);
    auto metrics_server = bind_metrics_server(options);
    if (!metrics_server) return start_up_error(options, metrics_server.error(), up.has_value());

    twin::close_startup_window();
    setup_logging(options.log_settings());
    scrub_password_from_command_line(argc, argv, options);
    log_hand_over(handed_over);

    // Signals were blocked at the top of main(), so none is lost between the child's spawn and
    // the signalfd. From here on lastcall must not die: as PID 1 its death kills the container,
    // and as a subreaper it would orphan the tree. Errors are logged and the teardown goes on.

    SteadyClock clock;
    auto components =
        create_components(options, *config, clock, std::move(*metrics_server),
                          up ? std::optional{std::move(up->service_options)} : std::nullopt);
    if (!components) {
        spdlog::critical("{}", components.error().message);
        if (auto st = report_set_up_failure(options, components.error(), 1); !st)
            spdlog::error("shutdown report not written: {}", st.error().message);
        return 1;
    }
    Supervisor supervisor(std::move(options), clock);
    components->attach_to(supervisor);
    int code = supervisor.run();

    flush_logs();
    return code;
}
