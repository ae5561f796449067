// SPDX-License-Identifier: Apache-2.0
// spawn() with real children: the clone that shares the spawner's memory until the exec must
// leave that memory, and the spawner's own stack, as they were.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "lastcall/core/read_file.hpp"
#include "lastcall/process/spawner.hpp"

using namespace lastcall;

namespace {

int wait_exit_code(pid_t pid) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

std::string temp_dir() {
    char tmpl[] = "/tmp/lastcall-spawner-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    return tmpl;
}

}  // namespace

TEST_CASE("each spawned child gets its own LISTEN_PID and the spawner's memory is left as it was",
          "[spawner]") {
    std::string dir = temp_dir();
    // A canary on the spawner's stack, beside the frame the child's stack lives in.
    char canary[64];
    std::memset(canary, 'c', sizeof canary);
    for (int i = 0; i < 50; ++i) {
        std::string out = dir + "/" + std::to_string(i);
        SpawnSpec spec;
        spec.argv = {"/bin/sh", "-c", "echo \"$LISTEN_PID $$\" > " + out + "; exit 7"};
        spec.env = {"PATH=/usr/bin:/bin", "LISTEN_PID=stale"};
        spec.set_listen_pid = true;
        SpawnResult r = spawn(spec);
        REQUIRE(r.child);
        REQUIRE_FALSE(r.failure);
        CHECK(wait_exit_code(r.child->pid) == 7);
        auto text = read_file(out);
        REQUIRE(text);
        // The slot the child wrote its pid into was its own copy of the environment, made
        // before this spawn: no earlier child's pid, no "stale".
        std::string expected = std::to_string(r.child->pid) + " " + std::to_string(r.child->pid);
        CHECK(*text == expected + "\n");
        // The spec the child read from shared memory is unchanged after it.
        CHECK(spec.env[1] == "LISTEN_PID=stale");
        ::unlink(out.c_str());
    }
    for (char c : canary) REQUIRE(c == 'c');
    ::rmdir(dir.c_str());
}

TEST_CASE("a child that fails before its exec reports the stage and the spawner goes on",
          "[spawner]") {
    for (int i = 0; i < 20; ++i) {
        SpawnSpec spec;
        spec.argv = {"/bin/true"};
        spec.workdir = "/nonexistent/lastcall-spawner-test";
        SpawnResult r = spawn(spec);
        REQUIRE(r.failure);
        CHECK(r.failure->stage == SpawnStage::Chdir);
        CHECK(r.failure->err == ENOENT);
        CHECK(r.failure->path == spec.workdir);
        CHECK_FALSE(r.child);
    }
    SpawnSpec ok;
    ok.argv = {"/bin/sh", "-c", "exit 3"};
    SpawnResult r = spawn(ok);
    REQUIRE(r.child);
    CHECK(wait_exit_code(r.child->pid) == 3);
}
