// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/process_ref.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

int pidfd_open(pid_t pid) {
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

bool pidfd_signal(int pidfd, int sig) {
    return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
}

std::optional<ProcessRef> ProcessRef::open(const ProcInfo& seen) {
    // Through the reserve (fd_reserve.hpp): a signal of the stop path needs these two
    // descriptors for a moment, at a limit the tree may have used up.
    UniqueFd fd(open_with_reserve([&] { return pidfd_open(seen.pid); }));
    if (!fd) return std::nullopt;
    // The order matters: the start time read after the pidfd exists describes the process the
    // pidfd pins. Read before, it could describe a predecessor.
    errno = 0;
    auto now = read_proc_stat(seen.pid);
    if (!now && (errno == EMFILE || errno == ENFILE)) {
        // No descriptor for the check even with the reserve: the pidfd, opened after the
        // process was enumerated, pins it. Its pid could only have been reused in the moment
        // between the enumeration and the pidfd_open, where a kill() by pid would hit the
        // successor as well; dropping the signal would leave the member running (the issue's
        // "stop signal to 0 processes").
        return ProcessRef(seen.pid, seen.start, std::move(fd));
    }
    if (!now || now->start != seen.start) {
        errno = ESRCH;
        return std::nullopt;
    }
    return ProcessRef(seen.pid, seen.start, std::move(fd));
}

bool ProcessRef::signal(int sig) const {
    if (!pidfd_) {
        errno = ESRCH;
        return false;
    }
    return pidfd_signal(pidfd_.get(), sig);
}

bool signal_exact(const ProcInfo& p, int sig) {
    if (auto ref = ProcessRef::open(p)) return ref->signal(sig);
    if (errno == EMFILE || errno == ENFILE) return ::kill(p.pid, sig) == 0;
    return false;  // already gone (and reaped), or a successor holds the pid
}

bool signal_listed(const ProcInfo& p, int sig, pid_t listed_after, int last_pid_fd, int first) {
    if (listed_after > 0) {
        UniqueFd fd(open_with_reserve([&] { return pidfd_open(p.pid); }));
        if (!fd && (errno == EMFILE || errno == ENFILE)) {
            // No descriptor even with the reserve: as signal_exact, the pid seen a moment ago.
            if (first) (void)::kill(p.pid, first);
            return ::kill(p.pid, sig) == 0;
        }
        if (!fd) return false;  // gone
        // Read after the pidfd_open: it covers every pid handed out up to the moment the pidfd
        // pinned its process.
        pid_t now = read_last_pid(last_pid_fd);
        if (now > 0 && !pid_handed_out_between(p.pid, listed_after, now)) {
            if (first) (void)pidfd_signal(fd.get(), first);
            return pidfd_signal(fd.get(), sig);
        }
    }
    // Handed out again since the listing, or no last pid to tell: the start-time check, which a
    // member listed without a start time cannot pass.
    if (p.start == 0) return false;
    if (first) (void)signal_exact(p, first);
    return signal_exact(p, sig);
}

}  // namespace lastcall
