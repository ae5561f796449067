// SPDX-License-Identifier: Apache-2.0
// How a job run ends, as pure functions: the rules docs/jobs.md states, in one place.
//
//   interrupted  lastcall's stop request reached the run before it ended by itself, whatever
//                its exit status (obeying SIGTERM must not decide the record);
//   failed       it ended by itself badly, or ran past its timeout (reason `timeout`, never
//                promoted even if it then exits 0);
//   completed    only after its own artifact was validated and promoted (or it has none).
// Whichever of lastcall's interventions (timeout, stop request) came first decides.
#pragma once

#include <string>

namespace lastcall {

// The first thing lastcall did to a run's leader before it ended.
enum class Intervention { None, Timeout, StopRequest };

enum class RunEnd {
    Commit,       // ended by itself with exit 0: validate, promote, then `completed`
    Failed,       // ended badly by itself, or timed out
    Interrupted,  // the shutdown's stop request reached it first
};

struct RunEndDecision {
    RunEnd end;
    std::string reason;  // for Failed and Interrupted
};

// The leader's wait status and lastcall's first intervention decide how the run ends.
// `timeout` and `stop_signal` are for the reason text; `left_behind`: the leader had exited
// before the intervention, and what it left behind was still running.
RunEndDecision decide_run_end(Intervention first, int wait_status, const std::string& timeout,
                              const std::string& stop_signal, bool left_behind = false);

// A first intervention is never replaced: a run that timed out stays timed out when the
// shutdown then reaches it, and the other way round.
inline Intervention first_of(Intervention current, Intervention next) {
    return current == Intervention::None ? next : current;
}

// May the run be recorded `completed` now? Only when nothing of lastcall's reached it, its
// interrupted record is not pending (one that could not be written is never later completed),
// and its artifact, if it has one, was promoted.
bool may_complete(Intervention first, bool interrupted_pending, bool has_output, bool promoted);

}  // namespace lastcall
