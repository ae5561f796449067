// SPDX-License-Identifier: Apache-2.0
#include "lastcall/shutdown/shutdown.hpp"

#include <signal.h>

namespace lastcall {

std::string_view to_string(State s) {
    switch (s) {
        case State::Running:
            return "running";
        case State::Draining:
            return "draining";
        case State::Stopping:
            return "stopping";
        case State::Forcing:
            return "forcing";
        case State::Stopped:
            return "stopped";
    }
    return "?";
}

std::string_view to_string(Event e) {
    switch (e) {
        case Event::Trigger:
            return "trigger";
        case Event::DrainDone:
            return "drain done";
        case Event::HoldExpired:
            return "hold expired";
        case Event::Escalate:
            return "escalate";
        case Event::GraceExpired:
            return "grace expired";
        case Event::TreeEmpty:
            return "tree empty";
        case Event::GiveUp:
            return "give up";
    }
    return "?";
}

std::optional<State> transition(State from, Event event) {
    using S = State;
    using E = Event;
    switch (from) {
        case S::Running:
            if (event == E::Trigger) return S::Draining;
            return std::nullopt;
        case S::Draining:
            if (event == E::DrainDone || event == E::HoldExpired) return S::Stopping;
            if (event == E::Escalate || event == E::GraceExpired) return S::Forcing;
            if (event == E::TreeEmpty) return S::Stopped;
            return std::nullopt;
        case S::Stopping:
            if (event == E::Escalate || event == E::GraceExpired) return S::Forcing;
            if (event == E::TreeEmpty) return S::Stopped;
            return std::nullopt;
        case S::Forcing:
            if (event == E::TreeEmpty || event == E::GiveUp) return S::Stopped;
            return std::nullopt;
        case S::Stopped:
            return std::nullopt;
    }
    return std::nullopt;
}

Shutdown::Shutdown(ShutdownConfig config, const Clock& clock, ShutdownActions& actions)
    : config_(config), clock_(clock), actions_(actions) {
    entered_[static_cast<int>(State::Running)] = clock_.now();
}

SignalOutcome Shutdown::on_signal(int sig, std::optional<MonoTime> arrival) {
    MonoTime now = arrival.value_or(clock_.now());
    if (state_ == State::Running) {
        last_signal_ = now;
        burst_begin_ = bursts_.size();
        bursts_.push_back({sig, now, 1});
        start({TriggerKind::Signal, sig, now});
        return SignalOutcome::Started;
    }
    if (state_ == State::Stopped) return SignalOutcome::Ignored;
    if (trigger_.kind == TriggerKind::MainExited && bursts_.empty()) {
        // The main command ended by itself and the teardown of what it left already runs: this
        // is the first stop request anyone sent, not a second one.
        last_signal_ = now;
        burst_begin_ = 0;
        bursts_.push_back({sig, now, 1});
        return SignalOutcome::Joined;
    }
    // A sliding window: duplicates delivered by wrappers and orchestrators arrive within
    // microseconds of each other; a human pressing Ctrl-C again is far slower than the window.
    bool same_burst = !bursts_.empty() && now - last_signal_ < config_.coalesce;
    last_signal_ = now;
    if (same_burst) {
        for (std::size_t i = burst_begin_; i < bursts_.size(); ++i)
            if (bursts_[i].signal == sig) {
                ++bursts_[i].count;
                return SignalOutcome::Coalesced;
            }
        // Only the same signal coalesces: TERM, INT and HUP sent together are three requests,
        // and a child that handles only one of them must get it. A configured stop signal
        // replaces them all, so there is nothing more to send.
        bursts_.push_back({sig, now, 1});
        if (config_.stop_signal != 0 || state_ == State::Forcing) return SignalOutcome::Coalesced;
        if (state_ == State::Draining)
            deferred_.push_back(sig);
        else
            actions_.forward_extra(sig);
        return SignalOutcome::Forwarded;
    }
    burst_begin_ = bursts_.size();
    bursts_.push_back({sig, now, 1});
    if (state_ == State::Forcing) return SignalOutcome::Ignored;
    apply(Event::Escalate);
    return SignalOutcome::Escalated;
}

void Shutdown::on_main_exit() {
    if (state_ != State::Running) return;
    start({TriggerKind::MainExited, 0, clock_.now()});
}

void Shutdown::start(Trigger t) {
    trigger_ = t;
    apply(Event::Trigger);
}

void Shutdown::on_pre_stop_done() {
    pre_stop_running_ = false;
    maybe_finish_drain();
}

void Shutdown::release_drain() {
    if (holds_ > 0) --holds_;
    maybe_finish_drain();
}

MonoTime Shutdown::drain_delay_end() const {
    // A child that ended by itself leaves nobody to route traffic to: no reason to delay.
    bool delay = trigger_.kind == TriggerKind::Signal && config_.drain_delay.count() > 0;
    return delay ? trigger_.at + config_.drain_delay : trigger_.at;
}

MonoTime Shutdown::hold_limit() const {
    MonoTime from = drain_delay_end(), to = grace_deadline();
    return from >= to ? to : from + (to - from) / 2;
}

void Shutdown::maybe_finish_drain() {
    // The pre-stop hook is the user's own wait before any signal (a load balancer's
    // deregistration): it may take what it was given. Only the grace bounds it.
    if (state_ != State::Draining || pre_stop_running_) return;
    MonoTime now = clock_.now();
    if (now < drain_delay_end()) return;
    if (holds_ == 0) return apply(Event::DrainDone);
    if (now >= hold_limit()) apply(Event::HoldExpired);
}

void Shutdown::on_timer() {
    MonoTime now = clock_.now();
    switch (state_) {
        case State::Draining:
        case State::Stopping:
            if (now >= grace_deadline()) {
                apply(Event::GraceExpired);
            } else {
                maybe_finish_drain();
            }
            break;
        case State::Forcing:
            if (now >= *entered(State::Forcing) + config_.force_limit) {
                apply(Event::GiveUp);
            } else if (now >= next_kill_) {
                repeat_kill();
            }
            break;
        default:
            break;
    }
}

void Shutdown::on_tree_empty() {
    apply(Event::TreeEmpty);
}

std::optional<MonoTime> Shutdown::next_deadline() const {
    switch (state_) {
        case State::Draining: {
            MonoTime d = grace_deadline();
            if (pre_stop_running_) return d;
            // Held past the drain delay, the next step is the hold's limit; waking for the
            // delay's end again would spin.
            MonoTime delay_end = drain_delay_end();
            if (holds_ > 0) return std::min(d, std::max(delay_end, hold_limit()));
            if (trigger_.kind == TriggerKind::Signal) d = std::min(d, delay_end);
            return d;
        }
        case State::Stopping:
            return grace_deadline();
        case State::Forcing:
            return std::min(next_kill_, *entered(State::Forcing) + config_.force_limit);
        default:
            return std::nullopt;
    }
}

void Shutdown::apply(Event e) {
    auto to = transition(state_, e);
    if (!to) return;
    State from = state_;
    enter(*to);
    actions_.state_changed(from, *to, e);
    switch (*to) {
        case State::Draining:
            // Readiness goes off before anything else: probes and balancers stop sending work
            // first, and only then is anything signalled.
            actions_.readiness_off();
            if (config_.has_pre_stop && trigger_.kind == TriggerKind::Signal) {
                pre_stop_running_ = true;
                actions_.start_pre_stop();
            }
            maybe_finish_drain();
            break;
        case State::Stopping: {
            int sig = stop_signal();
            actions_.signal_tree(sig);
            for (int extra : deferred_)
                if (extra != sig) actions_.forward_extra(extra);
            deferred_.clear();
            break;
        }
        case State::Forcing:
            repeat_kill();
            break;
        default:
            break;
    }
}

void Shutdown::repeat_kill() {
    actions_.kill_tree();
    // Counted from the end of the pass: a /proc walk of thousands of dying processes can take
    // longer than the interval, and passes back to back would leave the loop no turn to reap
    // what they killed (a fork bomb's force took 0.5 s longer that way).
    next_kill_ = clock_.now() + config_.force_repeat;
}

int Shutdown::stop_signal() const {
    if (config_.stop_signal != 0) return config_.stop_signal;
    return trigger_.kind == TriggerKind::Signal ? trigger_.signal : SIGTERM;
}

void Shutdown::enter(State s) {
    state_ = s;
    entered_[static_cast<int>(s)] = clock_.now();
}

}  // namespace lastcall
