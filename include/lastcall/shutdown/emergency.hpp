// SPDX-License-Identifier: Apache-2.0
// The last resort: an exception or an allocation failure (std::bad_alloc under a memory limit)
// escaped the event loop, or std::terminate ran. The tree must still not outlive lastcall and the
// ending must still be recorded, so the teardown here needs no allocation: everything it uses is
// prepared at set-up in fixed storage (the report path, an open cgroup.kill, the main pid).
//
// It kills the scope (cgroup.kill, the main child's group, every remaining child of lastcall by a
// /proc scan with stack buffers, repeated as orphans are reparented), reaps until no child is
// left, removes the cgroup, writes a minimal report and returns the exit code: the main child's
// if it was reaped, else 70 (EX_SOFTWARE).
#pragma once

#include <sys/types.h>

namespace lastcall {

inline constexpr int kEmergencyExit = 70;

// At set-up: where the report goes (empty: none) and the instance's cgroup directory (empty:
// none; its cgroup.kill is opened here). Copies into fixed storage; may allocate (it runs before
// anything can go wrong).
void emergency_prepare(const char* report_path, const char* cgroup_dir);
void emergency_main_started(pid_t pid);
void emergency_main_reaped(int wait_status);

// Allocation-free and exception-free. `what` must be a string that outlives the call.
int emergency_teardown(const char* what) noexcept;

// Installs a std::terminate handler that runs the teardown and _exits with its code.
void emergency_install_terminate_handler();

}  // namespace lastcall
