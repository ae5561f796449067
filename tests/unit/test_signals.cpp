// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include "lastcall/core/signals.hpp"

using namespace lastcall;

TEST_CASE("signals parse by name, SIG-prefixed name, lower case and number", "[signals]") {
    CHECK(parse_signal("TERM").value() == SIGTERM);
    CHECK(parse_signal("SIGTERM").value() == SIGTERM);
    CHECK(parse_signal("sigquit").value() == SIGQUIT);
    CHECK(parse_signal("15").value() == SIGTERM);
    CHECK(parse_signal("RTMIN+2").value() == SIGRTMIN + 2);
}

TEST_CASE("unknown or out-of-range signals are refused, 0 only where it means drop", "[signals]") {
    CHECK_FALSE(parse_signal("TERMINATE").ok());
    CHECK_FALSE(parse_signal("0").ok());
    CHECK(parse_signal("0", true).value() == 0);
    CHECK_FALSE(parse_signal("65").ok());
    CHECK_FALSE(parse_signal("").ok());
    CHECK_FALSE(parse_signal("RTMIN+99").ok());
}

TEST_CASE("signal names round-trip", "[signals]") {
    for (int sig = 1; sig < SIGRTMIN; ++sig) {
        if (sig == 32 || sig == 33) continue;
        CHECK(parse_signal(signal_name(sig)).value() == sig);
    }
}

TEST_CASE("lastcall handles every catchable signal, the fault signals sent with kill included",
          "[signals]") {
    sigset_t set = handled_signals();
    CHECK(sigismember(&set, SIGTERM));
    CHECK(sigismember(&set, SIGCHLD));
    CHECK(sigismember(&set, SIGWINCH));
    for (int sig : {SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGSYS})
        CHECK(sigismember(&set, sig));
    CHECK_FALSE(sigismember(&set, SIGKILL));
    CHECK_FALSE(sigismember(&set, SIGSTOP));
}
