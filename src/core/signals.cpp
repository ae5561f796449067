// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/signals.hpp"

#include "lastcall/core/read_file.hpp"

#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <string>

namespace lastcall {

namespace {

struct Named {
    const char* name;
    int number;
};

constexpr std::array kNames{
    Named{"HUP", SIGHUP},   Named{"INT", SIGINT},       Named{"QUIT", SIGQUIT},
    Named{"ILL", SIGILL},   Named{"TRAP", SIGTRAP},     Named{"ABRT", SIGABRT},
    Named{"IOT", SIGIOT},   Named{"BUS", SIGBUS},       Named{"FPE", SIGFPE},
    Named{"KILL", SIGKILL}, Named{"USR1", SIGUSR1},     Named{"SEGV", SIGSEGV},
    Named{"USR2", SIGUSR2}, Named{"PIPE", SIGPIPE},     Named{"ALRM", SIGALRM},
    Named{"TERM", SIGTERM}, Named{"STKFLT", SIGSTKFLT}, Named{"CHLD", SIGCHLD},
    Named{"CONT", SIGCONT}, Named{"STOP", SIGSTOP},     Named{"TSTP", SIGTSTP},
    Named{"TTIN", SIGTTIN}, Named{"TTOU", SIGTTOU},     Named{"URG", SIGURG},
    Named{"XCPU", SIGXCPU}, Named{"XFSZ", SIGXFSZ},     Named{"VTALRM", SIGVTALRM},
    Named{"PROF", SIGPROF}, Named{"WINCH", SIGWINCH},   Named{"IO", SIGIO},
    Named{"POLL", SIGPOLL}, Named{"PWR", SIGPWR},       Named{"SYS", SIGSYS},
};

bool parse_int(std::string_view s, int& out) {
    if (s.empty() || s.size() > 4) return false;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

}  // namespace

Result<int> parse_signal(std::string_view text, bool allow_zero) {
    std::string up;
    for (char c : text) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string_view s = up;
    auto invalid = [&] { return Error{"invalid signal '" + std::string(text) + "'"}; };
    int n = 0;
    if (parse_int(s, n)) {
        if (n == 0 && allow_zero) return 0;
        if (n < 1 || n > SIGRTMAX) return invalid();
        return n;
    }
    if (s.starts_with("SIG")) s.remove_prefix(3);
    for (const auto& named : kNames)
        if (s == named.name) return named.number;
    // Real-time signals: RTMIN, RTMIN+n, RTMAX, RTMAX-n.
    if (s.starts_with("RTMIN") || s.starts_with("RTMAX")) {
        bool min = s.starts_with("RTMIN");
        std::string_view rest = s.substr(5);
        int base = min ? SIGRTMIN : SIGRTMAX;
        int off = 0;
        if (!rest.empty()) {
            if (rest[0] != (min ? '+' : '-') || !parse_int(rest.substr(1), off)) return invalid();
        }
        int sig = min ? base + off : base - off;
        if (sig < SIGRTMIN || sig > SIGRTMAX) return invalid();
        return sig;
    }
    return invalid();
}

std::string signal_name(int sig) {
    for (const auto& named : kNames)
        if (named.number == sig && std::string_view(named.name) != "IOT" &&
            std::string_view(named.name) != "POLL")
            return std::string("SIG") + named.name;
    if (sig >= SIGRTMIN && sig <= SIGRTMAX)
        return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
    return "signal " + std::to_string(sig);
}

sigset_t handled_signals() {
    sigset_t set;
    sigfillset(&set);
    // The fault signals are in the set: one sent with kill() is a request like any other. A
    // fault raised by lastcall itself is still fatal, because the kernel unblocks a synchronous
    // fault signal and resets it to its default action before delivering it (force_sig_fault).
    sigdelset(&set, SIGKILL);
    sigdelset(&set, SIGSTOP);
    return set;
}

namespace {

// "SigIgn:\t0000000000001000". False without /proc (or the line).
bool read_ignored_from_proc(SignalBits& out) {
    auto text = read_file("/proc/self/status");
    if (!text) return false;
    auto bits = proc_status_mask(*text, "SigIgn");
    if (bits) out.bits = *bits;
    return bits.has_value();
}

}  // namespace

std::optional<unsigned long long> proc_status_mask(const std::string& status, const char* field) {
    std::string key = std::string("\n") + field + ":";
    auto at = status.find(key);
    if (at == std::string::npos) return std::nullopt;
    const char* start = status.c_str() + at + key.size();
    char* end = nullptr;
    unsigned long long bits = std::strtoull(start, &end, 16);
    if (end == start) return std::nullopt;
    return bits;
}

const SignalBits& ignored_dispositions() {
    static const SignalBits ignored = [] {
        SignalBits set;
        if (read_ignored_from_proc(set)) return set;
        KernelSigaction old;
        for (int sig = 1; sig < NSIG; ++sig) {
            if (sig == SIGKILL || sig == SIGSTOP) continue;
            if (kernel_sigaction(sig, nullptr, &old) == 0 && old.handler == SIG_IGN) set.add(sig);
        }
        return set;
    }();
    return ignored;
}

InheritedSignals inherited_signals(const sigset_t& mask) {
    return InheritedSignals{mask, ignored_dispositions()};
}

bool is_termination_signal(int sig) {
    return sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;
}

bool is_job_control_signal(int sig) {
    return sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

}  // namespace lastcall
