// SPDX-License-Identifier: Apache-2.0
// The service manager's lifecycle: attach, starts in dependency order, an instance's end, restarts
// with back-off and limits, the timer.
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

ServiceManager::ServiceManager(std::vector<ServiceSpec> specs, ServiceManagerOptions options)
    : opts_(std::move(options)), out_(opts_.output) {
    if (!out_) out_ = std::make_shared<UnitOutput>(STDOUT_FILENO, false);
    services_.reserve(specs.size());
    for (auto& s : specs) {
        out_->add_name(s.name);
        services_.emplace_back(std::move(s));
    }
    if (opts_.narrate) out_->add_name(kOwnName);
    for (auto& s : services_)
        for (const auto& d : s.spec.depends_on)
            for (std::size_t i = 0; i < services_.size(); ++i)
                if (services_[i].spec.name == d) s.deps.push_back(i);
}

ServiceManager::~ServiceManager() = default;

Status ServiceManager::attach(Supervisor& sup) {
    return attach_host(sup.unit_host());
}

Status ServiceManager::attach_host(UnitHost& host) {
    host_ = &host;
    attach_output(*out_, host);
    for (auto& s : services_)
        s.unit = std::make_unique<Unit>(
            host.units(), "service " + s.spec.name, host.clock(),
            [this, &s] { return members_of(s); },
            [&s] {
                std::vector<FreezeHold> holds;
                if (s.scope) holds.push_back(s.scope->freeze());
                for (auto& r : s.retired) holds.push_back(r->freeze());
                return holds;
            },
            [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); });
    for (auto& s : services_) s.unit->set_reach(s.spec.kill_scope);
    auto timer = host.new_timer([this] { on_timer(); });
    if (!timer) return timer.error();
    timer_ = std::move(*timer);
    spdlog::log(lifecycle_level(opts_.narrate), "starting {} service(s) in dependency order",
                services_.size());
    write_status();
    start_eligible();
    rearm();
    return Ok{};
}

std::optional<ServiceState> ServiceManager::state_of(std::string_view name) const {
    for (const auto& s : services_)
        if (s.spec.name == name) return s.state;
    return std::nullopt;
}

// lastcall's word about a service. Narrating (`lastcall up`): in the service's own column, in
// order with its lines, as foreman says `web.1 | exited with code 0`, and in the log only at -v
// (the same lines twice, long and timestamped, were most of what a Ctrl-C printed). Otherwise a
// line of the log.
void ServiceManager::tell(const Service& s, const std::string& text) {
    if (opts_.narrate) out_->say(s.spec.name, text);
    spdlog::log(lifecycle_level(opts_.narrate), "service {}: {}", s.spec.name, text);
}

bool ServiceManager::apply(Service& s, ServiceEvent e) {
    auto to = service_transition(s.state, e);
    if (!to) return false;
    spdlog::debug("service {}: {} -> {} ({})", s.spec.name, to_string(s.state), to_string(*to),
                  to_string(e));
    s.state = *to;
    write_status();
    // After the current event: the service's own lines (why it failed) come first.
    if ((s.state == ServiceState::Exited || s.state == ServiceState::Failed) && opts_.end_when_idle)
        host_->post([this] { end_if_idle(); });
    return true;
}

// Every service ended for good, and nothing else is supervised (end_when_idle): an init with
// nothing left to run ends, so that a container is restarted instead of looking alive (foreman
// ends when a process does). The request is queued (UnitHost), not handled inside apply().
// A service that ended for good on a non-zero code failed as much as one past its restart limit:
// a lone `restart = "no"` service that exited 4 ended the run with 0, and a container's
// on-failure restart policy never restarted it.
void ServiceManager::end_if_idle() {
    if (!opts_.end_when_idle || shutting_down_ || idle_ended_) return;
    std::string failed;
    for (const auto& s : services_) {
        if (s.state != ServiceState::Exited && s.state != ServiceState::Failed) return;
        std::string why;
        if (s.state == ServiceState::Failed)
            why = "failed";
        else if (s.last_status && exit_code_of(*s.last_status) != 0)
            why = describe_wait_status(*s.last_status);
        if (!why.empty()) failed += (failed.empty() ? "" : ", ") + s.spec.name + " " + why;
    }
    idle_ended_ = true;
    if (failed.empty())
        spdlog::info("every service has ended: nothing left to supervise, exiting");
    else
        spdlog::error("every service has ended ({}): nothing left to supervise, exiting 1", failed);
    host_->request_shutdown(
        failed.empty() ? 0 : 1,
        failed.empty() ? "every service has ended" : "every service has ended (" + failed + ")");
}

// In slices of the loop: at most kStartsPerSlice starts, then the rest on a later turn, after the
// loop's other work. By count, not time: a Procfile's processes (fewer than a slice) all start
// before any exit is handled, as foreman starts them. A start is a spawn (a fork, tenths of a
// millisecond to milliseconds under load): 1,000 services started in one turn held a SIGTERM for
// seconds, and about 900 of them were started after it. Now the signal waits for one slice at most,
// and what is still pending when the shutdown begins is refused (begin_ordered_stop), never
// started. The status file is written once per slice, not once per start (N starts rewrote a file
// of N services N times).
void ServiceManager::start_eligible() {
    start_posted_ = false;
    if (shutting_down_) return;
    std::size_t started = 0;
    batching_status_ = true;
    for (auto& s : services_) {
        if (s.state != ServiceState::Pending) continue;
        bool deps_ready = std::all_of(s.deps.begin(), s.deps.end(),
                                      [&](std::size_t d) { return services_[d].ever_ready; });
        if (!deps_ready) continue;
        if (started >= kStartsPerSlice) {
            if (!start_posted_) host_->post([this] { start_eligible(); });
            start_posted_ = true;
            break;
        }
        start(s);
        ++started;
    }
    batching_status_ = false;
    if (status_dirty_) write_status();
}

void ServiceManager::start(Service& s) {
    // A start (first or restart) is a unit of work like any other: once the shutdown has begun,
    // admission refuses it, and nothing new appears while the tree is being drained.
    auto ticket =
        host_->admission().try_admit(s.starts > 0 ? EntryPath::Restart : EntryPath::ServiceStart);
    if (!ticket) {
        ++refused_;
        spdlog::info("service {}: not started, the shutdown has begun", s.spec.name);
        apply(s, ServiceEvent::RestartRefused);
        return;
    }
    if (s.scope) s.retired.push_back(std::move(s.scope));
    s.scope = host_->new_scope("svc-" + s.spec.name + "." + std::to_string(s.starts + 1));
    SpawnSpec spec;
    spec.argv = s.spec.argv;
    spec.env = service_environment(opts_.extra_env, s.spec.env);
    spec.session = SpawnSpec::Session::NewSession;
    spec.cgroup_fd = s.scope->spawn_cgroup_fd();
    spec.workdir = s.spec.workdir;
    spec.credentials = s.spec.user;  // its `user`/`group`, else --user (main.cpp)
    spec.no_new_privs = host_->settings().no_new_privs;
    // Its stdout and stderr come out prefixed with its name (process/unit_output.hpp).
    UniqueFd out_write;
    int out_stream = -1;
    if (auto c = out_->capture(s.spec.name)) {
        out_write = std::move(c->write_end);
        out_stream = c->stream;
        spec.stdout_fd = out_write.get();
    } else {
        spdlog::warn("service {}: {}; its output is not prefixed", s.spec.name, c.error().message);
    }
    // A ready file left by an earlier run must not count as this instance being ready.
    // Through a checked directory: the service may have planted links on the way.
    if (s.spec.ready.kind == ReadyCheck::Kind::File) (void)remove_file_safely(s.spec.ready.file);

    auto result = host_->spawn(spec);
    out_write.reset();  // only the service holds the write end now: EOF means it and its tree left
    s.output = out_stream;
    s.started = host_->clock().now();
    s.started_wall = std::time(nullptr);
    ++s.starts;
    s.recent_starts.push_back(s.started);
    s.told_waiting = false;
    // Once per process, across instances: a leftover of an earlier instance that outlived its
    // SIGKILL (uninterruptible sleep) is not a new member to signal at the next stop.
    s.unit->restart();
    s.killed_while_running = false;
    apply(s, ServiceEvent::Spawned);
    if (!result.child) {
        ticket->rollback();
        int code = result.failure ? result.failure->exit_code() : 1;
        spdlog::error("service {}: {}", s.spec.name,
                      result.failure ? result.failure->message() : result.error->message);
        instance_ended(s, W_EXITCODE(code, 0));
        return;
    }
    ticket->started();
    s.ticket = std::move(ticket);
    s.pid = result.child->pid;
    s.unit->set_session(s.pid);  // spawned with setsid: the report names its processes
    s.scope->started(s.pid);
    // The leader of its own session and group (setsid): kill_scope group and child count from it.
    s.unit->led_by(s.pid);
    tell(s, "started pid " + std::to_string(s.pid) +
                (s.starts > 1 ? " (restart " + std::to_string(s.restarts()) + ")" : ""));
    write_status();
    if (s.spec.ready.kind == ReadyCheck::Kind::None) {
        mark_ready(s);
    } else {
        s.wake = host_->clock().now();
        rearm();
    }
}

void ServiceManager::mark_ready(Service& s) {
    if (!apply(s, ServiceEvent::ReadyPassed)) return;
    s.wake.reset();
    bool first = !s.ever_ready;
    s.ever_ready = true;
    if (s.spec.ready.kind != ReadyCheck::Kind::None) tell(s, "ready");
    // Its dependents start in the next slice, never from inside this one: a start that is ready
    // at once (no ready check) calling start_eligible() again nested the slices into one turn.
    if (first && !start_posted_) {
        start_posted_ = true;
        host_->post([this] { start_eligible(); });
    }
}

void ServiceManager::instance_ended(Service& s, int status) {
    MonoTime now = host_->clock().now();
    s.pid = -1;
    if (s.ticket) s.ticket->release();
    s.ticket.reset();
    s.last_status = status;
    cancel_probe(s);
    // What it wrote before it went comes before the line that says it went.
    out_->drain(s.output);
    tell(s, describe_wait_status(status));
    if (s.state == ServiceState::Stopping) {
        check_stop(s);
        return;
    }
    if (shutting_down_) {
        apply(s, ServiceEvent::ExitedFinal);
        return;
    }
    s.ended = now;
    // What the instance left behind gets its stop signal, and its grace to go: a restarted
    // service must not find the old instance still holding its port, and a finished one must
    // not leave strays.
    Millis grace = s.spec.grace.value_or(host_->settings().grace);
    int sent = s.unit->stop(s.spec.stop_signal, now + grace);
    if (sent > 0)
        tell(s, "sent " + std::string(signal_name(s.spec.stop_signal)) + " to " +
                    std::to_string(sent) + " process(es) it left behind");
    if (s.spec.main) {
        apply(s, ServiceEvent::ExitedFinal);
        // A Procfile has no main service: its first exit stops the rest (begin_ordered_stop says
        // so in the columns).
        if (!opts_.narrate) spdlog::info("service {} is main: stopping everything", s.spec.name);
        host_->request_shutdown(exit_code_of(status),
                                "service " + s.spec.name + " " + describe_wait_status(status));
        return;
    }
    // Something just signalled counts as left (if it is gone already, the first poll finds the
    // scope empty); only when nothing was signalled is the scope looked at again (leftovers
    // signalled before, by a round cut by its budget).
    if (sent > 0 || !members_of(s).empty()) {
        apply(s, ServiceEvent::LeftBehind);
        tell(s, "waiting up to " + format_duration(grace) + " for what it left behind to exit");
        s.wake = now + kStopPoll;
        rearm();
        return;
    }
    conclude_instance(s);
}

// The instance is over, and so is everything it left behind: the service restarts, ends or fails.
void ServiceManager::conclude_instance(Service& s) {
    // Its scope goes now (a cgroup directory and its descriptor): kept until the next start, and
    // pruned only by a stop, a crash loop piled up one per restart (issue 42).
    if (s.scope) s.retired.push_back(std::move(s.scope));
    retire_scopes(s);
    MonoTime now = host_->clock().now();
    int status = s.last_status.value_or(0);
    if (shutting_down_) {
        apply(s, ServiceEvent::ExitedFinal);
        return;
    }
    if (should_restart(s.spec.restart, status) && limit_reached(s, s.ended)) {
        apply(s, ServiceEvent::LimitReached);
        spdlog::error("service {}: failed: {} starts within {} (restart_limit), not restarted",
                      s.spec.name, s.recent_starts.size(),
                      format_duration(s.spec.restart_limit.interval));
        fail_dependents(s);
    } else if (should_restart(s.spec.restart, status)) {
        // The back-off counts from the exit: the time spent stopping leftovers is part of it.
        Millis delay = s.backoff.next_delay(s.started, s.ended);
        bool cleaned = s.state == ServiceState::Cleaning;
        apply(s, ServiceEvent::ExitedRestart);
        s.wake = std::max(now, s.ended + delay);
        Millis left = std::chrono::duration_cast<Millis>(*s.wake - now);
        spdlog::info("service {}: restarting in {}{} (restart = {}, {} quick exit(s) in a row)",
                     s.spec.name, format_duration(cleaned ? left : delay),
                     cleaned ? ", what it left behind is gone" : "", to_string(s.spec.restart),
                     s.backoff.consecutive());
        tell_waiting(s);
    } else {
        apply(s, ServiceEvent::ExitedFinal);
        // Never ready and not coming back: what waits for it would wait forever.
        if (!s.ever_ready) fail_dependents(s);
    }
    rearm();
}

bool ServiceManager::limit_reached(Service& s, MonoTime now) {
    while (!s.recent_starts.empty() &&
           now - s.recent_starts.front() > s.spec.restart_limit.interval)
        s.recent_starts.pop_front();
    return static_cast<int>(s.recent_starts.size()) >= s.spec.restart_limit.burst;
}

// Every service still waiting for `failed` (directly or through another) will never start.
void ServiceManager::fail_dependents(Service& failed) {
    std::size_t index = static_cast<std::size_t>(&failed - services_.data());
    for (auto& s : services_) {
        if (s.state != ServiceState::Pending) continue;
        if (std::find(s.deps.begin(), s.deps.end(), index) == s.deps.end()) continue;
        apply(s, ServiceEvent::DependencyFailed);
        spdlog::error(
            "service {}: not started: it depends on {}, which {}", s.spec.name, failed.spec.name,
            failed.state == ServiceState::Failed ? "failed" : "exited without being ready");
        fail_dependents(s);
        if (s.spec.main && !shutting_down_) {
            // The run exists for its main service: one that can never start ends the run, with
            // the dependency's code (1 if that was 0). Waiting looked healthy, and a later stop
            // was reported clean with exit code 0.
            int code = failed.last_status ? exit_code_of(*failed.last_status) : 1;
            spdlog::error("service {} is main and can never start: stopping everything",
                          s.spec.name);
            host_->request_shutdown(code == 0 ? 1 : code,
                                    "service " + s.spec.name + " can never start");
        }
    }
}

// A dependent that waits says what for, once per wait: silence looked like a hang.
void ServiceManager::tell_waiting(Service& restarting) {
    std::size_t index = static_cast<std::size_t>(&restarting - services_.data());
    for (auto& s : services_) {
        if (s.state != ServiceState::Pending || s.told_waiting) continue;
        if (std::find(s.deps.begin(), s.deps.end(), index) == s.deps.end()) continue;
        s.told_waiting = true;
        spdlog::warn(
            "service {}: waiting for {}, which exited before it was ready and is "
            "restarting",
            s.spec.name, restarting.spec.name);
    }
}

void ServiceManager::reaped(const Reaped& r) {
    for (auto& s : services_) {
        if (s.pid == r.pid) return instance_ended(s, r.status);
        if (s.probe_pid == r.pid) {
            s.probe_pid = -1;
            end_probe_scope(s);
            if (s.state == ServiceState::Starting)
                probe_finished(s, WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
            return;
        }
    }
    // A member of a service's tree that lastcall reaped (an orphan): the stop may be complete.
    for (auto& s : services_)
        if (s.state == ServiceState::Stopping || s.state == ServiceState::Cleaning) check_stop(s);
}

void ServiceManager::on_timer() {
    MonoTime now = host_->clock().now();
    if (stop_begin_ && now >= *stop_begin_) {
        stop_begin_.reset();
        stop_eligible();
    }
    for (auto& s : services_) {
        if (!s.wake || *s.wake > now) continue;
        s.wake.reset();
        switch (s.state) {
            case ServiceState::Backoff:
                start(s);
                break;
            case ServiceState::Starting:
                probe(s);
                break;
            case ServiceState::Stopping:
            case ServiceState::Cleaning:
                check_stop(s);
                break;
            default:
                break;
        }
    }
    rearm();
}

void ServiceManager::rearm() {
    if (!timer_) return;
    std::optional<MonoTime> next = stop_begin_;
    for (const auto& s : services_)
        if (s.wake) next = next ? std::min(*next, *s.wake) : *s.wake;
    if (auto st = timer_->arm(next); !st) spdlog::error("services timer: {}", st.error().message);
}

// ---- readiness ----

}  // namespace lastcall
