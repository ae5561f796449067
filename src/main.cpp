// lastcall: run one command as PID 1 or as a subreaper, forward signals to its tree, drain and
// reap the whole tree within a budget, and record how it ended.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/cli.hpp"
#include "lastcall/clock.hpp"
#include "lastcall/compat.hpp"
#include "lastcall/config.hpp"
#include "lastcall/jobs_cli.hpp"
#include "lastcall/log.hpp"
#include "lastcall/notifier.hpp"
#include "lastcall/scheduler.hpp"
#include "lastcall/socket_activation.hpp"
#include "lastcall/service_manager.hpp"
#include "lastcall/service_status.hpp"
#include "lastcall/supervisor.hpp"
#include "lastcall/up.hpp"

int main(int argc, char** argv) {
    using namespace lastcall;
    std::vector<std::string> args(argv, argv + argc);

    // `lastcall NAME ...` runs a subcommand; anything else is the supervisor's own command line
    // (a program named like a subcommand runs as `lastcall -- NAME`).
    struct Subcommand {
        std::string_view name;
        int (*run)(const std::vector<std::string>& args);
    };
    static constexpr Subcommand kSubcommands[] = {
        {"up", run_up},
        {"status", run_status},
        {"runs", run_runs},
        {"jobs", run_jobs},
    };
    // Invoked as tini, docker-init or dumb-init, `NAME up` runs a program called up.
    if (args.size() > 1 && !compat_mode_for_program(args[0]))
        for (const auto& sub : kSubcommands)
            if (args[1] == sub.name) return sub.run(args);

    ParsedCommandLine parsed = parse_command_line(args);
    if (!parsed.options) return parsed.exit_code;
    Options& options = *parsed.options;
    // A bad [services.*] table ends the run before anything starts, like a usage error.
    auto service_specs = load_config_services(options.config_path);
    if (!service_specs) {
        std::fprintf(stderr, "lastcall: %s\n", service_specs.error().message.c_str());
        return 2;
    }
    // And so does a bad [jobs.*] table or crontab line.
    auto job_setup = load_jobs(options);
    if (!job_setup) {
        std::fprintf(stderr, "lastcall: %s\n", job_setup.error().message.c_str());
        return 2;
    }

    setup_logging(options);

    // Signals are blocked before the child exists, so none is lost between its spawn and the
    // signalfd. From here on lastcall must not die: as PID 1 its death kills the container, and as
    // a subreaper it would orphan the tree. Errors are logged and the teardown goes on.
    if (auto st = block_handled_signals(); !st) {
        spdlog::critical("{}", st.error().message);
        return 1;
    }

    // Socket activation first: its fds must be checked before lastcall opens any of its own.
    auto activation = SocketActivation::from_environment();
    if (!activation) {
        spdlog::critical("{}", activation.error().message);
        return 1;
    }
    SteadyClock clock;
    auto notifier = Notifier::from_environment(options, clock);
    if (!notifier) {
        spdlog::critical("{}", notifier.error().message);
        return 1;
    }
    Supervisor supervisor(std::move(options), clock);
    supervisor.add_component(activation->get());
    supervisor.add_component(notifier->get());
    ServiceManagerOptions service_options;
    service_options.state_path = status_path_for(::getpid());
    ServiceManager services(std::move(*service_specs), service_options, clock);
    if (!services.empty()) supervisor.add_component(&services);
    // The run ledger opens before anything starts: a read-only or full state dir stops lastcall
    // here with the reason, instead of runs that go unrecorded.
    std::optional<JobScheduler> scheduler;
    if (!job_setup->jobs.empty()) {
        auto ledger = Ledger::open(job_setup->state_dir, true);
        if (!ledger) {
            spdlog::critical("run ledger: {}", ledger.error().message);
            return 1;
        }
        scheduler.emplace(std::move(job_setup->jobs), std::move(*ledger));
        supervisor.add_component(&*scheduler);
    }
    int code = supervisor.run();

    spdlog::shutdown();  // logs are flushed last, after the report and the cgroup removal
    return code;
}
