// SPDX-License-Identifier: Apache-2.0
// Signal names and numbers, and the signal sets lastcall handles.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <optional>

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

// A set of signals 1-64 as a bit mask (bit n-1 for signal n), as /proc/PID/status shows them:
// glibc's sigaddset() refuses its two reserved real-time signals (32, 33), which a parent can
// leave ignored like any other.
struct SignalBits {
    std::uint64_t bits = 0;
    bool has(int sig) const { return sig >= 1 && sig <= 64 && (bits >> (sig - 1)) & 1U; }
    void add(int sig) {
        if (sig >= 1 && sig <= 64) bits |= 1ULL << (sig - 1);
    }
};

// The kernel's struct sigaction, for the raw rt_sigaction system call: glibc's sigaction()
// refuses its two reserved real-time signals (32, 33), whose dispositions are inherited like any
// other. A system call, so async-signal-safe: the spawned child uses it between fork and exec.
struct KernelSigaction {
    void (*handler)(int) = SIG_DFL;
    unsigned long flags = 0;
    void (*restorer)() = nullptr;
    unsigned long mask = 0;
};
inline long kernel_sigaction(int sig, const KernelSigaction* act, KernelSigaction* old) {
    return ::syscall(SYS_rt_sigaction, sig, act, old, sizeof(KernelSigaction::mask));
}

// What lastcall's own parent handed it: the signal mask and the ignored dispositions, as they
// were before lastcall changed anything (tini passes them on to its child).
struct InheritedSignals {
    sigset_t mask;
    SignalBits ignored;
};
InheritedSignals inherited_signals(const sigset_t& mask);

// The dispositions lastcall's parent left ignored. SIG_IGN is the one disposition that exec
// keeps (a handler is reset to the default), and lastcall never ignores a signal itself: so this
// is all a child could inherit besides the defaults, whenever it is read. Read once, on the first
// call (the first spawn, or tini mode's start; never for a read-only subcommand): from
// /proc/self/status (SigIgn), or without /proc by asking the kernel for each disposition.
const SignalBits& ignored_dispositions();

// A signal mask line of /proc/PID/status ("SigIgn", "ShdPnd", ...: hex, bit n-1 for signal n)
// from the file's text; nullopt without that line.
std::optional<unsigned long long> proc_status_mask(const std::string& status, const char* field);

// Termination requests start (or escalate) the shutdown; everything else is forwarded as is.
bool is_termination_signal(int sig);

// Job-control signals get the stop/continue treatment instead of a plain forward.
bool is_job_control_signal(int sig);

}  // namespace lastcall
