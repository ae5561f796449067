// SPDX-License-Identifier: Apache-2.0
// Signal names and numbers, and the signal sets lastcall handles.
#pragma once

#include <signal.h>

#include <string>
#include <string_view>

#include "lastcall/core/error.hpp"

namespace lastcall {

// "TERM", "SIGTERM", "sigterm", "15", "RTMIN+2" -> 15... ; 0 is accepted only when allow_zero
// (a rewrite target of 0 means "drop the signal").
Result<int> parse_signal(std::string_view text, bool allow_zero = false);

// "SIGTERM"; "SIGRTMIN+2"; "signal 99" for unknown numbers.
std::string signal_name(int sig);

// The set lastcall takes through its signalfd: every catchable signal, SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGTRAP and SIGSYS included (sent with kill, they are forwarded like the others; a real
// fault in lastcall is still delivered, the kernel unblocks it).
sigset_t handled_signals();

// What lastcall's own parent handed it: the signal mask and the ignored dispositions, as they
// were before lastcall changed anything (tini passes them on to its child).
struct InheritedSignals {
    sigset_t mask;
    sigset_t ignored;
};
InheritedSignals inherited_signals(const sigset_t& mask);

// Termination requests start (or escalate) the shutdown; everything else is forwarded as is.
bool is_termination_signal(int sig);

// Job-control signals get the stop/continue treatment instead of a plain forward.
bool is_job_control_signal(int sig);

}  // namespace lastcall
