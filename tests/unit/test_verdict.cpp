// SPDX-License-Identifier: Apache-2.0
#include <signal.h>
#include <catch2/catch.hpp>

#include "lastcall/shutdown/report.hpp"

using namespace lastcall;

TEST_CASE("the verdict is clean only when no force fact was recorded", "[verdict]") {
    std::vector<ForceFact> facts;
    CHECK(verdict_from(facts) == Verdict::Clean);
    CHECK(exit_code_without_main(verdict_from(facts)) == 0);
    for (ForceKind k : {ForceKind::Sigkill, ForceKind::CgroupKill, ForceKind::EnteredForcing,
                        ForceKind::Abandoned}) {
        INFO(to_string(k));
        // Even a kill that found nobody (count 0) makes it forced: lastcall decided to force.
        std::vector<ForceFact> one{{k, "x", 0, {}}};
        CHECK(verdict_from(one) == Verdict::Forced);
        CHECK(exit_code_without_main(verdict_from(one)) == 128 + SIGKILL);
    }
}

TEST_CASE("a service's grace kill or a job's timeout kill alone makes the verdict forced",
          "[verdict]") {
    ProcessBook book;  // nothing was SIGKILLed by the escalation
    std::vector<ForceFact> facts{{ForceKind::Sigkill, "service web: grace", 1, {}}};
    ReportInput in;
    in.book = &book;
    in.force_facts = &facts;
    CHECK(verdict_of(in) == Verdict::Forced);
    facts = {{ForceKind::Sigkill, "job backup: timeout", 1, {}}};
    CHECK(verdict_of(in) == Verdict::Forced);
    facts.clear();
    CHECK(verdict_of(in) == Verdict::Clean);
    in.gave_up = true;
    CHECK(verdict_of(in) == Verdict::Forced);
}
