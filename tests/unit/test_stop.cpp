// SPDX-License-Identifier: Apache-2.0
// The stop primitive's first two steps (process/stop.hpp) against a fake tree: who gets the stop
// signal, how often, and what follows it. No process is started.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "forked_child.hpp"
#include "lastcall/core/clock.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"

using namespace lastcall;

namespace {

ProcInfo proc(pid_t pid, unsigned long long start = 1) {
    ProcInfo p;
    p.pid = pid;
    p.start = start;
    p.state = 'S';
    return p;
}

// A tree that grows by `born` new members on each enumeration until `births` ran out.
struct FakeTree {
    std::vector<ProcInfo> live;
    int births = 0;
    pid_t next = 1000;
    std::vector<std::pair<pid_t, int>> sent;

    std::vector<ProcInfo> members() {
        auto out = live;
        if (births > 0) {
            --births;
            live.push_back(proc(next++));
        }
        return out;
    }
    StopPassIo io() {
        return {[this] { return members(); },
                [this](const ProcInfo& p, int sig) {
                    sent.emplace_back(p.pid, sig);
                    return true;
                },
                nullptr, nullptr, nullptr};
    }
    int count(pid_t pid, int sig) const {
        int n = 0;
        for (const auto& [p, s] : sent) n += p == pid && s == sig;
        return n;
    }
};

// A real file stands in for cgroup.freeze: a hold made from it writes "0" when it thaws.
struct FreezeFile {
    UniqueFd fd{::memfd_create("cgroup.freeze", MFD_CLOEXEC)};
    FreezeFile() { REQUIRE(::pwrite(fd.get(), "1", 1, 0) == 1); }
    char state() const {
        char c = '?';
        return ::pread(fd.get(), &c, 1, 0) == 1 ? c : '?';
    }
    FreezeHold hold() const { return FreezeHold(UniqueFd(::dup(fd.get())), true); }
};

// The round's budget ends as `last` gets its signal: io.out_of_time() is `over` from then on.
void end_budget_with_signal_to(StopPassIo& io, FakeTree& tree, pid_t last, bool& over) {
    io.send = [&tree, &over, last](const ProcInfo& p, int sig) {
        tree.sent.emplace_back(p.pid, sig);
        if (p.pid == last) over = true;
        return true;
    };
    io.out_of_time = [&over] { return over; };
}

}  // namespace

TEST_CASE("the stop signal reaches each member once, and SIGCONT follows it where stopped") {
    FakeTree tree;
    tree.live = {proc(10), proc(11), proc(12)};
    tree.live[1].state = 'T';  // stopped (Ctrl-Z): it needs the SIGCONT to act on the signal
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    auto r = send_stop_signal(tree.io(), SIGTERM, take);
    CHECK(r.signalled == 3);
    CHECK(r.settled());
    for (pid_t pid : {10, 11, 12}) CHECK(tree.count(pid, SIGTERM) == 1);
    // Only the stopped one, and after its stop signal. A running one gets none: a SIGCONT could
    // land after its reaction to the signal and discard a stop that the reaction queued.
    CHECK(tree.count(11, SIGCONT) == 1);
    CHECK(tree.sent[1] == std::make_pair(pid_t{11}, SIGTERM));
    CHECK(tree.sent[2] == std::make_pair(pid_t{11}, SIGCONT));
    CHECK(tree.count(10, SIGCONT) == 0);
    CHECK(tree.count(12, SIGCONT) == 0);
    // A second stop request (a later trigger) signals nobody again.
    CHECK(send_stop_signal(tree.io(), SIGTERM, take).signalled == 0);
    CHECK(tree.count(10, SIGTERM) == 1);
}

TEST_CASE("a member forked while the pass ran gets the stop signal from the next pass") {
    FakeTree tree;
    tree.live = {proc(10)};
    tree.births = 2;  // two forks race the first passes
    std::set<ProcKey> had;
    auto r = send_stop_signal(tree.io(), SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK(r.settled());
    CHECK(r.signalled == 3);
    CHECK(tree.count(1000, SIGTERM) == 1);
    CHECK(tree.count(1001, SIGTERM) == 1);
}

TEST_CASE("unfrozen, a member missing from one quiet walk is found by the next one") {
    // A process reparented to lastcall while the walk read its old parent's children is in
    // neither list: it is missing from that walk only. One quiet pass ended the passes, and it
    // got nothing but the kill at grace end.
    FakeTree tree;
    tree.live = {proc(10)};
    int walks = 0;
    StopPassIo io = tree.io();
    io.members = [&] {
        ++walks;
        auto out = tree.members();
        if (walks >= 3) out.push_back(proc(20));  // reparented during the second walk
        return out;
    };
    std::set<ProcKey> had;
    auto r = send_stop_signal(io, SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK(r.settled());
    CHECK(tree.count(20, SIGTERM) == 1);
    CHECK(walks == 5);  // two quiet walks in a row after the last new member (walk 3)
}

TEST_CASE("a process that reuses a signalled pid is a new process and gets the signal") {
    FakeTree tree;
    tree.live = {proc(10, 100)};
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    send_stop_signal(tree.io(), SIGTERM, take);
    tree.live = {proc(10, 200)};  // pid 10 again, started later: someone else
    CHECK(send_stop_signal(tree.io(), SIGTERM, take).signalled == 1);
}

TEST_CASE("a fork storm ends the passes unsettled instead of holding the loop") {
    FakeTree tree;
    tree.live = {proc(10)};
    tree.births = 1'000'000;
    std::set<ProcKey> had;
    auto r = send_stop_signal(
        tree.io(), SIGTERM, [&](const ProcInfo& p) { return had.insert(key_of(p)).second; }, 5);
    // Every pass was whole: the storm's later children get the grace kill.
    CHECK(r.ending == PassEnding::OutOfPasses);
    CHECK(r.signalled == 5);
}

TEST_CASE("SIGKILL and SIGCONT as stop signals are not followed by SIGCONT") {
    CHECK_FALSE(needs_sigcont(SIGKILL));
    CHECK_FALSE(needs_sigcont(SIGCONT));
    CHECK(needs_sigcont(SIGINT));
    FakeTree tree;
    tree.live = {proc(10)};
    std::set<ProcKey> had;
    send_stop_signal(tree.io(), SIGKILL,
                     [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK(tree.count(10, SIGCONT) == 0);
}

TEST_CASE("a refused member (lastcall's own helper) is never signalled") {
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    auto r = send_stop_signal(tree.io(), SIGTERM, [](const ProcInfo& p) { return p.pid != 11; });
    CHECK(tree.count(11, SIGTERM) == 0);
    CHECK(r.signalled >= 1);
}

TEST_CASE("no pass starts once the time budget is spent, and a long pass is cut") {
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    tree.births = 100;
    std::set<ProcKey> had;
    StopPassIo io = tree.io();
    io.out_of_time = [] { return true; };
    auto r = send_stop_signal(io, SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK_FALSE(r.settled());
    CHECK(r.signalled == 2);
}

TEST_CASE("a pass over thousands of members stops when the budget runs out") {
    FakeTree tree;
    for (pid_t p = 1; p <= 5000; ++p) tree.live.push_back(proc(p));
    std::set<ProcKey> had;
    StopPassIo io = tree.io();
    int calls = 0;
    io.out_of_time = [&] { return ++calls > 2; };
    auto r = send_stop_signal(io, SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK_FALSE(r.settled());
    CHECK(r.signalled < 5000);
    CHECK(r.signalled >= 16);
}

TEST_CASE("the stop signal goes out while the unit is frozen, and the thaw follows the last one") {
    FreezeFile freeze;
    auto state = [&] { return freeze.state(); };
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    std::vector<char> seen_while_sending;
    StopPassIo io{[&] { return tree.members(); },
                  [&](const ProcInfo&, int) {
                      seen_while_sending.push_back(state());
                      return true;
                  },
                  nullptr, [&] { return one_hold(freeze.hold()); }, nullptr};
    std::set<ProcKey> had;
    auto r = send_stop_signal(io, SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK(r.frozen);
    CHECK(r.signalled == 2);
    CHECK(seen_while_sending == std::vector<char>{'1', '1'});  // SIGTERM, SIGTERM
    CHECK(state() == '0');
}

TEST_CASE("an incomplete freeze is reported, so the passes are what closes the fork race") {
    FakeTree tree;
    tree.live = {proc(10)};
    StopPassIo io{[&] { return tree.members(); }, [](const ProcInfo&, int) { return true; },
                  nullptr, [] { return one_hold(FreezeHold()); }, nullptr};
    std::set<ProcKey> had;
    auto r = send_stop_signal(io, SIGTERM,
                              [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    CHECK_FALSE(r.frozen);
    CHECK(r.settled());
}

TEST_CASE("a pass cut by the budget says so, and the next call reaches the rest exactly once") {
    FakeTree tree;
    for (pid_t p = 1; p <= 100; ++p) tree.live.push_back(proc(p));
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    StopPassIo io = tree.io();
    int calls = 0;
    io.out_of_time = [&] { return ++calls > 2; };
    auto first = send_stop_signal(io, SIGTERM, take);
    CHECK(first.ending == PassEnding::CutWithinPass);
    CHECK(first.signalled < 100);
    // What the caller does in a later turn: a fresh budget, the same record of who had it.
    io.out_of_time = [] { return false; };
    auto rest = send_stop_signal(io, SIGTERM, take);
    CHECK_FALSE(rest.cut());
    CHECK(rest.settled());
    CHECK(first.signalled + rest.signalled == 100);
    for (pid_t p = 1; p <= 100; ++p) CHECK(tree.count(p, SIGTERM) == 1);
}

TEST_CASE("a cut round leaves the unit frozen; the round that finishes the passes thaws it") {
    // Thawed between rounds, a signalled member would run its TERM handler, and a cleanup
    // helper it forks would be taken for a member by the next round.
    FreezeFile freeze;
    auto state = [&] { return freeze.state(); };
    FakeTree tree;
    for (pid_t p = 1; p <= 100; ++p) tree.live.push_back(proc(p));
    int freezes = 0;
    StopPassIo io = tree.io();
    io.freeze = [&] {
        ++freezes;
        return one_hold(freeze.hold());
    };
    int calls = 0;
    io.out_of_time = [&] { return ++calls > 2; };
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    std::vector<FreezeHold> carried;
    auto first = send_stop_signal(io, SIGTERM, take, 16, &carried);
    REQUIRE(first.cut());
    CHECK(state() == '1');
    CHECK(carried.size() == 1);
    io.out_of_time = [] { return false; };
    auto rest = send_stop_signal(io, SIGTERM, take, 16, &carried);
    CHECK(rest.settled());
    CHECK(freezes == 1);  // the second round went on under the first one's freeze
    CHECK(carried.empty());
    CHECK(state() == '0');
}

TEST_CASE(
    "a budget that runs out between passes cuts the round, and the next round finds the rest") {
    // The first pass signals everyone it listed and ends just as the budget does; meanwhile a
    // member that had not had the signal yet forked a child. Ending the passes there left that
    // child to the kill at grace end.
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    tree.births = 1;  // born while the first pass ran
    bool over = false;
    StopPassIo io = tree.io();
    end_budget_with_signal_to(io, tree, 11, over);  // the first pass's last signal
    std::set<pid_t> taken;
    auto take = [&](const ProcInfo& p) { return taken.insert(p.pid).second; };
    auto first = send_stop_signal(io, SIGTERM, take);
    CHECK(first.ending == PassEnding::CutBetweenPasses);
    CHECK(first.signalled == 2);
    over = false;  // the next round's budget
    auto rest = send_stop_signal(io, SIGTERM, take);
    CHECK(rest.settled());
    CHECK(tree.count(1000, SIGTERM) == 1);
}

TEST_CASE("a frozen unit's passes end at the budget after a whole pass, and it thaws") {
    // Frozen, nobody is born between passes: the pass that ended with the budget reached every
    // member, and another round would only keep them from acting on their signal.
    FreezeFile freeze;
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    bool over = false;
    StopPassIo io = tree.io();
    io.freeze = [&] { return one_hold(freeze.hold()); };
    end_budget_with_signal_to(io, tree, 11, over);  // the first pass's last signal
    std::set<pid_t> taken;
    std::vector<FreezeHold> carried;
    auto r = send_stop_signal(
        io, SIGTERM, [&](const ProcInfo& p) { return taken.insert(p.pid).second; }, 16, &carried);
    CHECK_FALSE(r.cut());
    CHECK(r.settled());
    CHECK(r.signalled == 2);
    CHECK(carried.empty());
    CHECK(freeze.state() == '0');
}

TEST_CASE("a fork storm gets 16 passes in all however many rounds cut it, at the same budget") {
    // Each round's budget ends after one whole pass, and the storm never settles: the rounds
    // go on (each pass signals what the last one missed) until 16 passes in all, then the
    // kill at grace end covers the rest. Before the bound, the loop went on round after round
    // until the grace ended, each round longer than the last.
    FakeTree tree;
    tree.live = {proc(10)};
    tree.births = 1'000'000;
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    StopPassIo io = tree.io();
    int calls = 0;
    io.out_of_time = [&] { return calls++ % 2 == 1; };  // a pass's own check, then the next's
    StopRounds rounds;
    int n = 0;
    StopPassResult r;
    do {
        r = send_stop_round(io, SIGTERM, take, rounds);
        ++n;
        if (r.cut()) CHECK(rounds.budgets == 1);  // a cut between whole passes: no longer budget
    } while (rounds.pending && n < 100);
    CHECK(n == 16);
    CHECK_FALSE(r.settled());
    CHECK_FALSE(rounds.pending);
    CHECK(rounds.passes == 0);  // ready for the next stop
}

TEST_CASE("a walk cut short at the budget is never taken for a settled tree") {
    // The second pass's walk (members_within) ran out of time after the members already
    // signalled: nobody new in that part proves nothing about the rest of the tree.
    FakeTree tree;
    tree.live = {proc(10), proc(11)};
    int walks = 0;
    bool over = false;
    StopPassIo io = tree.io();
    io.members = [&] {
        if (++walks == 2) over = true;  // the second walk hit the budget after two members
        return tree.members();
    };
    io.out_of_time = [&] { return over; };
    std::set<pid_t> taken;
    auto result = send_stop_signal(io, SIGTERM,
                                   [&](const ProcInfo& p) { return taken.insert(p.pid).second; });
    CHECK(result.signalled == 2);
    CHECK_FALSE(result.settled());
    CHECK(result.cut());
    CHECK(walks == 2);
}

TEST_CASE("a group held with SIGSTOP gets its SIGCONT at the thaw, not during the passes") {
    // A real process group: the hold's thaw is a real kill(-pgid, SIGCONT).
    pid_t child = lastcall::test::fork_with_default_signals();
    if (child == 0) {
        ::setpgid(0, 0);
        for (;;) ::pause();
    }
    REQUIRE(child > 0);
    ::setpgid(child, child);  // also from the parent: no race with the child's own call
    REQUIRE(::kill(-child, SIGSTOP) == 0);
    // The stop acts when the child next runs: wait for it to report the stop.
    int status = 0;
    REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
    REQUIRE(WIFSTOPPED(status));
    ProcInfo held = proc(child);
    held.pgid = child;
    ProcInfo other = proc(child + 100000);
    other.pgid = child + 100000;
    other.state = 'T';  // stopped on its own, outside the held group
    std::vector<std::pair<pid_t, int>> sent;
    std::vector<char> state_while_sending;
    StopPassIo io{[&] {
                      return std::vector<ProcInfo>{held, other};
                  },
                  [&](const ProcInfo& p, int sig) {
                      sent.emplace_back(p.pid, sig);
                      if (p.pid == child)
                          state_while_sending.push_back(read_proc_stat(child)->state);
                      return true;
                  },
                  nullptr, [&] { return one_hold(FreezeHold::stopped_group(-child)); }, nullptr};
    std::set<ProcKey> had;
    send_stop_signal(io, SIGUSR1, [&](const ProcInfo& p) { return had.insert(key_of(p)).second; });
    // The held member got the stop signal but no SIGCONT of its own: one would let it run, and
    // fork, while the passes still walk. The stopped member outside the group got both.
    auto count = [&](pid_t pid, int sig) {
        return std::count(sent.begin(), sent.end(), std::pair{pid, sig});
    };
    CHECK(count(child, SIGUSR1) == 1);
    CHECK(count(child, SIGCONT) == 0);
    CHECK(count(other.pid, SIGUSR1) == 1);
    CHECK(count(other.pid, SIGCONT) == 1);
    CHECK(state_while_sending == std::vector<char>{'T'});
    // After the thaw the child runs again (SIGCONT wakes a stopped task before kill() returns).
    CHECK(read_proc_stat(child)->state != 'T');
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

TEST_CASE(
    "a process dated after the stop's tick, or in its tick with a later pid, is born after "
    "it") {
    BirthLine line{1000 * BirthLine::ns_per_clock_tick() + 1, 500};  // in tick 1000
    auto at = [](pid_t pid, unsigned long long start) {
        ProcInfo p;
        p.pid = pid;
        p.start = start;
        return p;
    };
    CHECK(line.born_after(at(7, 1001)));         // a later tick: after, whatever its pid (wrapped)
    CHECK_FALSE(line.born_after(at(900, 999)));  // an earlier tick: before, whatever its pid
    CHECK(line.born_after(at(501, 1000)));       // the same tick: the pid tells
    CHECK_FALSE(line.born_after(at(500, 1000)));
    CHECK_FALSE(line.born_after(at(12, 1000)));
}

TEST_CASE("the birth line read now dates a process forked after it as born after it") {
    UniqueFd last_pid = open_ns_last_pid();
    REQUIRE(last_pid);
    auto line = read_birth_line(last_pid.get());
    REQUIRE(line);
    pid_t child = lastcall::test::fork_with_default_signals();
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    REQUIRE(child > 0);
    auto info = read_proc_stat(child);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    REQUIRE(info);
    CHECK(line->born_after(*info));
    // And lastcall's own process, older than the line, is not.
    auto self = read_proc_stat(::getpid());
    REQUIRE(self);
    CHECK_FALSE(line->born_after(*self));
}

TEST_CASE("a stop signal the process has not taken yet is pending; once taken it is not") {
    // The child blocks SIGUSR1 until the test writes a byte: a parent with its stop signal still
    // pending, whose fork in flight when the signal came is not its reaction to the signal.
    int ready[2], go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    pid_t child = lastcall::test::fork_with_default_signals();
    if (child == 0) {
        sigset_t usr1;
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        ::sigprocmask(SIG_BLOCK, &usr1, nullptr);
        ::signal(SIGUSR1, [](int) {});
        char c = 'r';
        if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(1);
        ::sigprocmask(SIG_UNBLOCK, &usr1, nullptr);  // the handler runs here
        ::pause();
        ::_exit(0);
    }
    REQUIRE(child > 0);
    ::close(ready[1]);
    ::close(go[0]);
    char c;
    REQUIRE(::read(ready[0], &c, 1) == 1);  // blocked and handled from here on
    CHECK_FALSE(stop_signal_pending(child, SIGUSR1));
    REQUIRE(::kill(child, SIGUSR1) == 0);
    CHECK(stop_signal_pending(child, SIGUSR1));  // blocked: still pending
    CHECK_FALSE(stop_signal_pending(child, SIGUSR2));
    REQUIRE(::write(go[1], "x", 1) == 1);
    // Unblocked, the child takes it at once; each read of /proc is the wait for that.
    bool taken = false;
    for (int i = 0; i < 100000 && !taken; ++i) taken = !stop_signal_pending(child, SIGUSR1);
    CHECK(taken);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    ::close(ready[0]);
    ::close(go[1]);
    CHECK_FALSE(stop_signal_pending(child, SIGUSR1));  // reaped: nothing to read
}

TEST_CASE("a stop round ends at the end of the grace when that comes before its own budget") {
    // The loop is not free while a round runs: a round that outlasted the grace held back the
    // grace's timer, and with it the kill (a fork bomb's, 160-330 ms late with a 2 s grace).
    const MonoTime start{std::chrono::seconds(100)};
    MonoTime now = start;
    auto clock = [&] { return now; };
    StopRounds rounds;
    auto grace_end = start + std::chrono::milliseconds(100);
    auto capped = rounds.budget(clock, std::optional<MonoTime>(grace_end));
    auto uncapped = rounds.budget(clock);
    now = grace_end - std::chrono::milliseconds(1);
    CHECK_FALSE(capped());
    now = grace_end;
    CHECK(capped());
    CHECK_FALSE(uncapped());  // its own budget (kStopPassBudget) is not spent yet
    // A grace that ends after the budget does not lengthen the round.
    now = start;
    auto late = rounds.budget(clock, std::optional<MonoTime>(start + std::chrono::hours(1)));
    now = start + stop_pass_budget_length();
    CHECK(late());
}

TEST_CASE("a round over a tree that outlasts the grace is cut at the grace's end") {
    FakeTree tree;
    for (pid_t p = 1; p <= 1000; ++p) tree.live.push_back(proc(p));
    const MonoTime start{std::chrono::seconds(100)};
    MonoTime now = start;
    std::set<ProcKey> had;
    StopRounds rounds;
    StopPassIo io = tree.io();
    // Each signal takes 1 ms: the whole tree would take a second, the grace ends at 50 ms.
    io.send = [&](const ProcInfo& p, int sig) {
        now += std::chrono::milliseconds(1);
        tree.sent.emplace_back(p.pid, sig);
        return true;
    };
    io.out_of_time = rounds.budget([&] { return now; },
                                   std::optional<MonoTime>(start + std::chrono::milliseconds(50)));
    auto r = send_stop_round(
        io, SIGTERM, [&](const ProcInfo& p) { return had.insert(key_of(p)).second; }, rounds);
    CHECK(r.cut());
    CHECK(rounds.pending);
    // Checked every 16 signals: the round ends within 16 ms of the grace's end.
    CHECK(now - start < std::chrono::milliseconds(50 + 16));
}

namespace {
ProcInfo born(pid_t pid, pid_t ppid, unsigned long long start = 2000) {
    ProcInfo p = proc(pid, start);
    p.ppid = ppid;
    return p;
}

// The /proc reads of StopHelpers: whether a parent still has its signal pending (`pending`),
// and the start times of the processes alive now (`starts`; any other pid: born at 2000).
struct FakeProbes {
    bool pending = false;
    int pending_reads = 0;
    std::map<pid_t, unsigned long long> starts;
    StopHelpers::Probes probes() {
        return {[this](pid_t, int) {
                    ++pending_reads;
                    return pending;
                },
                [this](pid_t pid) -> std::optional<unsigned long long> {
                    auto it = starts.find(pid);
                    return it == starts.end() ? 2000 : it->second;
                }};
    }
};
}  // namespace

TEST_CASE("a cleanup helper stays a helper after its parent exits, and its parent is read once") {
    // A TERM trap's `flush & exit`: the flush (pid 600) is born after its parent's (500) signal
    // went out (last pid 550 then), the parent exits, and flush is reparented to lastcall.
    StopHelpers helpers;
    FakeProbes taken;  // the parent has taken its signal
    StopHelpers::Parent parent{SIGTERM, 550};
    CHECK(helpers.is_helper(born(600, 500), parent, taken.probes()));
    CHECK(helpers.is_helper(born(600, 500), parent, taken.probes()));      // the next pass
    CHECK(helpers.is_helper(born(600, 1), std::nullopt, taken.probes()));  // orphaned
    CHECK(taken.pending_reads == 1);
    // Its own children are helpers too, and so are theirs after it exits.
    CHECK(helpers.is_helper(born(601, 600), std::nullopt, taken.probes()));
    CHECK(helpers.is_helper(born(601, 1), std::nullopt, taken.probes()));
}

TEST_CASE(
    "a child born to a parent that has not taken its stop signal yet, or before it, is a "
    "member") {
    StopHelpers helpers;
    StopHelpers::Parent parent{SIGTERM, 550};
    FakeProbes pending, taken;
    pending.pending = true;
    CHECK_FALSE(helpers.is_helper(born(600, 500), parent, pending.probes()));  // fork under way
    CHECK_FALSE(helpers.is_helper(born(540, 500), parent, taken.probes()));    // forked before
    CHECK_FALSE(helpers.is_helper(born(600, 500), StopHelpers::Parent{}, taken.probes()));
    // A process of unknown origin (its parent gone before any pass saw it) is a member.
    CHECK_FALSE(helpers.is_helper(born(700, 1), std::nullopt, taken.probes()));
}

TEST_CASE("a process that reuses a helper's pid is judged afresh, and so are its children") {
    StopHelpers helpers;
    FakeProbes taken;
    REQUIRE(helpers.is_helper(born(600, 500), StopHelpers::Parent{SIGTERM, 550}, taken.probes()));
    // The helper exited and the pids wrapped around: pid 600 is a new process, an orphan born
    // at 2500. Its child is looked at first (the walk's order), then itself.
    taken.starts[600] = 2500;
    CHECK_FALSE(helpers.is_helper(born(601, 600, 2500), std::nullopt, taken.probes()));
    CHECK_FALSE(helpers.is_helper(born(600, 1, 2500), std::nullopt, taken.probes()));
}

TEST_CASE("given the grace's end, a pass signals every member it found past its budget") {
    // 10,000 members: their enumeration took the whole budget, and a pass that then gave way
    // after 16 signals left the next round to enumerate them all again; a quarter of the tree
    // had only the kill at grace end.
    FakeTree tree;
    for (pid_t p = 1; p <= 100; ++p) tree.live.push_back(proc(p));
    std::set<ProcKey> had;
    auto take = [&](const ProcInfo& p) { return had.insert(key_of(p)).second; };
    StopPassIo io = tree.io();
    bool over = false, grace_over = false;
    end_budget_with_signal_to(io, tree, 1, over);
    io.past_deadline = [&grace_over] { return grace_over; };
    auto r = send_stop_signal(io, SIGTERM, take);
    CHECK(r.signalled == 100);
    CHECK(r.ending == PassEnding::CutBetweenPasses);  // the next pass waits for a later round
    // The grace's end still cuts a pass: a fork bomb's thousands must not hold the kill back.
    FakeTree bomb;
    for (pid_t p = 1; p <= 100; ++p) bomb.live.push_back(proc(p));
    std::set<ProcKey> had_bomb;
    StopPassIo bomb_io = bomb.io();
    bool bomb_over = false;
    end_budget_with_signal_to(bomb_io, bomb, 1, bomb_over);
    bomb_io.past_deadline = [&bomb_over] { return bomb_over; };
    auto cut = send_stop_signal(
        bomb_io, SIGTERM, [&](const ProcInfo& p) { return had_bomb.insert(key_of(p)).second; });
    CHECK(cut.ending == PassEnding::CutWithinPass);
    CHECK(cut.signalled < 100);
}

TEST_CASE("a pid is handed out again only in the cyclic interval of the namespace's last pids") {
    CHECK(pid_handed_out_between(501, 500, 600));
    CHECK(pid_handed_out_between(600, 500, 600));
    CHECK_FALSE(pid_handed_out_between(500, 500, 600));  // the last one before: older
    CHECK_FALSE(pid_handed_out_between(601, 500, 600));
    // Wrapped around pid_max: after 32000, then up to 20.
    CHECK(pid_handed_out_between(32001, 32000, 20));
    CHECK(pid_handed_out_between(7, 32000, 20));
    CHECK_FALSE(pid_handed_out_between(21, 32000, 20));
    // Nothing handed out.
    CHECK_FALSE(pid_handed_out_between(500, 500, 500));
}

namespace {

// A child that waits in pause() until a signal ends it. The child calls nothing else: the test
// binary has threads (ledger workers), and a child forked while one of them held malloc's lock
// deadlocked in the string a REQUIRE builds (the unit tests hung).
pid_t paused_child() {
    pid_t child = lastcall::test::fork_with_default_signals();
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    REQUIRE(child > 0);
    return child;
}

// Reaps the child; the signal that ended it, or 0.
int killed_by(pid_t child) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

// A paused child listed as cgroup.procs lists it (its pid alone), and the namespace's last pid.
struct ListedChild {
    UniqueFd last_pid = open_ns_last_pid();
    pid_t child = paused_child();
    ProcInfo listed;
    ListedChild() {
        REQUIRE(last_pid);
        listed.pid = child;
    }
};

}  // namespace

TEST_CASE(
    "a listed pid is signalled through its pidfd without its start time while the namespace has "
    "not handed it out again") {
    ListedChild c;
    auto& [last_pid, child, listed] = c;
    // Listed after its fork: its pid is older than the last pid read before the listing.
    pid_t before = read_last_pid(last_pid.get());
    REQUIRE(before > 0);
    CHECK(signal_listed(listed, SIGTERM, before, last_pid.get()));
    CHECK(killed_by(child) == SIGTERM);
}

TEST_CASE(
    "a listed pid that may have been handed out again since its listing, with no start time to "
    "check, is not signalled") {
    ListedChild c;
    auto& [last_pid, child, listed] = c;
    // As if the listing came before the fork: the pid is in the interval handed out since.
    CHECK_FALSE(signal_listed(listed, SIGTERM, child - 1, last_pid.get()));
    // With the start time the check can still prove it: signalled.
    auto info = read_proc_stat(child);
    REQUIRE(info);
    CHECK(signal_listed(*info, SIGKILL, child - 1, last_pid.get()));
    CHECK(killed_by(child) == SIGKILL);
}
