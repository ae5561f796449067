// SPDX-License-Identifier: Apache-2.0
#include <signal.h>
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "lastcall/shutdown/report.hpp"
#include "lastcall/shutdown/shutdown.hpp"

using namespace lastcall;
using namespace std::chrono_literals;

namespace {

// Records every effect the state machine asks for, in order.
struct Recorder final : ShutdownActions {
    std::vector<std::string> log;
    void state_changed(State from, State to, Event) override {
        log.push_back(std::string(to_string(from)) + "->" + std::string(to_string(to)));
    }
    void readiness_off() override { log.push_back("readiness_off"); }
    void start_pre_stop() override { log.push_back("pre_stop"); }
    void signal_tree(int sig) override { log.push_back("signal " + std::to_string(sig)); }
    void kill_tree() override {
        log.push_back("kill");
        if (during_kill) during_kill();
    }
    std::function<void()> during_kill;  // e.g. a /proc walk that takes time
    void forward_extra(int sig) override { log.push_back("forward " + std::to_string(sig)); }
    long count(const std::string& s) const { return std::count(log.begin(), log.end(), s); }
};

struct Fixture {
    FakeClock clock;
    Recorder actions;
    ShutdownConfig config;
    Fixture() { config.grace = 8s; }
    Shutdown make() { return Shutdown(config, clock, actions); }
};

// Up to 1 ms before `at` the tree has no stop signal; at `at` it has it, once.
void expect_stop_signal_at(Fixture& f, Shutdown& sd, MonoTime at) {
    f.clock.advance(at - f.clock.now() - 1ms);
    sd.on_timer();
    CHECK(f.actions.count("signal 15") == 0);
    f.clock.advance(1ms);
    sd.on_timer();
    CHECK(sd.state() == State::Stopping);
    CHECK(f.actions.count("signal 15") == 1);
}

}  // namespace

TEST_CASE("the transition table allows exactly the documented moves", "[shutdown]") {
    const State states[] = {State::Running, State::Draining, State::Stopping, State::Forcing,
                            State::Stopped};
    const Event events[] = {Event::Trigger,  Event::DrainDone,    Event::HoldExpired,
                            Event::Escalate, Event::GraceExpired, Event::TreeEmpty,
                            Event::GiveUp};
    struct Move {
        State from;
        Event e;
        State to;
    };
    const Move allowed[] = {
        {State::Running, Event::Trigger, State::Draining},
        {State::Draining, Event::DrainDone, State::Stopping},
        {State::Draining, Event::HoldExpired, State::Stopping},
        {State::Draining, Event::Escalate, State::Forcing},
        {State::Draining, Event::GraceExpired, State::Forcing},
        {State::Draining, Event::TreeEmpty, State::Stopped},
        {State::Stopping, Event::Escalate, State::Forcing},
        {State::Stopping, Event::GraceExpired, State::Forcing},
        {State::Stopping, Event::TreeEmpty, State::Stopped},
        {State::Forcing, Event::TreeEmpty, State::Stopped},
        {State::Forcing, Event::GiveUp, State::Stopped},
    };
    for (State s : states) {
        for (Event e : events) {
            std::optional<State> expected;
            for (const auto& m : allowed)
                if (m.from == s && m.e == e) expected = m.to;
            INFO(to_string(s) << " + " << to_string(e));
            CHECK(transition(s, e) == expected);
        }
    }
}

TEST_CASE("the first SIGTERM closes readiness before it signals the tree", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Started);
    CHECK(f.actions.log == std::vector<std::string>{"running->draining", "readiness_off",
                                                    "draining->stopping", "signal 15"});
    CHECK(sd.state() == State::Stopping);
}

TEST_CASE("the stop signal is the received one unless --stop-signal says otherwise", "[shutdown]") {
    Fixture f;
    SECTION("SIGINT is forwarded as SIGINT") {
        auto sd = f.make();
        sd.on_signal(SIGINT);
        CHECK(f.actions.count("signal 2") == 1);
    }
    SECTION("--stop-signal QUIT wins") {
        f.config.stop_signal = SIGQUIT;
        auto sd = f.make();
        sd.on_signal(SIGTERM);
        CHECK(f.actions.count("signal 3") == 1);
    }
    SECTION("a child that exits by itself leaves SIGTERM for the rest") {
        auto sd = f.make();
        sd.on_main_exit();
        CHECK(f.actions.count("signal 15") == 1);
    }
}

TEST_CASE("a second SIGTERM after the coalescing window escalates to SIGKILL", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.clock.advance(200ms);
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Escalated);
    CHECK(sd.state() == State::Forcing);
    CHECK(f.actions.count("kill") == 1);
    CHECK(sd.forced());
}

TEST_CASE("a burst of termination signals is one trigger and never escalates", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Started);
    for (int i = 0; i < 1500; ++i) {
        f.clock.advance(std::chrono::microseconds(50));
        auto outcome = sd.on_signal(i % 2 ? SIGINT : SIGTERM);
        CHECK(outcome == (i == 1 ? SignalOutcome::Forwarded : SignalOutcome::Coalesced));
    }
    CHECK(sd.state() == State::Stopping);
    CHECK(f.actions.count("kill") == 0);
    CHECK(f.actions.count("readiness_off") == 1);
    CHECK(f.actions.count("signal 15") == 1);
    CHECK(f.actions.count("forward 2") == 1);
    REQUIRE(sd.bursts().size() == 2);
    CHECK(sd.bursts()[0].count + sd.bursts()[1].count == 1501);
}

TEST_CASE("a burst of different signals forwards each distinct one once", "[shutdown]") {
    Fixture f;
    SECTION("INT first, then TERM: the TERM is forwarded, nothing escalates") {
        auto sd = f.make();
        CHECK(sd.on_signal(SIGINT) == SignalOutcome::Started);
        CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Forwarded);
        CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Coalesced);
        CHECK(sd.on_signal(SIGINT) == SignalOutcome::Coalesced);
        CHECK(f.actions.log == std::vector<std::string>{"running->draining", "readiness_off",
                                                        "draining->stopping", "signal 2",
                                                        "forward 15"});
    }
    SECTION("during the drain delay the distinct signal goes out with the stop signal") {
        f.config.drain_delay = 1s;
        auto sd = f.make();
        sd.on_signal(SIGINT);
        CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Forwarded);
        CHECK(f.actions.count("forward 15") == 0);
        f.clock.advance(1s);
        sd.on_timer();
        CHECK(f.actions.log.back() == "forward 15");
        CHECK(f.actions.count("signal 2") == 1);
    }
    SECTION("a configured stop signal replaces them all") {
        f.config.stop_signal = SIGQUIT;
        auto sd = f.make();
        sd.on_signal(SIGINT);
        CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Coalesced);
        CHECK(f.actions.count("forward 15") == 0);
    }
}

TEST_CASE("after the main command exited by itself the first SIGTERM does not escalate",
          "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    sd.on_main_exit();
    f.clock.advance(300ms);
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Joined);
    CHECK(sd.state() == State::Stopping);
    CHECK(f.actions.count("kill") == 0);
    f.clock.advance(300ms);
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Escalated);  // a second one is meant
    CHECK(f.actions.count("kill") == 1);
}

TEST_CASE("the trigger time is the signal's dequeue time, not the handling time", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    MonoTime dequeued = f.clock.now();
    f.clock.advance(40ms);
    sd.on_signal(SIGTERM, dequeued);
    CHECK(sd.trigger().at == dequeued);
    CHECK(sd.grace_deadline() == dequeued + f.config.grace);
}

TEST_CASE("the report places every time on the wall clock through the one pair read with it",
          "[shutdown][report]") {
    // The report is rendered long after the trigger (CI under the sanitizers: 7 ms for 300
    // processes); its times must not move by however long the rendering took.
    Fixture f;
    auto sd = f.make();
    MonoTime dequeued = f.clock.now();
    sd.on_signal(SIGTERM, dequeued);
    f.clock.advance(2500ms);
    ProcessBook book;
    ReportInput in;
    in.shutdown = &sd;
    in.book = &book;
    in.now = f.clock.now();
    in.wall_now =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(1'800'000'002'500));
    std::string report = render_report(in);
    // 1,800,000,000,000 ms after the epoch is 2027-01-15T08:00:00.000Z.
    CHECK(report.find(R"("at":"2027-01-15T08:00:00.000Z")") != std::string::npos);
}

TEST_CASE("the grace deadline escalates to SIGKILL when the tree has not emptied", "[shutdown]") {
    Fixture f;
    f.config.grace = 1s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    REQUIRE(sd.next_deadline() == f.clock.now() + 1s);
    f.clock.advance(999ms);
    sd.on_timer();
    CHECK(sd.state() == State::Stopping);
    f.clock.advance(1ms);
    sd.on_timer();
    CHECK(sd.state() == State::Forcing);
    CHECK(f.actions.count("kill") == 1);
}

TEST_CASE("SIGKILL is repeated while forcing, and lastcall gives up after the force limit",
          "[shutdown]") {
    Fixture f;
    f.config.grace = 1s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.clock.advance(1s);
    sd.on_timer();
    REQUIRE(sd.state() == State::Forcing);
    f.clock.advance(f.config.force_repeat);
    sd.on_timer();
    CHECK(f.actions.count("kill") == 2);
    f.clock.advance(f.config.force_limit);
    sd.on_timer();
    CHECK(sd.state() == State::Stopped);
}

TEST_CASE("the next SIGKILL pass comes one interval after the last pass ended, not began",
          "[shutdown]") {
    // A /proc walk of a collapsing fork bomb takes longer than the interval; passes back to
    // back would leave the loop no turn to reap what they killed.
    Fixture f;
    f.config.grace = 1s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.actions.during_kill = [&] { f.clock.advance(3 * f.config.force_repeat); };
    f.clock.advance(1s);
    sd.on_timer();
    REQUIRE(sd.state() == State::Forcing);
    REQUIRE(f.actions.count("kill") == 1);
    sd.on_timer();  // the pass took three intervals: the next is still one interval away
    CHECK(f.actions.count("kill") == 1);
    REQUIRE(sd.next_deadline());
    CHECK(*sd.next_deadline() == f.clock.now() + f.config.force_repeat);
    f.clock.advance(f.config.force_repeat);
    sd.on_timer();
    CHECK(f.actions.count("kill") == 2);
}

TEST_CASE("a tree that empties within the grace ends clean, without SIGKILL", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.clock.advance(300ms);
    sd.on_tree_empty();
    CHECK(sd.state() == State::Stopped);
    CHECK_FALSE(sd.forced());
    CHECK(f.actions.count("kill") == 0);
    CHECK_FALSE(sd.next_deadline().has_value());
}

TEST_CASE("the drain delay holds the stop signal back, inside the grace", "[shutdown]") {
    Fixture f;
    f.config.drain_delay = 2s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    CHECK(sd.state() == State::Draining);
    CHECK(f.actions.count("signal 15") == 0);
    CHECK(sd.next_deadline() == f.clock.now() + 2s);
    expect_stop_signal_at(f, sd, sd.trigger().at + 2s);
    // The grace counts from the trigger, not from the end of the delay.
    CHECK(sd.next_deadline() == sd.trigger().at + 8s);
}

TEST_CASE("a hold keeps the tree's stop signal back only until half of the grace after the delay",
          "[shutdown]") {
    Fixture f;
    f.config.drain_delay = 2s;  // grace 8 s: the hold ends at 2 s + (8 s - 2 s) / 2 = 5 s
    auto sd = f.make();
    sd.hold_drain();
    sd.on_signal(SIGTERM);
    f.clock.advance(2s);
    sd.on_timer();
    CHECK(sd.state() == State::Draining);  // the delay is over, the hold is not
    CHECK(sd.next_deadline() == sd.trigger().at + 5s);
    expect_stop_signal_at(f, sd, sd.trigger().at + 5s);
    sd.release_drain();  // the services' stop ends later: nothing more happens
    CHECK(f.actions.count("signal 15") == 1);
    CHECK(sd.next_deadline() == sd.trigger().at + 8s);
}

TEST_CASE("a hold released in time lets the drain end at once", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    sd.hold_drain();
    sd.on_signal(SIGTERM);
    CHECK(sd.state() == State::Draining);
    CHECK(sd.next_deadline() == sd.trigger().at + 4s);
    f.clock.advance(1s);
    sd.release_drain();
    CHECK(sd.state() == State::Stopping);
}

TEST_CASE("the pre-stop hook runs once, before the stop signal, under repeated triggers",
          "[shutdown]") {
    Fixture f;
    f.config.has_pre_stop = true;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    for (int i = 0; i < 10; ++i) sd.on_signal(SIGTERM);
    CHECK(f.actions.count("pre_stop") == 1);
    CHECK(sd.state() == State::Draining);
    sd.on_pre_stop_done();
    CHECK(sd.state() == State::Stopping);
    CHECK(f.actions.log == std::vector<std::string>{"running->draining", "readiness_off",
                                                    "pre_stop", "draining->stopping", "signal 15"});
}

TEST_CASE("a pre-stop hook that outlives the grace is cut off by the escalation", "[shutdown]") {
    Fixture f;
    f.config.has_pre_stop = true;
    f.config.grace = 1s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.clock.advance(1s);
    sd.on_timer();
    CHECK(sd.state() == State::Forcing);
    CHECK(f.actions.count("signal 15") == 0);
}

TEST_CASE("a second SIGTERM during the drain delay forces at once", "[shutdown]") {
    Fixture f;
    f.config.drain_delay = 5s;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    f.clock.advance(500ms);
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Escalated);
    CHECK(sd.state() == State::Forcing);
}

TEST_CASE("the main child's own exit skips the drain delay and the pre-stop hook", "[shutdown]") {
    Fixture f;
    f.config.drain_delay = 5s;
    f.config.has_pre_stop = true;
    auto sd = f.make();
    sd.on_main_exit();
    CHECK(sd.state() == State::Stopping);
    CHECK(f.actions.count("pre_stop") == 0);
    CHECK(sd.trigger().kind == TriggerKind::MainExited);
}

TEST_CASE("however many triggers arrive, the teardown runs once", "[shutdown]") {
    Fixture f;
    auto sd = f.make();
    sd.on_signal(SIGTERM);
    sd.on_main_exit();
    sd.on_signal(SIGINT);
    sd.on_tree_empty();
    sd.on_tree_empty();
    f.clock.advance(1s);
    CHECK(sd.on_signal(SIGTERM) == SignalOutcome::Ignored);
    sd.on_main_exit();
    CHECK(f.actions.count("readiness_off") == 1);
    CHECK(f.actions.count("signal 15") == 1);
    CHECK(f.actions.count("stopping->stopped") == 1);
}
