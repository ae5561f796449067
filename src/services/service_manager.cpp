// SPDX-License-Identifier: Apache-2.0
#include "lastcall/services/service_manager.hpp"

#include "lastcall/shutdown/metrics.hpp"

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
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/services/service_status.hpp"

namespace lastcall {

namespace {

// While a service's tree drains, it is enumerated again at this period: members that exit are
// not all lastcall's children, so no SIGCHLD tells about them.
constexpr Millis kStopPoll{20};
// How long a killed leftover may take to go before the service restarts beside it anyway: a
// process in uninterruptible sleep (a hung NFS mount) dies only when the kernel lets it, and the
// service must not stay down for that.
constexpr Millis kKillSettle{1000};
// A readiness probe (connect or command) that takes longer is abandoned and tried again.
constexpr Millis kProbeTimeout{5000};
// Captured output read per stream and turn of the event loop (see on_output).
constexpr std::size_t kOutputPerTurn = 64 * 1024;
// Longest partial line kept before it is printed anyway.
constexpr std::size_t kMaxLine = 64 * 1024;

constexpr const char* kColors[] = {"36", "33", "32", "35", "34", "31",
                                   "96", "93", "92", "95", "94", "91"};

// lastcall's environment, then the .env file's, then the service's own: later wins, once.
std::vector<std::string> service_environment(const std::vector<std::string>& dotenv,
                                             const std::vector<std::string>& own) {
    Environment env = Environment::inherited(UnitKind::Service);
    for (const auto& kv : dotenv) env.set(kv);
    for (const auto& kv : own) env.set(kv);
    return std::move(env).entries();
}

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // a closed terminal: the lines have nowhere to go
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

}  // namespace

struct ServiceManager::Service {
    explicit Service(ServiceSpec s) : spec(std::move(s)), backoff(spec.backoff) {}

    ServiceSpec spec;
    ServiceState state = ServiceState::Pending;
    Backoff backoff;
    std::vector<std::size_t> deps;
    bool ever_ready = false;  // dependents wait for this, not for "ready right now"

    std::optional<Ticket> ticket;  // the admitted unit of work of the current instance
    pid_t pid = -1;                // leader of the current instance; -1 when none
    // The processes of the current instance, and of earlier instances while anything of them
    // is left (a daemon an instance forked must still be stopped with its service).
    std::unique_ptr<UnitScope> scope;
    std::vector<std::unique_ptr<UnitScope>> retired;
    MonoTime started{};
    std::time_t started_wall = 0;
    int starts = 0;
    std::deque<MonoTime> recent_starts;  // within restart_limit.interval of the last one
    bool told_waiting = false;           // "waiting for X" said once per wait
    std::optional<int> last_status;
    MonoTime ended{};              // when the last instance's leader exited
    std::optional<MonoTime> wake;  // Backoff: restart; Starting: probe; Stopping: poll

    pid_t probe_pid = -1;
    // A ready.exec probe is a unit of its own: what it starts (a setsid daemon) ends with it.
    std::unique_ptr<UnitScope> probe_scope;
    int probes = 0;
    UniqueFd probe_sock;

    std::set<ProcKey> signalled;  // got the stop signal: never a second time
    // Born to a signalled process during its stop (sent_stop_signal): not the tree's to signal.
    // Filled from a const query, hence mutable; cleared with `signalled` at each start.
    mutable std::set<pid_t> helpers;
    // Signalled before this stop began (what a crashed or main instance left behind): a process
    // they start is their cleanup's helper, not a member the stop missed.
    std::set<pid_t> told_before;
    // Its members at the last look of a stop in progress: all of them are the service's to stop.
    std::set<pid_t> last_members;
    StopRounds stop_rounds;  // its stop passes, when the budget cuts them
    std::optional<MonoTime> stop_deadline;
    // This instance's stop or cleanup sent SIGKILL (no second kill, and stop_done()).
    bool killed = false;
    // ... while lastcall was running: what an exited instance left behind, killed at the end of
    // its grace, is a fact of the run, not a forced stop (the report's `forced` is `killed`
    // without it) until the shutdown forces the service itself (before_force, a forced end).
    bool killed_while_running = false;
    int leftovers_killed = 0;  // the report's count of those kills

    int restarts() const { return starts > 1 ? starts - 1 : 0; }
    // The report's `forced`, and the "(forced)" of the stop's log line.
    bool forced() const { return killed && !killed_while_running; }
    // The shutdown killed the service itself (the tree's kill, a forced end).
    void killed_by_shutdown() {
        killed = true;
        killed_while_running = false;
    }
};

ServiceManager::ServiceManager(std::vector<ServiceSpec> specs, ServiceManagerOptions options)
    : opts_(std::move(options)) {
    services_.reserve(specs.size());
    for (auto& s : specs) {
        name_width_ = std::max(name_width_, s.name.size());
        services_.emplace_back(std::move(s));
    }
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
    auto timer = host.new_timer([this] { on_timer(); });
    if (!timer) return timer.error();
    timer_ = std::move(*timer);
    spdlog::info("starting {} service(s) in dependency order", services_.size());
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

bool ServiceManager::apply(Service& s, ServiceEvent e) {
    auto to = service_transition(s.state, e);
    if (!to) return false;
    spdlog::debug("service {}: {} -> {} ({})", s.spec.name, to_string(s.state), to_string(*to),
                  to_string(e));
    s.state = *to;
    write_status();
    return true;
}

void ServiceManager::start_eligible() {
    if (shutting_down_) return;
    for (auto& s : services_) {
        if (s.state != ServiceState::Pending) continue;
        bool deps_ready = std::all_of(s.deps.begin(), s.deps.end(),
                                      [&](std::size_t d) { return services_[d].ever_ready; });
        if (deps_ready) start(s);
    }
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
    UniqueFd out_read, out_write;
    if (s.spec.capture_output) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) == 0) {
            out_read.reset(fds[0]);
            out_write.reset(fds[1]);
            ::fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
            spec.stdout_fd = out_write.get();
        } else {
            spdlog::warn("service {}: pipe2: {}; its output is not prefixed", s.spec.name,
                         std::strerror(errno));
        }
    }
    // A ready file left by an earlier run must not count as this instance being ready.
    // Through a checked directory: the service may have planted links on the way.
    if (s.spec.ready.kind == ReadyCheck::Kind::File) (void)remove_file_safely(s.spec.ready.file);

    auto result = host_->spawn(spec);
    out_write.reset();  // only the service holds the write end now: EOF means it and its tree left
    std::size_t index = static_cast<std::size_t>(&s - services_.data());
    s.started = host_->clock().now();
    s.started_wall = std::time(nullptr);
    ++s.starts;
    s.recent_starts.push_back(s.started);
    s.told_waiting = false;
    // Once per process, across instances: a leftover of an earlier instance that outlived its
    // SIGKILL (uninterruptible sleep) is not a new member to signal at the next stop.
    if (!s.signalled.empty()) {
        std::set<ProcKey> alive;
        for (const auto& p : members_of(s)) alive.insert(key_of(p));
        std::erase_if(s.signalled, [&](const ProcKey& k) { return !alive.count(k); });
    }
    s.helpers.clear();
    s.told_before.clear();
    s.last_members.clear();
    s.stop_rounds.end();
    s.killed = false;
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
    s.scope->started(s.pid);
    if (out_read) watch_output(index, std::move(out_read));
    spdlog::info("service {}: started pid {}{}", s.spec.name, s.pid,
                 s.starts > 1 ? " (restart " + std::to_string(s.restarts()) + ")" : "");
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
    if (s.spec.ready.kind != ReadyCheck::Kind::None) spdlog::info("service {}: ready", s.spec.name);
    if (first) start_eligible();
}

void ServiceManager::instance_ended(Service& s, int status) {
    MonoTime now = host_->clock().now();
    s.pid = -1;
    if (s.ticket) s.ticket->release();
    s.ticket.reset();
    s.last_status = status;
    cancel_probe(s);
    if (s.state == ServiceState::Stopping) {
        spdlog::info("service {}: {}", s.spec.name, describe_wait_status(status));
        check_stop(s);
        return;
    }
    spdlog::info("service {}: {}", s.spec.name, describe_wait_status(status));
    if (shutting_down_) {
        apply(s, ServiceEvent::ExitedFinal);
        return;
    }
    s.ended = now;
    // What the instance left behind gets its stop signal, and its grace to go: a restarted
    // service must not find the old instance still holding its port, and a finished one must
    // not leave strays.
    Millis grace = s.spec.grace.value_or(host_->settings().grace);
    s.stop_deadline = now + grace;
    int sent = send_stop(s);
    if (sent > 0)
        spdlog::info("service {}: sent {} to {} process(es) it left behind", s.spec.name,
                     signal_name(s.spec.stop_signal), sent);
    if (s.spec.main) {
        apply(s, ServiceEvent::ExitedFinal);
        spdlog::info("service {} is main: stopping everything", s.spec.name);
        host_->request_shutdown(exit_code_of(status));
        return;
    }
    // Something just signalled counts as left (if it is gone already, the first poll finds the
    // scope empty); only when nothing was signalled is the scope looked at again (leftovers
    // signalled before, by a round cut by its budget).
    if (sent > 0 || !members_of(s).empty()) {
        apply(s, ServiceEvent::LeftBehind);
        spdlog::info("service {}: waiting up to {} for what it left behind to exit", s.spec.name,
                     format_duration(grace));
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
            host_->request_shutdown(code == 0 ? 1 : code);
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

bool ServiceManager::sent_stop_signal(const ProcInfo& p) const {
    for (const auto& s : services_) {
        if (s.signalled.count(key_of(p))) return true;
        // Born to a process this service told to stop (or to one of its helpers) once its
        // passes had reached every member: a cleanup helper of the service's own stop, as the
        // supervisor's birth line tells them apart in the main tree. The tree's pass at the
        // hold's limit must not cut the cleanup short; the service's kill at the end of its
        // grace covers the helper if it is still there.
        if (s.state != ServiceState::Stopping && s.state != ServiceState::Cleaning) continue;
        // Every member of a service being stopped is the service's: signalled by it, one of
        // its helpers (also one whose parent has exited), or one its next round will reach.
        if (s.last_members.count(p.pid)) return true;
        if (s.stop_rounds.pending || p.ppid <= 1) continue;
        auto parent = s.signalled.lower_bound(ProcKey{p.ppid, 0});
        bool parent_stopping = parent != s.signalled.end() && parent->first == p.ppid;
        if (parent_stopping || s.helpers.count(p.ppid)) {
            s.helpers.insert(p.pid);
            return true;
        }
    }
    return false;
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

void ServiceManager::probe(Service& s) {
    MonoTime now = host_->clock().now();
    const ReadyCheck& r = s.spec.ready;
    switch (r.kind) {
        case ReadyCheck::Kind::None:
            return mark_ready(s);
        case ReadyCheck::Kind::File:
            if (::access(r.file.c_str(), F_OK) == 0) return mark_ready(s);
            s.wake = now + r.interval;
            return;
        case ReadyCheck::Kind::Tcp: {
            if (s.probe_sock) {  // a connect that hung for kProbeTimeout: try afresh
                host_->unwatch(s.probe_sock.get());
                s.probe_sock.reset();
            }
            sockaddr_storage addr{};
            socklen_t len = 0;
            auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
            auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
            if (::inet_pton(AF_INET, r.host.c_str(), &v4->sin_addr) == 1) {
                v4->sin_family = AF_INET;
                v4->sin_port = htons(r.port);
                len = sizeof *v4;
            } else if (::inet_pton(AF_INET6, r.host.c_str(), &v6->sin6_addr) == 1) {
                v6->sin6_family = AF_INET6;
                v6->sin6_port = htons(r.port);
                len = sizeof *v6;
            } else {
                spdlog::error("service {}: ready.tcp: '{}' is not a numeric address", s.spec.name,
                              r.host);
                return;  // never ready: its dependents wait, which the log explains
            }
            UniqueFd sock(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
            if (!sock) {
                spdlog::warn("service {}: ready.tcp socket: {}", s.spec.name, std::strerror(errno));
                s.wake = now + r.interval;
                return;
            }
            if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0)
                return mark_ready(s);
            if (errno != EINPROGRESS) {
                s.wake = now + r.interval;
                return;
            }
            std::size_t index = static_cast<std::size_t>(&s - services_.data());
            auto st = host_->watch(sock.get(), EPOLLOUT, [this, index](auto) {
                Service& svc = services_[index];
                int err = 0;
                socklen_t elen = sizeof err;
                ::getsockopt(svc.probe_sock.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
                host_->unwatch(svc.probe_sock.get());
                svc.probe_sock.reset();
                probe_finished(svc, err == 0);
                rearm();
            });
            if (!st) {
                s.wake = now + r.interval;
                return;
            }
            s.probe_sock = std::move(sock);
            s.wake = now + kProbeTimeout;
            return;
        }
        case ReadyCheck::Kind::Exec: {
            if (s.probe_pid > 0) {
                // Still running after kProbeTimeout: its reap schedules the next probe.
                end_probe_scope(s);
                return;
            }
            retire_scopes(s);  // earlier probes' scopes, once empty
            s.probe_scope =
                host_->new_scope("probe-" + s.spec.name + "." + std::to_string(++s.probes));
            SpawnSpec spec;
            spec.argv = r.exec;
            spec.env = service_environment(opts_.extra_env, s.spec.env);
            spec.session = SpawnSpec::Session::NewGroup;
            spec.cgroup_fd = s.probe_scope->spawn_cgroup_fd();
            if (spec.cgroup_fd < 0) spec.cgroup_fd = host_->helper_cgroup_fd();
            spec.workdir = s.spec.workdir;
            spec.credentials = s.spec.user;
            spec.no_new_privs = host_->settings().no_new_privs;
            auto result = host_->spawn(spec);
            if (!result.child) {
                spdlog::warn("service {}: ready.exec: {}", s.spec.name,
                             result.failure ? result.failure->message() : result.error->message);
                s.wake = now + r.interval;
                return;
            }
            s.probe_pid = result.child->pid;
            s.probe_scope->started(s.probe_pid);
            s.wake = now + kProbeTimeout;
            return;
        }
    }
}

void ServiceManager::probe_finished(Service& s, bool ok) {
    if (s.state != ServiceState::Starting) return;
    if (ok) return mark_ready(s);
    s.wake = host_->clock().now() + s.spec.ready.interval;
    rearm();
}

void ServiceManager::cancel_probe(Service& s) {
    if (s.probe_sock) {
        host_->unwatch(s.probe_sock.get());
        s.probe_sock.reset();
    }
    // The probe and what it started; it is reaped like any child and then ignored (state !=
    // Starting).
    end_probe_scope(s);
    if (s.state == ServiceState::Starting) s.wake.reset();
}

// The probe's whole scope is killed (it timed out, it ended, or the service stops probing):
// a daemon it left behind must not pile up, probe after probe, for as long as the service
// runs. The scope stays with the service's earlier ones until it is empty (retire_scopes), so
// that its stop also covers anything still in it.
void ServiceManager::end_probe_scope(Service& s) {
    if (!s.probe_scope) return;
    s.probe_scope->kill([](const ProcInfo&) { return true; });
    s.retired.push_back(std::move(s.probe_scope));
}

// ---- the ordered stop ----

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
    spdlog::info("stopping {} service(s) in reverse dependency order", services_.size());
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
            return s.killed;
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
        spdlog::info("all services stopped");
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
    if (s.state == ServiceState::Cleaning && s.stop_deadline)
        deadline = std::min(deadline, *s.stop_deadline);
    apply(s, ServiceEvent::StopRequested);
    s.stop_deadline = deadline;
    s.told_before.clear();
    if (!s.stop_rounds.pending)
        for (const auto& key : s.signalled) s.told_before.insert(key.first);
    int n = send_stop(s);
    spdlog::info("service {}: sent {} to {} process(es), grace {}", s.spec.name,
                 signal_name(s.spec.stop_signal), n,
                 format_duration(std::chrono::duration_cast<Millis>(deadline - now)));
    s.wake = now + kStopPoll;
    rearm();
}

int ServiceManager::send_stop(Service& s) {
    // A fork storm in one service must not keep the loop from the other services' graces: a
    // round cut by its budget goes on at the next poll (check_stop).
    StopPassIo io{[&] { return members_of(s); },
                  [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); },
                  s.stop_rounds.budget([this] { return host_->clock().now(); }, s.stop_deadline),
                  [&] {
                      std::vector<FreezeHold> holds;
                      if (s.scope) holds.push_back(s.scope->freeze());
                      for (auto& r : s.retired) holds.push_back(r->freeze());
                      return holds;
                  }};
    // Once per process: neither this service's earlier rounds nor the tree's pass (which goes
    // out while a service is still held back by its order, at the hold's limit) sent it one.
    auto take = [&](const ProcInfo& p) {
        if (s.signalled.count(key_of(p))) return false;
        // Started by a process told to stop before this stop began (a leftover's cleanup): its
        // helper, which the kill at the end of the grace covers.
        if (s.told_before.count(p.ppid) || (!s.told_before.empty() && s.helpers.count(p.ppid))) {
            s.helpers.insert(p.pid);
            return false;
        }
        s.signalled.insert(key_of(p));
        return host_->note_stop_signal(p, s.spec.stop_signal);
    };
    return send_stop_round(io, s.spec.stop_signal, take, s.stop_rounds).signalled;
}

// The stop of a service's tree under way (Stopping), or of what its last instance left behind
// (Cleaning): done once no member is left; the kill at the end of the grace.
void ServiceManager::check_stop(Service& s) {
    bool cleaning = s.state == ServiceState::Cleaning;
    if (s.state != ServiceState::Stopping && !cleaning) return;
    MonoTime now = host_->clock().now();
    auto members = members_of(s);
    s.last_members.clear();
    for (const auto& p : members) s.last_members.insert(p.pid);
    bool stuck = cleaning && s.killed && s.stop_deadline && now >= *s.stop_deadline + kKillSettle;
    if (stuck)
        spdlog::warn(
            "service {}: {} process(es) it left behind still there {} after SIGKILL "
            "(uninterruptible sleep?)",
            s.spec.name, members.size(), format_duration(kKillSettle));
    if (cleaning && (members.empty() || stuck)) {
        s.wake.reset();
        s.stop_rounds.end();
        retire_scopes(s);
        conclude_instance(s);
        return;
    }
    if (members.empty()) {
        s.wake.reset();
        s.stop_rounds.end();
        apply(s, ServiceEvent::TreeGone);
        spdlog::info("service {}: stopped{}", s.spec.name, s.forced() ? " (forced)" : "");
        retire_scopes(s);
        stop_eligible();
        return;
    }
    if (!s.killed && s.stop_deadline && now >= *s.stop_deadline) {
        s.killed = true;
        if (cleaning && !shutting_down_) {
            s.killed_while_running = true;
            ++s.leftovers_killed;
        }
        s.stop_rounds.end();  // the kill works on frozen processes; nothing more is owed
        int n = kill_members(s);
        host_->record_force(ForceKind::Sigkill, "service " + s.spec.name + ": grace", n);
        spdlog::warn(
            "service {}: still {} process(es){} at the end of its grace: sent SIGKILL to {}",
            s.spec.name, members.size(), cleaning ? " it left behind" : "", n);
        // Its dependencies need not wait for the kernel to finish the kill.
        if (!cleaning) stop_eligible();
    }
    if (!s.killed && s.stop_rounds.pending) {
        // The last round was cut by its budget: members it had not reached yet get the stop
        // signal now, not only the kill at the end of the grace.
        int n = send_stop(s);
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
        s.stop_rounds.end();
        if (!forced) {
            // Every process of the tree is gone: so is every service's.
            if (running || s.state == ServiceState::Cleaning) apply(s, ServiceEvent::StopRequested);
            apply(s, ServiceEvent::TreeGone);
        }
    }
    write_status();
    rearm();
}

void ServiceManager::before_force() {
    for (auto& s : services_) {
        if (s.state == ServiceState::Stopping) s.killed_by_shutdown();
        s.stop_rounds.end();  // the tree's kill needs no hold
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

// ---- captured output ----

void ServiceManager::watch_output(std::size_t service, UniqueFd fd) {
    int raw = fd.get();
    auto st = host_->watch(raw, EPOLLIN, [this, raw](auto) { on_output(raw, kOutputPerTurn); });
    if (!st) {
        spdlog::warn("service {}: output not captured: {}", services_[service].spec.name,
                     st.error().message);
        return;
    }
    streams_[raw] = Stream{service, std::move(fd), {}};
}

void ServiceManager::on_output(int fd, std::size_t budget) {
    auto it = streams_.find(fd);
    if (it == streams_.end()) return;
    Stream& st = it->second;
    char buf[16384];
    // At most kOutputPerTurn per turn of the loop: a service that writes as fast as it can
    // (`yes`) must not keep lastcall from a Ctrl-C or a timer. epoll is level-triggered: the
    // rest is read on the next turn, after the other sources.
    for (std::size_t taken = 0; taken < budget; taken += sizeof buf) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            st.partial.append(buf, static_cast<std::size_t>(n));
            std::size_t nl;
            while ((nl = st.partial.find('\n')) != std::string::npos) {
                emit_line(st.service, std::string_view(st.partial).substr(0, nl));
                st.partial.erase(0, nl + 1);
            }
            if (st.partial.size() > kMaxLine) {
                emit_line(st.service, st.partial);
                st.partial.clear();
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        // EOF: the instance and everything it started closed the pipe.
        if (!st.partial.empty()) emit_line(st.service, st.partial);
        host_->unwatch(fd);
        streams_.erase(it);
        return;
    }
}

void ServiceManager::emit_line(std::size_t service, std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string& name = services_[service].spec.name;
    std::string out;
    out.reserve(line.size() + name_width_ + 16);
    std::string padded = name + std::string(name_width_ - name.size(), ' ');
    if (opts_.color) {
        out += "\x1b[";
        out += kColors[service % std::size(kColors)];
        out += "m" + padded + " |\x1b[0m ";
    } else {
        out += padded + " | ";
    }
    out += line;
    out += '\n';
    write_all(opts_.output_fd, out);
}

// ---- status and report ----

void ServiceManager::write_status() {
    if (opts_.state_path.empty()) return;
    StatusFile f;
    f.lastcall_pid = ::getpid();
    f.instance = opts_.instance;
    f.config = opts_.config_path;
    for (const auto& s : services_) {
        ServiceStatusRow row;
        row.name = s.spec.name;
        row.pid = s.pid;
        row.state = std::string(to_string(s.state));
        row.restarts = s.restarts();
        row.since = s.pid > 0 ? s.started_wall : 0;
        f.services.push_back(row);
    }
    // Said once per failure streak: a crash loop must not turn one problem into a log flood.
    auto st = write_status_file(opts_.state_path, f);
    if (!st && !status_failing_) spdlog::warn("status file not written: {}", st.error().message);
    status_failing_ = !st;
}

void ServiceManager::contribute_metrics(MetricsWriter& m) {
    for (const auto& s : services_) {
        m.sample("lastcall_service_restarts_total", "counter", "Restarts of each service",
                 {{"service", s.spec.name}}, s.restarts());
        m.sample("lastcall_service_state", "gauge",
                 "1 for each service's current state (pending, starting, ready, cleaning, backoff, "
                 "exited, failed, stopping, stopped)",
                 {{"service", s.spec.name}, {"state", std::string(to_string(s.state))}}, 1);
    }
}

void ServiceManager::contribute_report(JsonWriter& j) {
    j.key("services").begin_array();
    for (const auto& s : services_) {
        j.begin_object();
        j.field("name", s.spec.name);
        j.field("state", to_string(s.state));
        j.field("starts", s.starts);
        j.field("restarts", s.restarts());
        j.key("last_exit_code");
        if (s.last_status)
            j.value(exit_code_of(*s.last_status));
        else
            j.null();
        j.field("forced", s.forced());
        j.field("leftovers_killed", s.leftovers_killed);
        j.end_object();
    }
    j.end_array();
    j.field("service_starts_refused", refused_);
}

void ServiceManager::finished(int /*exit_code*/) {
    // Whatever the last processes wrote before they went is printed before lastcall exits.
    std::vector<int> fds;
    for (const auto& [fd, st] : streams_) fds.push_back(fd);
    for (int fd : fds) on_output(fd, SIZE_MAX);
    if (!opts_.state_path.empty()) remove_status_file(opts_.state_path);
}

Result<std::vector<ServiceSpec>> load_config_services(const std::string& config_path,
                                                      const std::string& config_text) {
    if (config_path.empty()) return std::vector<ServiceSpec>{};
    return parse_services_toml(config_text, config_path);
}

}  // namespace lastcall
