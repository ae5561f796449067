// SPDX-License-Identifier: Apache-2.0
// Reading /proc/<pid>/stat (process/process_tree.hpp): the parser on crafted lines, and the
// liveness of real zombies, which the force's walk of thousands of processes relies on.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "forked_child.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/process/process_tree.hpp"

using namespace lastcall;

namespace {

// A real line (cat's, kernel 6.x) with the comm replaced.
std::string stat_line(const std::string& comm) {
    return "14097 (" + comm +
           ") S 14094 14093 3360 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 3 0 3724547 3133440 361 "
           "18446744073709551615 94734679658496 94734679678377 140724354602368 0 0 0 0 0 0 0 0 "
           "0 17 1 0 0 0 0 0\n";
}

// Polls the stat file until the state is `state`: the kernel gives no event for a leader
// thread becoming a zombie while its process lives on. Bounded; 1 ms between reads.
std::optional<ProcInfo> wait_for_state(pid_t pid, char state) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        auto info = read_proc_stat(pid);
        if (info && info->state == state) return info;
        timespec ms{0, 1000000};
        ::nanosleep(&ms, nullptr);
    }
    return std::nullopt;
}

void* block_on_pipe(void* fd) {
    char c;
    (void)!::read(*static_cast<int*>(fd), &c, 1);
    return nullptr;
}

}  // namespace

TEST_CASE("a stat line is read from the last ')', whatever the comm holds") {
    auto info = parse_proc_stat(14097, stat_line("a) S 1 2 (b"));
    REQUIRE(info);
    CHECK(info->comm == "a) S 1 2 (b");
    CHECK(info->state == 'S');
    CHECK(info->ppid == 14094);
    CHECK(info->pgid == 14093);
    CHECK(info->sid == 3360);
    CHECK(info->threads == 3);
    CHECK(info->start == 3724547ULL);
}

TEST_CASE("a stat line cut before the start time is refused, not read as zeros") {
    std::string line = stat_line("cat");
    CHECK_FALSE(parse_proc_stat(1, line.substr(0, line.find(" 3724547"))));
    CHECK_FALSE(parse_proc_stat(1, "14097 (cat"));
    CHECK_FALSE(parse_proc_stat(1, ""));
}

TEST_CASE("a zombie leader whose thread runs is alive; once the thread ends it is not") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    pid_t child = lastcall::test::fork_with_default_signals();
    if (child == 0) {
        write_end.reset();
        int fd = read_end.get();
        pthread_t thread;
        if (::pthread_create(&thread, nullptr, block_on_pipe, &fd) != 0) ::_exit(1);
        // The leader thread ends and the process lives on in its thread. The raw exit of one
        // thread, not pthread_exit: that unwinds the stack, and the forked copy of Catch2's
        // frames would catch the unwinding and abort the whole process.
        ::syscall(SYS_exit, 0);
    }
    REQUIRE(child > 0);
    read_end.reset();
    auto leader = wait_for_state(child, 'Z');
    REQUIRE(leader);
    CHECK(leader->threads == 2);
    CHECK(is_alive(*leader));

    write_end.reset();  // EOF: the thread returns, and the process ends
    siginfo_t si{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &si, WEXITED | WNOWAIT) == 0);
    auto zombie = read_proc_stat(child);
    REQUIRE(zombie);
    CHECK(zombie->state == 'Z');
    CHECK(zombie->threads == 1);
    CHECK_FALSE(is_alive(*zombie));
    ::waitpid(child, nullptr, 0);
}
