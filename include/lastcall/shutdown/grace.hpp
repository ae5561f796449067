// SPDX-License-Identifier: Apache-2.0
// The grace: how long the tree has between its stop signal and SIGKILL. One default, here, for
// the command line, the shutdown and every unit (a service's or a job's own grace is capped by
// it); docs/design.md says why 8 s (below Docker's 10 s and Kubernetes' 30 s, so that lastcall,
// not the runtime, gets to force and to write the record).
#pragma once

#include <chrono>

namespace lastcall {

inline constexpr std::chrono::milliseconds kDefaultGrace{8000};
inline constexpr const char* kDefaultGraceText = "8s";  // kDefaultGrace, as --grace takes it

}  // namespace lastcall
