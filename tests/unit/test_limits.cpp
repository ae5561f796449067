// SPDX-License-Identifier: Apache-2.0
// The limits lastcall gives back to its units (process/limits.hpp): the OOM counter's parser,
// and a spawned child's soft descriptor limit.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "lastcall/core/read_file.hpp"
#include "lastcall/process/limits.hpp"
#include "lastcall/process/spawner.hpp"

using namespace lastcall;

TEST_CASE("the oom_kill counter is read from memory.events and memory.oom_control", "[limits]") {
    // cgroup v2 memory.events
    CHECK(parse_oom_kill("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n") == 2);
    // cgroup v1 memory.oom_control: oom_kill_disable is another key
    CHECK(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n") == 7);
    CHECK_FALSE(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n"));
    CHECK_FALSE(parse_oom_kill(""));
}

TEST_CASE("a spawned child gets the soft descriptor limit it is given back", "[limits]") {
    rlimit now{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &now) == 0);
    // Catch2 v2 has no SKIP: a hard limit this low leaves nothing to lower.
    if (now.rlim_max < 64) return;
    char tmpl[] = "/tmp/lastcall-limits-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    std::string out = std::string(tmpl) + "/nofile";
    UnitLimits limits;
    limits.restore_nofile = true;
    limits.nofile = {32, now.rlim_max};
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", "ulimit -Sn > " + out};
    spec.limits = &limits;
    auto r = spawn(spec);
    REQUIRE(r.child);
    int status = 0;
    REQUIRE(::waitpid(r.child->pid, &status, 0) == r.child->pid);
    CHECK(WIFEXITED(status));
    auto text = read_file(out);
    REQUIRE(text);
    CHECK(*text == "32\n");
    // The spawner's own limit is untouched (the child shared its memory, not its limits).
    rlimit after{};
    REQUIRE(::getrlimit(RLIMIT_NOFILE, &after) == 0);
    CHECK(after.rlim_cur == now.rlim_cur);
    ::unlink(out.c_str());
    ::rmdir(tmpl);
}
