// lastcall: run one command as PID 1 or as a subreaper, forward signals to its tree, drain and
// reap the whole tree within a budget, and record how it ended.
#include <string>
#include <vector>

#include "lastcall/cli.hpp"
#include "lastcall/clock.hpp"
#include "lastcall/log.hpp"
#include "lastcall/supervisor.hpp"

int main(int argc, char** argv) {
    using namespace lastcall;
    std::vector<std::string> args(argv, argv + argc);

    ParsedCommandLine parsed = parse_command_line(args);
    if (!parsed.options) return parsed.exit_code;
    Options& options = *parsed.options;

    setup_logging(options);

    // Signals are blocked before the child exists, so none is lost between its spawn and the
    // signalfd. From here on lastcall must not die: as PID 1 its death kills the container, and as
    // a subreaper it would orphan the tree. Errors are logged and the teardown goes on.
    if (auto st = block_handled_signals(); !st) {
        spdlog::critical("{}", st.error().message);
        return 1;
    }

    SteadyClock clock;
    Supervisor supervisor(std::move(options), clock);
    int code = supervisor.run();

    spdlog::shutdown();  // logs are flushed last, after the report and the cgroup removal
    return code;
}
