// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <optional>

#include "lastcall/core/clock.hpp"

namespace lastcall {

// When lastcall sweeps its exited children while the tree runs (issue 18, reaping as PID 1).
//
// waitpid(-1) walks the caller's whole list of children until it meets one that has exited, so
// the last call of every sweep, the one that finds nothing left, costs a walk of all of them. The
// main command runs in a session of its own, and with the scheduler's autogroups (the default)
// a session is a scheduling group of its own: PID 1, alone in its group, then runs at every
// SIGCHLD of a burst of exits. 2,000 orphans exiting at once woke it ~1,200 times, each wake
// ending in a fruitless walk of the list: 5-10x the CPU per orphan that tini and catatonit
// spend (their child shares their session and group, so they wake late and reap in batches).
//
// So a sweep that reaped something makes the next one wait `interval`: meanwhile SIGCHLD does
// not wake lastcall, and only the main child's exit is watched (its pidfd; reaped by pid, which
// the kernel answers without walking the list). A sweep that reaped nothing ends the pacing: a
// lone exit is reaped as soon as it is signalled.
// Only while running: during the shutdown every exit is swept at once (the record and the
// tree-empty check need it, and the tree only shrinks).
class ReapPacer {
  public:
    explicit ReapPacer(std::chrono::steady_clock::duration interval) : interval_(interval) {}

    // Whether an exit is swept when it is signalled (no paced sweep is pending).
    bool sweep_now() const { return !next_; }
    // A sweep at `now` reaped `count` children. Returns when the next sweep is due; none: at
    // the next SIGCHLD.
    std::optional<MonoTime> swept(MonoTime now, long count) {
        next_ = count > 0 ? std::optional<MonoTime>(now + interval_) : std::nullopt;
        return next_;
    }
    // The shutdown began: sweeps are no longer paced.
    void stop_pacing() { next_.reset(); }
    std::chrono::steady_clock::duration interval() const { return interval_; }

  private:
    std::chrono::steady_clock::duration interval_;
    std::optional<MonoTime> next_;
};

}  // namespace lastcall
