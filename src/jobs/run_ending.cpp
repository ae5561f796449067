// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/run_ending.hpp"

#include <sys/wait.h>

#include "lastcall/core/signals.hpp"

namespace lastcall {

namespace {

std::string describe(int status) {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
    return "changed state " + std::to_string(status);
}

}  // namespace

RunEndDecision decide_run_end(Intervention first, int wait_status, const std::string& timeout,
                              const std::string& stop_signal) {
    switch (first) {
        case Intervention::Timeout:
            return {RunEnd::Failed, "timeout: ran past its " + timeout + " timeout (then " +
                                        describe(wait_status) + ")"};
        case Intervention::StopRequest:
            return {RunEnd::Interrupted, "stopped by the shutdown (" + stop_signal + "; then " +
                                             describe(wait_status) + ")"};
        case Intervention::None:
            break;
    }
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return {RunEnd::Commit, ""};
    return {RunEnd::Failed, describe(wait_status)};
}

bool may_complete(Intervention first, bool interrupted_pending, bool has_output, bool promoted) {
    if (first != Intervention::None || interrupted_pending) return false;
    return !has_output || promoted;
}

}  // namespace lastcall
