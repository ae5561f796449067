// SPDX-License-Identifier: Apache-2.0
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include "lastcall/jobs/run_ending.hpp"

using namespace lastcall;

namespace {
int exited(int code) {
    return (code & 0xff) << 8;
}
int killed(int sig) {
    return sig & 0x7f;
}
}  // namespace

TEST_CASE("a run reached by the shutdown's stop request is interrupted whatever its status",
          "[run-ending]") {
    for (int status : {exited(0), exited(1), killed(SIGTERM), killed(SIGKILL)}) {
        auto d = decide_run_end(Intervention::StopRequest, status, "1s", "SIGTERM");
        CHECK(d.end == RunEnd::Interrupted);
        CHECK(d.reason.rfind("stopped by the shutdown (SIGTERM", 0) == 0);
    }
}

TEST_CASE("a run that timed out is failed with reason timeout even if it exits 0", "[run-ending]") {
    for (int status : {exited(0), exited(3), killed(SIGTERM)}) {
        auto d = decide_run_end(Intervention::Timeout, status, "1s", "SIGTERM");
        CHECK(d.end == RunEnd::Failed);
        CHECK(d.reason.rfind("timeout:", 0) == 0);
    }
}

TEST_CASE("a run that ended by itself commits on exit 0 and fails otherwise", "[run-ending]") {
    CHECK(decide_run_end(Intervention::None, exited(0), "", "").end == RunEnd::Commit);
    auto bad = decide_run_end(Intervention::None, exited(4), "", "");
    CHECK(bad.end == RunEnd::Failed);
    CHECK(bad.reason == "exited with code 4");
    CHECK(decide_run_end(Intervention::None, killed(SIGSEGV), "", "").end == RunEnd::Failed);
}

TEST_CASE("the first intervention is kept", "[run-ending]") {
    CHECK(first_of(Intervention::None, Intervention::Timeout) == Intervention::Timeout);
    CHECK(first_of(Intervention::Timeout, Intervention::StopRequest) == Intervention::Timeout);
    CHECK(first_of(Intervention::StopRequest, Intervention::Timeout) == Intervention::StopRequest);
}

TEST_CASE("completed needs no intervention, no pending interrupted record and a promoted artifact",
          "[run-ending]") {
    CHECK(may_complete(Intervention::None, false, false, false));
    CHECK(may_complete(Intervention::None, false, true, true));
    CHECK_FALSE(may_complete(Intervention::None, false, true, false));
    CHECK_FALSE(may_complete(Intervention::None, true, true, true));
    CHECK_FALSE(may_complete(Intervention::Timeout, false, true, true));
    CHECK_FALSE(may_complete(Intervention::StopRequest, false, false, false));
}
