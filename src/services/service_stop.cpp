// SPDX-License-Identifier: Apache-2.0
// The ordered stop: services in reverse dependency order, each through its Unit (process/unit.hpp),
// its grace capped by the global one, then the kill of its scopes.
#include "lastcall/services/service_manager.hpp"
#include "service_manager_internal.hpp"

#include "lastcall/metrics/metrics.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>

#include "lastcall/core/json.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/utf8.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/services/service_status.hpp"

namespace lastcall {

void ServiceManager::state_changed(State from, State to) {
    if (from == State::Running && to == State::Draining) return begin_ordered_stop();
    // Stopping while this order still holds the drain: the shutdown's hold expired (half of the
    // grace after the drain delay, Shutdown::hold_limit), and the rest of the tree gets its stop
    // signal now. So does every service still running, whatever depends on it.
    if (to == State::Stopping && holding_drain_) return expire_order();
    if (to == State::Forcing || to == State::Stopped) end_ordered_stop(to == State::Forcing);
}

void ServiceManager::begin_ordered_stop() {
    shutting_down_ = true;
    MonoTime now = host_->clock().now();
    global_deadline_ = now + host_->settings().grace;
    for (auto& s : services_) {
        if (s.state == ServiceState::Pending || s.state == ServiceState::Backoff) {
            // A start still waiting (for its dependencies or its back-off) is refused now: the
            // report counts it like a start turned away by admission.
            host_->admission().refuse(s.starts > 0 ? EntryPath::Restart : EntryPath::ServiceStart);
            ++refused_;
            s.wake.reset();
            apply(s, ServiceEvent::StopRequested);
        }
        cancel_probe(s);
    }
    // Nothing is signalled from inside the supervisor's state change: the stop starts from the
    // timer, after the drain delay (readiness off and the delay come before any signal).
    host_->hold_drain();
    holding_drain_ = true;
    stop_begin_ = now + host_->settings().drain_delay;
    if (opts_.narrate) {
        // One line where foreman prints `sending SIGTERM to all processes`, and what a second
        // Ctrl-C does (nothing else says it).
        out_->say(kOwnName, "stopping every process (" +
                                std::string(signal_name(services_.front().spec.stop_signal)) +
                                "); Ctrl-C again to kill them at once");
    }
    spdlog::log(lifecycle_level(opts_.narrate),
                "stopping {} service(s) in reverse dependency order", services_.size());
    rearm();
}

void ServiceManager::expire_order() {
    order_expired_ = true;
    bool held = std::any_of(services_.begin(), services_.end(), [](const Service& s) {
        return s.state == ServiceState::Starting || s.state == ServiceState::Ready;
    });
    if (held)
        spdlog::warn(
            "services: half of the grace is gone: every service still running gets its "
            "stop signal now, whatever depends on it");
    stop_eligible();
    rearm();
}

bool ServiceManager::stop_done(Service& s) {
    switch (s.state) {
        case ServiceState::Starting:
        case ServiceState::Ready:
        case ServiceState::Cleaning:
            return false;
        case ServiceState::Stopping:
            // A dependent that had to be killed is as good as gone: what depends on it must
            // not lose its own grace waiting for the kernel to finish the kill.
            return s.unit->killed();
        case ServiceState::Exited:
        case ServiceState::Failed:
            // Its leader is gone, but not necessarily what it left (a main service's leftovers
            // at the stop it asked for): its dependencies wait for those too.
            return members_of(s).empty();
        default:
            return true;
    }
}

// Reverse dependency order, in parallel: every service that nothing running depends on gets its
// stop signal now; one that something depends on, once all its dependents are done.
void ServiceManager::stop_eligible() {
    // A service whose stop is done as soon as it begins (no member left, or leftovers already
    // killed while running) lets the services it depends on stop at once: those come earlier in
    // the list and were passed over, so the pass repeats. Each repeat needs a state change.
    for (bool again = true; again;) again = stop_eligible_pass();
}

bool ServiceManager::stop_eligible_pass() {
    bool again = false;
    bool waiting = false;
    for (std::size_t i = 0; i < services_.size(); ++i) {
        Service& s = services_[i];
        if (s.state == ServiceState::Stopping) {
            waiting = true;
            continue;
        }
        if (s.state != ServiceState::Starting && s.state != ServiceState::Ready &&
            s.state != ServiceState::Cleaning && s.state != ServiceState::Exited &&
            s.state != ServiceState::Failed)
            continue;
        bool dependents_done = true;
        for (auto& d : services_)
            if (&d != &s && std::count(d.deps.begin(), d.deps.end(), i) && !stop_done(d))
                dependents_done = false;
        if (!dependents_done && !order_expired_) {
            waiting = true;
            continue;
        }
        ServiceState before = s.state;
        begin_stop(s);
        if (s.state != before && stop_done(s)) again = true;
        waiting = waiting || s.state == ServiceState::Stopping;
    }
    if (again) return true;
    if (!waiting && holding_drain_) {
        holding_drain_ = false;
        spdlog::log(lifecycle_level(opts_.narrate), "all services stopped");
        host_->release_drain();
    }
    return false;
}

void ServiceManager::begin_stop(Service& s) {
    MonoTime now = host_->clock().now();
    bool exited = s.state == ServiceState::Exited || s.state == ServiceState::Failed;
    if (members_of(s).empty()) {
        // Nothing left to stop. A running one's leader is a zombie whose reap is on the way;
        // an exited one keeps its state: it ended by itself, lastcall did not stop it.
        if (!exited && apply(s, ServiceEvent::StopRequested)) apply(s, ServiceEvent::TreeGone);
        return;
    }
    // Per-service graces are capped by the global one: the whole stop is bounded by it. Leftovers
    // already being stopped keep the grace they had since the leader's exit.
    Millis grace = s.spec.grace.value_or(host_->settings().grace);
    MonoTime deadline = std::min(now + grace, global_deadline_);
    apply(s, ServiceEvent::StopRequested);
    // A cleanup under way keeps the grace it had since the leader's exit, if it ends first.
    int n = s.unit->stop(s.spec.stop_signal, deadline);
    deadline = *s.unit->deadline();
    // Narrating, the one line of begin_ordered_stop said it for every service.
    spdlog::log(lifecycle_level(opts_.narrate), "service {}: sent {} to {} process(es), grace {}",
                s.spec.name, signal_name(s.spec.stop_signal), n,
                format_duration(std::chrono::duration_cast<Millis>(deadline - now)));
    s.wake = now + kStopPoll;
    rearm();
}

// The stop of a service's tree under way (Stopping), or of what its last instance left behind
// (Cleaning): done once no member is left; the kill at the end of the grace.
void ServiceManager::check_stop(Service& s) {
    bool cleaning = s.state == ServiceState::Cleaning;
    if (s.state != ServiceState::Stopping && !cleaning) return;
    MonoTime now = host_->clock().now();
    auto members = members_of(s);
    s.unit->saw(members);
    auto deadline = s.unit->deadline();
    bool stuck = cleaning && s.unit->killed() && deadline && now >= *deadline + kKillSettle;
    if (stuck)
        spdlog::warn(
            "service {}: {} process(es) it left behind still there {} after SIGKILL "
            "(uninterruptible sleep?)",
            s.spec.name, members.size(), format_duration(kKillSettle));
    if (cleaning && (members.empty() || stuck)) {
        s.wake.reset();
        if (members.empty())
            s.unit->gone();
        else
            s.unit->end_rounds();
        retire_scopes(s);
        conclude_instance(s);
        return;
    }
    if (members.empty()) {
        s.wake.reset();
        s.unit->gone();
        apply(s, ServiceEvent::TreeGone);
        // Narrating, its exit line said it, unless it took a SIGKILL.
        if (!opts_.narrate || s.forced()) tell(s, s.forced() ? "stopped (forced)" : "stopped");
        retire_scopes(s);
        stop_eligible();
        return;
    }
    if (!s.unit->killed() && deadline && now >= *deadline) {
        s.unit->kill();
        if (cleaning && !shutting_down_) {
            s.killed_while_running = true;
            ++s.leftovers_killed;
        }
        int n = kill_members(s);
        host_->record_force(ForceKind::Sigkill, "service " + s.spec.name + ": grace", n);
        spdlog::warn(
            "service {}: still {} process(es){} at the end of its grace: sent SIGKILL to {}",
            s.spec.name, members.size(), cleaning ? " it left behind" : "", n);
        // Its dependencies need not wait for the kernel to finish the kill.
        if (!cleaning) stop_eligible();
    }
    if (s.unit->round_owed()) {
        // The last round was cut by its budget: members it had not reached yet get the stop
        // signal now, not only the kill at the end of the grace.
        int n = s.unit->continue_stop();
        spdlog::debug("service {}: sent {} to {} more process(es)", s.spec.name,
                      signal_name(s.spec.stop_signal), n);
    }
    // Processes born since the stop signal are not signalled again: they are the service's
    // cleanup helpers, and the kill at the end of the grace covers them.
    s.wake = now + kStopPoll;
}

void ServiceManager::end_ordered_stop(bool forced) {
    stop_begin_.reset();
    holding_drain_ = false;
    for (auto& s : services_) {
        s.wake.reset();
        cancel_probe(s);
        // Still running when the tree's SIGKILL goes out (a second SIGTERM, the grace's end):
        // killed without its stop signal, which is not an exit of its own.
        bool running = s.state == ServiceState::Starting || s.state == ServiceState::Ready;
        if (forced && ((running && s.pid > 0) || s.state == ServiceState::Cleaning))
            apply(s, ServiceEvent::StopRequested);
        if (forced && s.state == ServiceState::Stopping) s.killed_by_shutdown();
        s.unit->end_rounds();
        if (!forced) {
            // Every process of the tree is gone: so is every service's.
            if (running || s.state == ServiceState::Cleaning) apply(s, ServiceEvent::StopRequested);
            apply(s, ServiceEvent::TreeGone);
        }
    }
    write_status_now();
    rearm();
}

void ServiceManager::before_force(Event /*why*/) {
    if (opts_.narrate && !services_.empty()) out_->say(kOwnName, "killing every process (SIGKILL)");
    for (auto& s : services_) {
        if (s.state == ServiceState::Stopping) s.killed_by_shutdown();
        s.unit->end_rounds();  // the tree's kill needs no hold
    }
}

std::vector<ProcInfo> ServiceManager::members_of(Service& s) {
    std::vector<ProcInfo> out;
    std::set<pid_t> seen;
    auto add = [&](UnitScope& scope) {
        for (auto& p : scope.members())
            if (seen.insert(p.pid).second) out.push_back(std::move(p));
    };
    if (s.scope) add(*s.scope);
    for (auto& r : s.retired) add(*r);
    return out;
}

int ServiceManager::kill_members(Service& s) {
    int n = 0;
    auto record = [](const ProcInfo&) { return true; };
    if (s.scope) n += s.scope->kill(record);
    for (auto& r : s.retired) n += r->kill(record);
    return n;
}

void ServiceManager::retire_scopes(Service& s) {
    // Empty scopes of earlier instances are removed as soon as they are empty; one that the
    // kernel still counts (EBUSY) goes with the instance's cgroup at exit.
    std::erase_if(s.retired, [](auto& r) { return r->members().empty() && r->remove().ok(); });
}

}  // namespace lastcall
