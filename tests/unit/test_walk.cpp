// SPDX-License-Identifier: Apache-2.0
// The /proc walk of lastcall's descendants (process/process_tree.hpp), on real processes: the
// force kills each member as the walk goes, which must not lose the members below it.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "forked_child.hpp"
#include "lastcall/process/process_tree.hpp"

using namespace lastcall;

namespace {

// A chain of `depth` processes below the caller (each the parent of the next), each paused.
// Returns once the last one is up.
void start_chain(int depth) {
    int ready[2];
    REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
    pid_t pid = lastcall::test::fork_with_default_signals();
    if (pid == 0) {
        for (int level = 1; level < depth; ++level) {
            pid_t next = ::fork();
            if (next < 0) ::_exit(1);
            if (next != 0) {
                for (;;) ::pause();
            }
        }
        (void)!::write(ready[1], "r", 1);
        for (;;) ::pause();
    }
    REQUIRE(pid > 0);
    ::close(ready[1]);
    char c;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
}

// SIGKILL, and back only once the process has exited: its children are reparented by then, and
// its own children file lists nobody.
void kill_and_wait_for_exit(pid_t pid) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return;
    ::kill(pid, SIGKILL);
    pollfd pfd{fd, POLLIN, 0};
    while (::poll(&pfd, 1, -1) < 0 && errno == EINTR) {
    }
    ::close(fd);
}

}  // namespace

TEST_CASE(
    "the walk hands a process over only once its children are listed, so killing it there "
    "loses none below it") {
    // In a child of the test that is a subreaper, as lastcall is: a killed member's children are
    // reparented to it, and stay its descendants.
    constexpr int kDepth = 6;
    int result[2];
    REQUIRE(::pipe2(result, O_CLOEXEC) == 0);
    pid_t walker = lastcall::test::fork_with_default_signals();
    if (walker == 0) {
        ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        start_chain(kDepth);
        int handed = 0;
        auto found = descendants_of(::getpid(), {}, [&](const ProcInfo& p) {
            ++handed;
            kill_and_wait_for_exit(p.pid);
        });
        int counts[2] = {static_cast<int>(found.size()), handed};
        (void)!::write(result[1], counts, sizeof counts);
        // What the walk missed (a broken walk) is killed here, level by level, and everything
        // is reaped: no process outlives the test.
        for (auto left = descendants_of(::getpid()); !left.empty();
             left = descendants_of(::getpid())) {
            for (const auto& p : left) kill_and_wait_for_exit(p.pid);
            while (::waitpid(-1, nullptr, WNOHANG) > 0) {
            }
        }
        while (::wait(nullptr) > 0) {
        }
        ::_exit(0);
    }
    REQUIRE(walker > 0);
    ::close(result[1]);
    int counts[2] = {-1, -1};
    REQUIRE(::read(result[0], counts, sizeof counts) == static_cast<ssize_t>(sizeof counts));
    ::close(result[0]);
    int status = 0;
    REQUIRE(::waitpid(walker, &status, 0) == walker);
    CHECK(counts[0] == kDepth);  // every member of the chain was found...
    CHECK(counts[1] == kDepth);  // ...and handed over, each after its children were listed
    CHECK(WIFEXITED(status));
}
