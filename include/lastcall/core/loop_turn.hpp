// SPDX-License-Identifier: Apache-2.0
// The turns of the event loop, counted: what was read from the kernel in one turn may be used
// again in the same turn (the /proc scopes share one listing of lastcall's children: each unit
// read it again, and a stop of 1,000 services read it 1,000 times per pass, issue 42).
#pragma once

#include <cstdint>

namespace lastcall {

// How many turns (EventLoop::run_once calls) the loops of this process have begun; 0 before the
// first, and in a program that runs no loop.
std::uint64_t loop_turn();

}  // namespace lastcall
