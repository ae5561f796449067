// SPDX-License-Identifier: Apache-2.0
// `lastcall up`: the Procfile dev runner. Every Procfile process is a service whose output is
// prefixed, restart "no", and main: as with foreman and honcho, the first one to exit stops the
// others and its exit code becomes lastcall's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lastcall/cli/options.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/services/service_manager.hpp"
#include "lastcall/services/services.hpp"

namespace lastcall {

// Procfile entries -> services, after --only/--except (an unknown name there is an error).
// Each gets PORT = base_port + 100 x its entry's place in the Procfile (foreman's rule: a
// process keeps its port whatever --only/--except select).
Result<std::vector<ServiceSpec>> procfile_services(const std::vector<ProcfileEntry>& entries,
                                                   const std::string& procfile,
                                                   const std::vector<std::string>& only,
                                                   const std::vector<std::string>& except,
                                                   int base_port = 5000);
// foreman's base port: --port, else PORT from the .env file (its last), else PORT from
// lastcall's environment, else 5000. An unusable value is an error naming where it came from
// (`dotenv_path`, the file `dotenv` was read from, or the environment).
Result<int> procfile_base_port(std::optional<int> flag, const std::vector<std::string>& dotenv,
                               const std::string& dotenv_path);

// What `lastcall up` runs: lastcall's own options (the global ones, given before or after `up`),
// the Procfile's processes as services, and how their manager shows them. main() runs it as it
// runs a config's services, with the same components (metrics, notify, the report).
struct UpRun {
    Options options;
    std::vector<ServiceSpec> services;
    ServiceManagerOptions service_options;
};
struct PreparedUp {
    std::optional<UpRun> run;
    int exit_code = 0;  // without a run: 0 after --help, 2 after an error (printed, one line)
};
// `lastcall up [OPTIONS]`: the command line, the Procfile and the .env read, nothing started.
PreparedUp prepare_up(const std::vector<std::string>& args);

}  // namespace lastcall
