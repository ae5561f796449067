// SPDX-License-Identifier: Apache-2.0
// The identity of this lastcall instance on the host.
//
// Not the pid: every container's init is PID 1, so two containers that share a cgroup parent or a
// runtime directory (a pod, `docker run --cgroupns=host`, two units) would take each other's cgroup
// and status file. The id is the pid (for people reading `ls`) and 64 random bits (for
// uniqueness); whoever creates something under it still creates exclusively and never adopts.
#pragma once

#include <string>

namespace lastcall {

// "<pid>-<16 hex digits>", made once per process (getrandom) and the same ever after.
const std::string& instance_id();

}  // namespace lastcall
