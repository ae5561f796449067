// SPDX-License-Identifier: Apache-2.0
// fork() for a test's child process that gets signals. Catch installs handlers for SIGTERM,
// SIGINT, SIGABRT and the fault signals; a child inherits them, and a SIGTERM the test sends it
// ran Catch's fatal-error report in the child instead of ending it: a report that allocates, in a
// child forked while another thread of the test binary (a ledger worker) held malloc's lock, and
// the child hung for ever (the unit tests with it). The child gets the default disposition of
// every signal before any can reach it: signals stay blocked across the fork until it is reset.
#pragma once

#include <signal.h>
#include <unistd.h>

namespace lastcall::test {

// As fork(): 0 in the child (every signal's disposition the default, the mask as before), the
// child's pid in the parent, -1 on failure.
inline pid_t fork_with_default_signals() {
    sigset_t all, old;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid = ::fork();
    if (pid == 0) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; ++sig)
            if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return pid;
}

}  // namespace lastcall::test
