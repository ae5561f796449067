// SPDX-License-Identifier: Apache-2.0
// Descriptors held back for the stop path and the report. A tree that used up RLIMIT_NOFILE
// (a service that leaks sockets, lastcall's own units at a low limit) must still get its stop
// signal, its SIGKILL and its report: each of those opens a file for a moment (a pidfd and
// /proc/<pid>/stat to check it, cgroup.procs, cgroup.kill, the report's directory and temporary
// file). The reserve lends a descriptor only to such an open, which is closed before its caller
// returns, and takes it back at that close (UniqueFd's): a spawn's pipes, a unit's pidfd or a
// socket never get one, so the reserve is there however many units the run started.
#pragma once

#include <cerrno>
#include <cstddef>

namespace lastcall {

// Holds n descriptors (copies of one open /dev/null, close-on-exec) from now on, on the calling
// thread: only that thread's opens are lent one (the ledger's worker thread opens SQLite's files
// and must not take the loop's reserve).
void fd_reserve_hold(std::size_t n);
// How many are held now (the tests' and the log's view).
std::size_t fd_reserve_held();
// Takes back what was lent, as far as descriptors are free again. errno is kept. UniqueFd's
// close calls it: the slot a borrower frees goes back to the reserve before anything else (a
// spawn's pipe, a unit's pidfd) can take it, and a reserve lent at the limit is never eaten
// away by the run's own growth.
void fd_reserve_refill();
// Closes one held descriptor so that the open that just failed with EMFILE or ENFILE can be
// made again; false when none is held or the caller is not the reserve's thread.
bool fd_reserve_lend();

// open() through the reserve: `open` is called again, after one held descriptor is closed, as
// long as it fails for want of a descriptor and the reserve has one. For the short-lived opens
// of the stop path and the report only (see above).
template <class Open>
int open_with_reserve(Open&& open) {
    fd_reserve_refill();
    int fd = open();
    while (fd < 0 && (errno == EMFILE || errno == ENFILE) && fd_reserve_lend()) fd = open();
    return fd;
}

}  // namespace lastcall
