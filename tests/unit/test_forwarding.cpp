// SPDX-License-Identifier: Apache-2.0
#include <signal.h>

#include <catch2/catch.hpp>

#include "lastcall/cli/compat.hpp"
#include "lastcall/supervisor/forwarding.hpp"

using namespace lastcall;
using Kind = SignalAction::Kind;

namespace {

Options parsed(std::vector<std::string> args) {
    auto p = parse_command_line(args);
    REQUIRE(p.options);
    return *p.options;
}

}  // namespace

TEST_CASE("native mode: termination signals start the shutdown, the rest is forwarded",
          "[forwarding]") {
    Options o = parsed({"lastcall", "--", "app"});
    ForwardingPolicy policy(o);
    CHECK(policy.decide(SIGTERM).kind == Kind::Shutdown);
    CHECK(policy.decide(SIGINT).kind == Kind::Shutdown);
    CHECK(policy.decide(SIGTSTP).kind == Kind::Suspend);
    auto a = policy.decide(SIGUSR1);
    CHECK(a.kind == Kind::Forward);
    CHECK(a.scope == Scope::Group);
    CHECK(policy.decide(SIGSEGV).kind == Kind::Forward);
}

TEST_CASE("tini mode forwards every signal, termination ones included, and ignores TTIN/TTOU",
          "[forwarding]") {
    Options o = parsed({"tini", "--", "app"});
    ForwardingPolicy policy(o);
    for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGTSTP, SIGCONT, SIGSEGV, SIGRTMIN + 1}) {
        auto a = policy.decide(sig);
        CHECK(a.kind == Kind::Forward);
        CHECK(a.sig == sig);
        CHECK(a.scope == Scope::Child);
        CHECK_FALSE(a.stop_self);
    }
    CHECK(policy.decide(SIGTTIN).kind == Kind::Drop);
    CHECK(policy.decide(SIGTTOU).kind == Kind::Drop);
}

TEST_CASE(
    "dumb-init mode: the rewritten signal is forwarded, a received TSTP/TTIN/TTOU stops "
    "lastcall after it",
    "[forwarding]") {
    Options o = parsed({"dumb-init", "-r", "21:15", "-r", "20:0", "-r", "10:20", "app"});
    ForwardingPolicy policy(o);
    auto a = policy.decide(SIGTTIN);  // TTIN -> TERM: forwarded, no shutdown, then stop
    CHECK(a.kind == Kind::Forward);
    CHECK(a.sig == SIGTERM);
    CHECK(a.scope == Scope::Group);
    CHECK(a.stop_self);
    a = policy.decide(SIGTSTP);  // dropped, still stops
    CHECK(a.kind == Kind::Drop);
    CHECK(a.stop_self);
    a = policy.decide(SIGUSR1);  // USR1 -> TSTP: forwarded, lastcall keeps running
    CHECK(a.kind == Kind::Forward);
    CHECK(a.sig == SIGTSTP);
    CHECK_FALSE(a.stop_self);
    a = policy.decide(SIGTTOU);  // setsid mode's default: SIGSTOP for the orphaned group
    CHECK(a.sig == SIGSTOP);
    CHECK(a.stop_self);
    CHECK(policy.decide(SIGTERM).kind == Kind::Forward);
}

TEST_CASE("dumb-init mode drops the SIGHUP and SIGCONT of its own terminal hand-off once",
          "[forwarding]") {
    Options o = parsed({"dumb-init", "app"});
    ForwardingPolicy policy(o);
    policy.expect_handoff_echo();
    CHECK(policy.decide(SIGHUP).kind == Kind::Drop);
    CHECK(policy.decide(SIGCONT).kind == Kind::Drop);
    CHECK(policy.decide(SIGHUP).kind == Kind::Forward);
    CHECK(policy.decide(SIGCONT).kind == Kind::Forward);
}

TEST_CASE("a drain flag before --compat makes termination signals start lastcall's shutdown",
          "[forwarding]") {
    Options o =
        parsed({"lastcall", "--grace", "2s", "--compat", "dumb-init", "-r", "21:15", "app"});
    ForwardingPolicy policy(o);
    CHECK(policy.decide(SIGTERM).kind == Kind::Shutdown);
    auto a = policy.decide(SIGTTIN);
    CHECK(a.kind == Kind::Shutdown);
    CHECK(a.sig == SIGTERM);
}
