// SPDX-License-Identifier: Apache-2.0
// The descriptors held for the stop path and the report (core/fd_reserve.hpp), at a real
// RLIMIT_NOFILE: in a child process, so that the lowered limit and the process-wide reserve touch
// no other test.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "forked_child.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/core/read_file.hpp"

using namespace lastcall;

namespace {

int open_null() {
    return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

// 0 when every step holds, else the number of the step that did not.
int at_the_limit() {
    fd_reserve_hold(3);
    if (fd_reserve_held() != 3) return 10;
    // Every descriptor below a limit a little above the ones open now is used up.
    int top = open_null();
    if (top < 0) return 24;
    rlimit lim{static_cast<rlim_t>(top + 8), static_cast<rlim_t>(top + 8)};
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 11;
    std::vector<UniqueFd> filler;
    filler.emplace_back(top);
    for (int fd; (fd = open_null()) >= 0;) filler.emplace_back(fd);
    if (errno != EMFILE) return 12;
    // Nothing but the stop path's short opens draws on it: not a spawn's pipe.
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0 || errno != EMFILE) return 13;
    if (fd_reserve_held() != 3) return 14;
    {
        UniqueFd lent(open_with_reserve(open_null));
        if (!lent) return 15;
        if (fd_reserve_held() != 2) return 16;
    }
    // Taken back at the close, before anything else could take the slot.
    if (fd_reserve_held() != 3) return 17;
    if (::pipe2(p, O_CLOEXEC) == 0) return 18;
    {
        // As many at once as it holds, and no more.
        UniqueFd a(open_with_reserve(open_null)), b(open_with_reserve(open_null)),
            c(open_with_reserve(open_null));
        if (!a || !b || !c) return 19;
        UniqueFd d(open_with_reserve(open_null));
        if (d || errno != EMFILE) return 20;
    }
    if (fd_reserve_held() != 3) return 21;
    // A /proc read of the stop path, at the limit.
    if (!read_file("/proc/self/stat")) return 22;
    return fd_reserve_held() == 3 ? 0 : 23;
}

}  // namespace

TEST_CASE(
    "at the descriptor limit the reserve lends only to short opens and takes each slot back at "
    "its close",
    "[fd_reserve]") {
    pid_t pid = lastcall::test::fork_with_default_signals();
    if (pid == 0) ::_exit(at_the_limit());
    REQUIRE(pid > 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
