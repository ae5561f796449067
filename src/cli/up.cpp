// SPDX-License-Identifier: Apache-2.0
#include "lastcall/cli/up.hpp"
#include "lastcall/core/instance.hpp"
#include "lastcall/core/port.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/twin.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "lastcall/cli/cli.hpp"
#include "lastcall/core/clock.hpp"
#include "lastcall/core/log.hpp"
#include "lastcall/services/service_manager.hpp"
#include "lastcall/services/service_status.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

namespace {}  // namespace

Result<std::vector<ServiceSpec>> procfile_services(const std::vector<ProcfileEntry>& entries,
                                                   const std::string& procfile,
                                                   const std::vector<std::string>& only,
                                                   const std::vector<std::string>& except,
                                                   int base_port) {
    for (const auto* list : {&only, &except})
        for (const auto& name : *list)
            if (std::none_of(entries.begin(), entries.end(),
                             [&](const ProcfileEntry& e) { return e.name == name; }))
                return Error{(list == &only ? "--only: " : "--except: ") +
                             std::string("no process '") + name + "' in " + procfile};
    std::vector<ServiceSpec> out;
    int place = 0;
    for (const auto& e : entries) {
        int port = base_port + 100 * place++;
        bool selected = only.empty()
                            ? std::find(except.begin(), except.end(), e.name) == except.end()
                            : std::find(only.begin(), only.end(), e.name) != only.end();
        if (!selected) continue;
        ServiceSpec s;
        s.name = e.name;
        s.argv = procfile_argv(e.command);
        s.restart = RestartPolicy::No;
        s.main = true;
        s.capture_output = true;
        s.origin = procfile + ":" + std::to_string(e.line);
        s.env.push_back("PORT=" + std::to_string(port));
        out.push_back(std::move(s));
    }
    if (out.empty()) return Error{procfile + ": no process left to run after --only/--except"};
    return out;
}

Result<int> procfile_base_port(std::optional<int> flag, const std::vector<std::string>& dotenv) {
    if (flag) return *flag;
    std::string from, value;
    for (const auto& kv : dotenv)
        if (kv.rfind("PORT=", 0) == 0) from = ".env", value = kv.substr(5);
    if (from.empty())
        if (const char* env = std::getenv("PORT"); env && *env) from = "PORT", value = env;
    if (from.empty()) return 5000;
    auto port = parse_port(value);
    if (!port) return Error{from + ": PORT '" + value + "' is not a port (1-65535)"};
    return *port;
}

int run_up(const std::vector<std::string>& args) {
    ParsedUpCommandLine parsed = parse_up_command_line(args);
    if (!parsed.up) return parsed.exit_code;
    UpOptions& up = *parsed.up;

    // Every file error ends the run before anything starts: exit 2, one line with file and line.
    auto fail = [](const Error& e) {
        std::fprintf(stderr, "lastcall up: %s\n", e.message.c_str());
        return 2;
    };
    if (auto st = check_output_dir("--report", up.options.report_path); !st)
        return fail(st.error());
    auto text = read_file(up.procfile);
    if (!text) return fail(text.error());
    auto entries = parse_procfile(*text, up.procfile);
    if (!entries) return fail(entries.error());
    ServiceManagerOptions mo;
    if (::access(up.env_file.c_str(), F_OK) == 0 || up.env_file_given) {
        auto env_text = read_file(up.env_file);
        if (!env_text) return fail(env_text.error());
        auto env = parse_dotenv(*env_text, up.env_file);
        if (!env) return fail(env.error());
        mo.extra_env = *env;
    }
    auto base_port = procfile_base_port(up.port, mo.extra_env);
    if (!base_port) return fail(base_port.error());
    auto specs = procfile_services(*entries, up.procfile, up.only, up.except, *base_port);
    if (!specs) return fail(specs.error());
    // Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org).
    const char* no_color = std::getenv("NO_COLOR");
    mo.color = ::isatty(STDOUT_FILENO) == 1 && !(no_color && *no_color);
    mo.state_path = status_path_for(instance_id());
    // Named in the status file, so that `lastcall status` tells two `lastcall up`s apart (by
    // instance, and by the Procfile's absolute path, as `lastcall status ./Procfile` selects).
    mo.instance = instance_id();
    mo.config_path = real_path(up.procfile).value_or(up.procfile);

    twin::close_startup_window();  // the point of no return (main.cpp)
    setup_logging(up.options.log_settings());
    if (auto st = block_handled_signals(); !st) {
        spdlog::critical("{}", st.error().message);
        return 1;
    }
    SteadyClock clock;
    ServiceManager services(std::move(*specs), std::move(mo));
    Supervisor supervisor(std::move(up.options), clock);
    supervisor.add_component(&services);
    int code = supervisor.run();
    // A stderr reader that stopped reading gets a short chance, then the count of what it lost.
    flush_log_backlog(std::chrono::milliseconds(200));
    if (auto lost = log_lines_lost()) {
        spdlog::warn("lost {} log lines (stderr was not being read)", lost);
        flush_log_backlog(std::chrono::milliseconds(50));
    }
    spdlog::shutdown();
    return code;
}

}  // namespace lastcall
