// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
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
// The wait grows with what the sweep cost: each reap walks the list up to the first exited child
// too, so a sweep among thousands of live children takes milliseconds (0.6 ms for 2,000 on the VM
// of bench/results). The next one waits kCostRatio times as long, so that sweeping takes at most
// ~1/kCostRatio of a CPU, up to kMaxWait: an orphan's zombie is never left longer than that (the
// main child's exit is seen at once, on its pidfd). 2,000 orphans: PID 1's CPU 96-147 ms with a
// fixed 5 ms, 56-95 ms with 50 ms.
// While running; during the shutdown every exit is swept at once (the record and the tree-empty
// check want it soon, and the tree only shrinks), unless a sweep reaped a crowd (64 or more:
// Supervisor::sweep_children), where each waitid's walk among thousands of living children
// costs more than the wait.
class ReapPacer {
  public:
    static constexpr int kCostRatio = 20;
    static constexpr std::chrono::milliseconds kMaxWait{50};

    explicit ReapPacer(std::chrono::steady_clock::duration interval) : interval_(interval) {}

    // Whether an exit is swept when it is signalled (no paced sweep is pending).
    bool sweep_now() const { return !next_; }
    // A sweep that ended at `now`, after `cost`, reaped `count` children. Returns when the next
    // sweep is due; none: at the next SIGCHLD.
    std::optional<MonoTime> swept(MonoTime now, long count,
                                  std::chrono::steady_clock::duration cost = {}) {
        if (count <= 0) {
            next_.reset();
            return next_;
        }
        std::chrono::steady_clock::duration wait = cost * kCostRatio;
        wait = std::clamp(wait, interval_,
                          std::max(interval_, std::chrono::steady_clock::duration(kMaxWait)));
        next_ = now + wait;
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
