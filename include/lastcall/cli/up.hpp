// SPDX-License-Identifier: Apache-2.0
// `lastcall up`: the Procfile dev runner. Every Procfile process is a service whose output is
// prefixed, restart "no", and main: as with foreman and honcho, the first one to exit stops the
// others and its exit code becomes lastcall's.
#pragma once

#include <string>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/services/services.hpp"

namespace lastcall {

// Procfile entries -> services, after --only/--except (an unknown name there is an error).
Result<std::vector<ServiceSpec>> procfile_services(const std::vector<ProcfileEntry>& entries,
                                                   const std::string& procfile,
                                                   const std::vector<std::string>& only,
                                                   const std::vector<std::string>& except);

int run_up(const std::vector<std::string>& args);

}  // namespace lastcall
