// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/run_ending.hpp"

#include <sys/wait.h>

#include "lastcall/process/process_tree.hpp"

namespace lastcall {

RunEndDecision decide_run_end(Intervention first, int wait_status, const std::string& timeout,
                              const std::string& stop_signal, bool left_behind) {
    std::string then = left_behind ? "what its leader left behind had not ended; the leader " +
                                         describe_wait_status(wait_status)
                                   : "then " + describe_wait_status(wait_status);
    switch (first) {
        case Intervention::Timeout:
            return {RunEnd::Failed, "timeout: ran past its " + timeout + " timeout (" + then + ")"};
        case Intervention::StopRequest:
            return {RunEnd::Interrupted,
                    "stopped by the shutdown (" + stop_signal + "; " + then + ")"};
        case Intervention::None:
            break;
    }
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return {RunEnd::Commit, ""};
    return {RunEnd::Failed, describe_wait_status(wait_status)};
}

bool may_complete(Intervention first, bool interrupted_pending, bool has_output, bool promoted) {
    if (first != Intervention::None || interrupted_pending) return false;
    return !has_output || promoted;
}

}  // namespace lastcall
