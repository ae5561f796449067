// SPDX-License-Identifier: Apache-2.0
// Reaping lastcall's children, and what their wait statuses say.
#include "lastcall/core/signals.hpp"
#include "lastcall/process/process_tree.hpp"
#include "process_tree_internal.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>
#include <utility>

namespace lastcall {

bool reap_all(const std::function<bool(pid_t)>& want_info,
              const std::function<void(const Reaped&)>& on_reaped) {
    for (;;) {
        pid_t pid;
        std::optional<ProcInfo> info;
        if (want_info) {
            // Peek first (WNOWAIT) so /proc/<pid>/stat of the zombie can still be read.
            siginfo_t si{};
            if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
                if (errno == EINTR) continue;
                return errno == ECHILD;
            }
            if (si.si_pid == 0) return false;
            pid = si.si_pid;
            if (want_info && want_info(pid)) info = read_proc_stat(pid);
        } else {
            pid = -1;
        }
        int status = 0;
        pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno == ECHILD;
        }
        if (got == 0) return false;
        proctree::forget_child(got);
        on_reaped(Reaped{got, status, std::move(info)});
    }
}

std::string describe_wait_status(int status) {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
    return "changed state " + std::to_string(status);
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 255;
}

Status become_subreaper() {
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        return sys_error("prctl(PR_SET_CHILD_SUBREAPER)", errno);
    return Ok{};
}

}  // namespace lastcall
