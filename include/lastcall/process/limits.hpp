// SPDX-License-Identifier: Apache-2.0
// What lastcall changes of its own process at start-up to survive load, and gives back to its
// units.
//
// - RLIMIT_NOFILE: every unit costs lastcall descriptors (a pidfd, a cgroup directory, an output
//   pipe), and under systemd's default soft limit (1,024) only 505 of 1,000 services started
//   (issue 42). lastcall raises its own soft limit to the hard one, as systemd does for itself.
// - oom_score_adj: in a memory-limited cgroup filled by many small units the OOM killer chose
//   lastcall (its RSS above each unit's), and with PID 1 went the whole namespace and the report.
//   lastcall sets its own to -1000 where it may (root, CAP_SYS_RESOURCE).
//
// Both are inherited across fork: a unit would run with a limit it was never given (select()
// breaks above 1,024 descriptors) and be unkillable by the OOM killer. So every spawn gives the
// unit back, between fork and exec, what lastcall itself was started with.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <optional>
#include <string>

namespace lastcall {

// What a unit gets back of lastcall's inherited limits: only what lastcall changed of its own.
struct UnitLimits {
    bool restore_nofile = false;
    rlimit nofile{};  // soft as lastcall got it, hard as it still is
    bool restore_oom_score_adj = false;
    // The inherited value as text, formatted before the fork (the child must not format).
    char oom_score_adj[8] = {};
    std::size_t oom_score_adj_len = 0;
};

// What every spawn gives back (SpawnSpec's default); nothing until protect_self() ran.
const UnitLimits& unit_limits();

// What protect_self() did, for its log lines and the tests.
struct SelfProtection {
    rlim_t nofile_soft_before = 0;
    rlim_t nofile_soft_now = 0;
    int oom_score_adj_before = 0;
    bool oom_protected = false;  // lastcall's own oom_score_adj is -1000 now
};

// Once, before the first spawn: records what lastcall was started with, raises its soft
// RLIMIT_NOFILE to the hard limit and writes -1000 to its oom_score_adj where allowed (else
// keeps its value, said at debug level). Also takes the baseline of oom_kills_since_start().
// A second call (a second supervisor in one process) changes nothing and keeps the first record.
SelfProtection protect_self();

// In the child between fork and exec: async-signal-safe system calls only. Each returns false
// with errno set when it failed; true when there was nothing to do.
bool restore_nofile(const UnitLimits& limits);
bool restore_oom_score_adj(const UnitLimits& limits);

// OOM kills counted in lastcall's memory cgroup since protect_self() (memory.events' oom_kill
// with cgroup v2, memory.oom_control's with the v1 memory controller); none when lastcall is in
// no memory cgroup with such a counter. The cgroup holds lastcall's whole tree (the instance's
// cgroups are below it, and the /proc tracker's units stay in it), and any other process that
// shares it with lastcall.
std::optional<long long> oom_kills_since_start();

// The oom_kill counter of a memory.events or memory.oom_control text ("oom_kill 3"); none
// without one.
std::optional<long long> parse_oom_kill(const std::string& text);

}  // namespace lastcall
