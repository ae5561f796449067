// SPDX-License-Identifier: Apache-2.0
// ProcessRef: one process named so that a signal can never reach a successor on a reused pid.
//
// A pid alone is not a name: between reading it (from /proc, cgroup.procs, a file) and kill(),
// the process may exit, be reaped and its pid handed to a stranger. A pidfd pins one process;
// checking the start time read during enumeration *after* pidfd_open proves the pidfd refers to
// the process that was enumerated. Every signal lastcall sends to a process it did not just fork
// goes through here.
#pragma once

#include <sys/types.h>

#include <optional>

#include "lastcall/core/fd.hpp"

namespace lastcall {

struct ProcInfo;

class ProcessRef {
  public:
    // The process seen during enumeration, if it is still that process. nullopt: it is gone (or
    // its pid now names another process).
    static std::optional<ProcessRef> open(const ProcInfo& seen);

    pid_t pid() const { return pid_; }
    unsigned long long start() const { return start_; }
    int pidfd() const { return pidfd_.get(); }
    // pidfd_send_signal; false with errno set (ESRCH: it has exited).
    bool signal(int sig) const;

  private:
    ProcessRef(pid_t pid, unsigned long long start, UniqueFd pidfd)
        : pid_(pid), start_(start), pidfd_(std::move(pidfd)) {}
    pid_t pid_;
    unsigned long long start_;
    UniqueFd pidfd_;
};

// Sends sig to the enumerated process (pid, start) exactly, or to nobody. Out of descriptors
// (EMFILE/ENFILE: a tree that exhausted RLIMIT_NOFILE), falls back to kill(): the pid was seen
// alive a moment ago, and its reuse within that window would need the pid space to wrap.
bool signal_exact(const ProcInfo& p, int sig);

// pidfd_open(2) and pidfd_send_signal(2), which glibc 2.36 does not wrap.
int pidfd_open(pid_t pid);
bool pidfd_signal(int pidfd, int sig);

}  // namespace lastcall
