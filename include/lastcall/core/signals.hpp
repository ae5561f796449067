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

// The set lastcall takes through its signalfd: every catchable signal except the synchronous
// faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS), which must stay deliverable so that a
// bug in lastcall crashes loudly instead of spinning on a blocked fault.
sigset_t handled_signals();

// Termination requests start (or escalate) the shutdown; everything else is forwarded as is.
bool is_termination_signal(int sig);

// Job-control signals get the stop/continue treatment instead of a plain forward.
bool is_job_control_signal(int sig);

}  // namespace lastcall
