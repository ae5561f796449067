// SPDX-License-Identifier: Apache-2.0
// The shutdown state machine. One enum, one transition function, one controller.
//
//   Running --trigger--> Draining --drain done-----> Stopping --tree empty--> Stopped
//                           |  |  \--hold expired--/     |                        ^
//                           |  +--escalate / grace-------+--> Forcing --tree empty-+
//                           +--tree empty-----------------------------------------> Stopped
//
// Running:  the command runs; signals are forwarded.
// Draining: intake is closed: readiness is off, the pre-stop hook runs, the drain delay elapses,
//           the services stop in their order; the rest of the tree has not been signalled yet
//           (load balancers must stop routing first). A hold (the services' ordered stop) keeps
//           the tree's stop signal back at most until half of the grace left after the drain
//           delay is gone (hold expired): every process gets its stop signal with at least that
//           half to act on it, however long one service takes.
// Stopping: the stop signal went to the tree; we wait for it to empty within the grace budget.
// Forcing:  SIGKILL went to the tree (second termination signal, or the grace ran out).
// Stopped:  every process of the tree is gone and reaped; only the record and the exit remain.
//
// The first trigger runs the teardown exactly once; any later trigger can only escalate. The
// controller is pure logic: time comes from a Clock, effects go out through ShutdownActions, so
// tests drive it with a FakeClock and a recording fake instead of real processes and sleeps.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/shutdown/grace.hpp"

namespace lastcall {

enum class State { Running, Draining, Stopping, Forcing, Stopped };
enum class Event { Trigger, DrainDone, HoldExpired, Escalate, GraceExpired, TreeEmpty, GiveUp };

std::string_view to_string(State s);
std::string_view to_string(Event e);

// The whole transition table. nullopt: the event has no effect in that state (it is ignored).
std::optional<State> transition(State from, Event event);

// What a state change asks the outside world to do. The supervisor implements this.
class ShutdownActions {
  public:
    virtual ~ShutdownActions() = default;
    virtual void state_changed(State from, State to, Event why) = 0;
    virtual void readiness_off() = 0;
    virtual void start_pre_stop() = 0;
    virtual void signal_tree(int sig) = 0;
    virtual void kill_tree() = 0;
    // A termination signal other than the stop signal arrived in the same burst: it goes to the
    // tree once too (a child may handle only SIGTERM), without escalating.
    virtual void forward_extra(int /*sig*/) {}
};

struct ShutdownConfig {
    std::chrono::milliseconds grace{kDefaultGrace};
    std::chrono::milliseconds drain_delay{0};
    // Termination signals closer together than this belong to one burst and do not escalate.
    std::chrono::milliseconds coalesce{100};
    // 0: forward the signal that triggered the shutdown (SIGTERM when the child exited by itself).
    int stop_signal = 0;
    bool has_pre_stop = false;
    // While Forcing, SIGKILL is re-sent at this period (a fork racing the first kill is caught),
    // and after force_limit lastcall stops waiting for processes that SIGKILL cannot end (D state).
    std::chrono::milliseconds force_repeat{100};
    std::chrono::milliseconds force_limit{5000};
};

enum class TriggerKind { None, Signal, MainExited };

struct Trigger {
    TriggerKind kind = TriggerKind::None;
    int signal = 0;
    MonoTime at{};
};

struct Burst {
    int signal;
    MonoTime first;
    int count;
};

// Started: the first stop request. Coalesced: a duplicate within the burst. Forwarded: a distinct
// termination signal within the burst (sent to the tree once, now or with the stop signal).
// Joined: the first external stop request after the main command ended by itself (the teardown
// already runs; it does not escalate). Escalated: a later request: SIGKILL. Ignored: too late.
enum class SignalOutcome { Started, Coalesced, Forwarded, Joined, Escalated, Ignored };

class Shutdown {
  public:
    Shutdown(ShutdownConfig config, const Clock& clock, ShutdownActions& actions);

    // A termination signal arrived (SIGTERM/SIGINT/SIGQUIT).
    // `arrival`: when the signal was dequeued (defaults to now).
    SignalOutcome on_signal(int sig, std::optional<MonoTime> arrival = std::nullopt);
    // The main child ended by itself while Running.
    void on_main_exit();
    void on_pre_stop_done();
    // The supervisor calls this whenever now() >= next_deadline().
    void on_timer();
    // Every process of the tree is gone and reaped.
    void on_tree_empty();
    // A component holds the drain (the ordered stop of services): Draining does not move on to
    // Stopping while a hold is out, until hold_limit() (hold expired; the holder sees Stopping
    // entered while it still holds). The grace deadline still escalates to Forcing, so a hold
    // can never stretch the budget.
    void hold_drain() { ++holds_; }
    void release_drain();

    State state() const { return state_; }
    std::optional<MonoTime> next_deadline() const;
    const Trigger& trigger() const { return trigger_; }
    const std::vector<Burst>& bursts() const { return bursts_; }
    // Time of entry into each state; unset for states never entered.
    const std::optional<MonoTime>& entered(State s) const { return entered_[static_cast<int>(s)]; }
    MonoTime grace_deadline() const { return trigger_.at + config_.grace; }
    // The signal the tree gets (or got) when Stopping is entered.
    int stop_signal() const;
    bool forced() const { return entered(State::Forcing).has_value(); }

  private:
    void start(Trigger t);
    void apply(Event e);
    void maybe_finish_drain();
    // When the drain delay ends (at once when the child ended by itself).
    MonoTime drain_delay_end() const;
    // When a hold stops keeping the tree's stop signal back: half way between the end of the
    // drain delay and the grace deadline, so that a step of an ordered stop that ignores its
    // stop signal cannot use up the budget and leave the steps after it nothing but SIGKILL.
    MonoTime hold_limit() const;
    void repeat_kill();  // SIGKILL to the tree now, and the next pass one interval later
    void enter(State s);

    ShutdownConfig config_;
    const Clock& clock_;
    ShutdownActions& actions_;
    State state_ = State::Running;
    Trigger trigger_;
    std::vector<Burst> bursts_;
    std::size_t burst_begin_ = 0;  // index in bursts_ of the current burst's first signal
    std::vector<int> deferred_;    // distinct signals of the first burst, sent at Stopping
    MonoTime last_signal_{};
    bool pre_stop_running_ = false;
    int holds_ = 0;
    MonoTime next_kill_{};
    std::optional<MonoTime> entered_[5];
};

}  // namespace lastcall
