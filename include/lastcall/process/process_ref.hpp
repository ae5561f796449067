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

// Was `pid` handed out by the pid namespace after its last pid was `after` and up to when it was
// `upto`? The namespace hands pids out in increasing order (ns_last_pid is the last one), wrapping
// at pid_max: the cyclic interval (after, upto]. Equal: nothing was handed out (a whole turn of
// the pid space in between is not considered: tens of thousands of forks within a few system
// calls).
constexpr bool pid_handed_out_between(pid_t pid, pid_t after, pid_t upto) {
    if (after == upto) return false;
    if (after < upto) return pid > after && pid <= upto;
    return pid > after || pid <= upto;
}

// signal_exact, with the namespace's last pid in place of the start-time read where it proves
// the same: `listed_after` is the last pid read before the enumeration that listed p (0:
// unknown), `last_pid_fd` an open ns_last_pid. Once the pidfd is open, a pid not handed out since
// that read still names the process the enumeration listed (a pid names another process only
// after the namespace handed it out again), so the pidfd pins that process: no
// /proc/PID/stat per signal (10,000 of them in a big tree's stop, issue 42). A pid handed out
// since falls back to the start-time check, and a member listed without a start time (p.start
// 0: a pid from cgroup.procs) then counts as gone. Known limit: a privileged checkpoint-restore
// tool that creates a process at a chosen pid (clone3's set_tid, a write to ns_last_pid) does so
// without moving the namespace's last pid forward.
// `first`: a signal through the same pidfd just before sig (0: none).
bool signal_listed(const ProcInfo& p, int sig, pid_t listed_after, int last_pid_fd, int first = 0);

// pidfd_open(2) and pidfd_send_signal(2), which glibc 2.36 does not wrap.
int pidfd_open(pid_t pid);
bool pidfd_signal(int pidfd, int sig);

}  // namespace lastcall
