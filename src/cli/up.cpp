// SPDX-License-Identifier: Apache-2.0
#include "lastcall/cli/up.hpp"
#include "lastcall/core/port.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "lastcall/cli/cli.hpp"
#include "lastcall/process/credentials.hpp"

namespace lastcall {

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
        s.origin = procfile + ":" + std::to_string(e.line);
        s.env.push_back("PORT=" + std::to_string(port));
        out.push_back(std::move(s));
    }
    if (out.empty()) return Error{procfile + ": no process left to run after --only/--except"};
    return out;
}

Result<int> procfile_base_port(std::optional<int> flag, const std::vector<std::string>& dotenv,
                               const std::string& dotenv_path) {
    if (flag) return *flag;
    std::string from, value;
    for (const auto& kv : dotenv)
        if (kv.rfind("PORT=", 0) == 0) from = dotenv_path + ": ", value = kv.substr(5);
    if (from.empty())
        if (const char* env = std::getenv("PORT"); env && *env)
            from = "the environment's ", value = env;
    if (from.empty()) return 5000;
    auto port = parse_port(value);
    if (!port) return Error{from + "PORT '" + value + "' is not a port (1-65535)"};
    return *port;
}

PreparedUp prepare_up(const std::vector<std::string>& args) {
    ParsedUpCommandLine parsed = parse_up_command_line(args);
    if (!parsed.up) return {std::nullopt, parsed.exit_code};
    UpOptions& up = *parsed.up;

    // Every file error ends the run before anything starts: exit 2, one line with file and line.
    auto fail = [](const Error& e) {
        std::fprintf(stderr, "lastcall up: %s\n", e.message.c_str());
        return PreparedUp{std::nullopt, 2};
    };
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
    auto base_port = procfile_base_port(up.port, mo.extra_env, up.env_file);
    if (!base_port) return fail(base_port.error());
    auto specs = procfile_services(*entries, up.procfile, up.only, up.except, *base_port);
    if (!specs) return fail(specs.error());
    // --user is every process's user, as it is every service's without its own.
    for (auto& s : *specs) s.user = unit_credentials(s.user, s.group, up.options.credentials);
    // What happens to each process is said in its column (main.cpp gives the run its output).
    mo.narrate = true;
    // Named in the status file, so that `lastcall status ./Procfile` selects this run.
    mo.config_path = real_path(up.procfile).value_or(up.procfile);
    return {UpRun{std::move(up.options), std::move(*specs), std::move(mo)}, 0};
}

}  // namespace lastcall
