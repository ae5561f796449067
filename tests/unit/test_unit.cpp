// SPDX-License-Identifier: Apache-2.0
// The Unit type (process/unit.hpp): its state table, its stop through the root's one record of
// stop signals, and what the root's pass is told a unit's own stop covers. Fake members, a fake
// clock: no process is started.
#include <catch2/catch.hpp>

#include <signal.h>

#include <map>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/process/unit.hpp"

using namespace lastcall;
using namespace std::chrono_literals;

namespace {

ProcInfo proc(pid_t pid, pid_t ppid = 1) {
    ProcInfo p;
    p.pid = pid;
    p.ppid = ppid;
    p.start = 7;
    p.state = 'S';
    return p;
}

// The root's record as the supervisor keeps it during a shutdown: each process once.
struct Root {
    std::map<pid_t, int> record;
    UnitTree tree{[this](const ProcInfo& p, int sig) { return record.emplace(p.pid, sig).second; }};
};

struct FakeUnit {
    FakeClock clock;
    std::vector<ProcInfo> live;
    std::vector<std::pair<pid_t, int>> sent;
    Unit unit;
    explicit FakeUnit(UnitTree& tree, std::string name = "svc") : FakeUnit(tree, {}, name) {}
    // A unit of another role (the main command, a helper of lastcall's, the whole tree).
    FakeUnit(UnitTree& tree, UnitPolicy policy, std::string name = "unit")
        : unit(
              tree, std::move(name), clock, [this] { return live; },
              [] { return std::vector<FreezeHold>{}; },
              [this](const ProcInfo& p, int sig) {
                  sent.emplace_back(p.pid, sig);
                  return true;
              },
              std::move(policy)) {}
    int count(pid_t pid, int sig) const {
        int n = 0;
        for (const auto& [p, s] : sent) n += p == pid && s == sig;
        return n;
    }
};

}  // namespace

TEST_CASE("a unit goes Running -> Stopping -> Killed -> Gone, and a restart makes it Running",
          "[unit]") {
    using S = UnitState;
    using E = UnitEvent;
    CHECK(unit_transition(S::Running, E::Stop) == S::Stopping);
    CHECK(unit_transition(S::Stopping, E::Kill) == S::Killed);
    CHECK(unit_transition(S::Killed, E::Gone) == S::Gone);
    CHECK(unit_transition(S::Running, E::Gone) == S::Gone);
    CHECK(unit_transition(S::Gone, E::Restart) == S::Running);
    // No second stop, no kill of what is gone, nothing after Gone but a restart.
    CHECK_FALSE(unit_transition(S::Stopping, E::Stop));
    CHECK_FALSE(unit_transition(S::Killed, E::Kill));
    CHECK_FALSE(unit_transition(S::Gone, E::Stop));
    CHECK_FALSE(unit_transition(S::Gone, E::Kill));
}

TEST_CASE("a unit's stop signal goes once to each member and into the root's one record",
          "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10), proc(11, 10)};
    CHECK(u.unit.stop(SIGTERM, u.clock.now() + 5s) == 2);
    CHECK(u.unit.state() == UnitState::Stopping);
    CHECK(root.record.at(10) == SIGTERM);
    CHECK(root.record.at(11) == SIGTERM);
    // A later round (a poll) signals nobody twice.
    CHECK(u.unit.stop(SIGTERM, u.clock.now() + 5s) == 0);
    CHECK(u.count(10, SIGTERM) == 1);
    CHECK(u.count(11, SIGTERM) == 1);
}

TEST_CASE("a process the tree's pass signalled first gets no second stop signal from a unit",
          "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10)};
    root.record.emplace(10, SIGTERM);  // the tree's pass reached it first
    CHECK(u.unit.stop(SIGTERM, u.clock.now() + 5s) == 0);
}

TEST_CASE("the root leaves to a stopping unit its members and the cleanup helpers they start",
          "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10)};
    ProcInfo helper = proc(20, 10);
    ProcInfo grandchild = proc(21, 20);
    ProcInfo stranger = proc(30, 1);
    CHECK_FALSE(root.tree.claimed(helper));  // running: nothing is the unit's to keep
    u.unit.stop(SIGTERM, u.clock.now() + 5s);
    CHECK(root.tree.claimed(proc(10)));
    CHECK(root.tree.claimed(helper));      // born to a signalled member: its cleanup
    CHECK(root.tree.claimed(grandchild));  // and what that helper starts
    CHECK_FALSE(root.tree.claimed(stranger));
}

TEST_CASE("a killed unit no longer owes a round, and stays killed once gone until it restarts",
          "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10)};
    u.unit.stop(SIGTERM, u.clock.now() + 1s);
    u.unit.kill();
    CHECK(u.unit.state() == UnitState::Killed);
    CHECK_FALSE(u.unit.round_owed());
    u.live.clear();
    u.unit.gone();
    CHECK(u.unit.state() == UnitState::Gone);
    CHECK(u.unit.killed());
    u.unit.restart();
    CHECK(u.unit.state() == UnitState::Running);
    CHECK_FALSE(u.unit.killed());
    CHECK_FALSE(u.unit.deadline());
}

TEST_CASE("a restart keeps the record of an earlier instance's process that outlived SIGKILL",
          "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10)};
    u.unit.stop(SIGTERM, u.clock.now() + 1s);
    u.unit.kill();
    u.unit.restart();  // 10 is still there (uninterruptible)
    u.live.push_back(proc(40));
    u.unit.stop(SIGTERM, u.clock.now() + 1s);
    CHECK(u.count(10, SIGTERM) == 1);
    CHECK(u.count(40, SIGTERM) == 1);
}

TEST_CASE("a unit's deadline only moves earlier while it stops", "[unit]") {
    Root root;
    FakeUnit u(root.tree);
    u.live = {proc(10)};
    MonoTime t0 = u.clock.now();
    u.unit.stop(SIGTERM, t0 + 5s);
    u.unit.stop(SIGTERM, t0 + 9s);
    CHECK(*u.unit.deadline() == t0 + 5s);
    u.unit.stop(SIGTERM, t0 + 2s);
    CHECK(*u.unit.deadline() == t0 + 2s);
}

TEST_CASE("a unit that outlives the root records nothing and does not crash", "[unit]") {
    FakeClock clock;
    std::vector<std::pair<pid_t, int>> sent;
    std::unique_ptr<Unit> unit;
    {
        UnitTree tree{[](const ProcInfo&, int) { return true; }};
        unit = std::make_unique<Unit>(
            tree, "job", clock, [] { return std::vector<ProcInfo>{proc(10)}; },
            [] { return std::vector<FreezeHold>{}; },
            [&](const ProcInfo& p, int sig) {
                sent.emplace_back(p.pid, sig);
                return true;
            });
        CHECK(tree.size() == 1);
    }
    CHECK(unit->stop(SIGTERM, clock.now() + 1s) == 0);
    unit.reset();
}

namespace {

ProcInfo in_session(ProcInfo p, pid_t sid) {
    p.sid = sid;
    return p;
}

}  // namespace

TEST_CASE("the main unit claims only the main child: its children are the root's to stop",
          "[unit]") {
    Root root;
    FakeUnit main(root.tree, UnitPolicy{UnitRole::Main, {}, 0});
    main.live = {proc(10)};
    CHECK(main.unit.stop(SIGTERM, main.clock.now() + 5s) == 1);
    CHECK(main.unit.state() == UnitState::Stopping);
    CHECK(main.unit.signalled_any());
    CHECK(root.tree.claimed(proc(10)));
    // A child forked before the stop is a member of the tree, not a helper of the main unit's
    // stop: the birth line tells the two apart, in the root's pass.
    CHECK_FALSE(root.tree.claimed(proc(11, 10)));
}

TEST_CASE("a helper unit's whole session is left alone by the tree until it is gone", "[unit]") {
    Root root;
    FakeUnit hook(root.tree, UnitPolicy{UnitRole::Helper, {}, 50});
    ProcInfo child = in_session(proc(51, 50), 50);
    // Its session, leader and children alike, and nothing outside it.
    for (const auto& [p, its] : {std::pair{in_session(proc(50), 50), true}, std::pair{child, true},
                                 std::pair{in_session(proc(60), 60), false}})
        CHECK(root.tree.helper_claimed(p) == its);
    CHECK(root.tree.claimed(child));
    hook.unit.gone();  // what it leaves behind is the tree's again
    CHECK_FALSE(root.tree.helper_claimed(child));
}

TEST_CASE("the root signals, through the same stop path, what its policy admits and nothing twice",
          "[unit]") {
    Root root;
    // Its policy: not 30 (out of the kill scope, say), nor what a child unit's stop covers.
    UnitPolicy policy{UnitRole::Root,
                      [&](const ProcInfo& p) { return p.pid != 30 && !root.tree.claimed(p); }, 0};
    FakeUnit tree(root.tree, std::move(policy));
    FakeUnit svc(root.tree);
    CHECK(root.tree.size() == 1);  // the root is not one of its own children
    svc.live = {proc(20)};
    tree.live = {proc(10), proc(20), proc(30)};
    svc.unit.stop(SIGTERM, svc.clock.now() + 5s);
    CHECK(tree.unit.stop(SIGTERM, tree.clock.now() + 5s) == 1);
    CHECK(tree.sent == std::vector<std::pair<pid_t, int>>{{10, SIGTERM}});
    CHECK(tree.unit.last_round().settled());
    // Its kill and its end: the same table as every unit's.
    for (auto [event, state] :
         {std::pair{&Unit::kill, UnitState::Killed}, std::pair{&Unit::gone, UnitState::Gone}}) {
        (tree.unit.*event)();
        CHECK(tree.unit.state() == state);
    }
}

TEST_CASE("the unit of a process is the one that signalled it, else the one whose session it is in",
          "[unit]") {
    Root root;
    FakeUnit web(root.tree, "service web"), job(root.tree, "job tick run 3");
    web.unit.set_session(100);
    job.unit.set_session(200);
    REQUIRE(root.tree.owner_of(in_session(proc(101), 100)) == &web.unit);
    REQUIRE(root.tree.owner_of(in_session(proc(201), 200)) == &job.unit);
    CHECK(root.tree.owner_of(in_session(proc(301), 300)) == nullptr);
    // A leftover of an earlier instance (another session) is the service's once it signalled it.
    ProcInfo leftover = in_session(proc(90), 90);
    web.live = {leftover};
    web.unit.stop(SIGTERM, web.clock.now() + std::chrono::seconds(5));
    CHECK(root.tree.owner_of(leftover) == &web.unit);
    // A session id handed to a later unit (a reused pid) is that unit's alone: the first one's
    // end does not take it away.
    {
        FakeUnit later(root.tree, "job tick run 4");
        later.unit.set_session(200);
        CHECK(root.tree.owner_of(in_session(proc(202), 200)) == &later.unit);
    }
    CHECK(root.tree.owner_of(in_session(proc(202), 200)) == nullptr);
}
