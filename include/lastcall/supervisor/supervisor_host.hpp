// SPDX-License-Identifier: Apache-2.0
// The UnitHost of a running lastcall: the supervisor's loop, tracker, admission and shutdown.
#pragma once

#include <memory>

#include "lastcall/supervisor/unit_host.hpp"

namespace lastcall {

class Supervisor;

std::unique_ptr<UnitHost> make_supervisor_host(Supervisor& sup);

}  // namespace lastcall
