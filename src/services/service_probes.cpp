// SPDX-License-Identifier: Apache-2.0
// Readiness probes: a file, a TCP connect or a command, each command probe a unit of its own.
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
        case ReadyCheck::Kind::Tcp:
            return probe_tcp(s, now);
        case ReadyCheck::Kind::Exec:
            return probe_exec(s, now);
    }
}

// A non-blocking connect to ready.tcp; its answer comes on the loop (EPOLLOUT).
void ServiceManager::probe_tcp(Service& s, MonoTime now) {
    const ReadyCheck& r = s.spec.ready;
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
        spdlog::error("service {}: ready.tcp: '{}' is not a numeric address", s.spec.name, r.host);
        return;  // never ready: its dependents wait, which the log explains
    }
    UniqueFd sock(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!sock) {
        spdlog::warn("service {}: ready.tcp socket: {}", s.spec.name, std::strerror(errno));
        s.wake = now + r.interval;
        return;
    }
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return mark_ready(s);
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

// ready.exec in a scope of its own; its reap says whether it passed.
void ServiceManager::probe_exec(Service& s, MonoTime now) {
    const ReadyCheck& r = s.spec.ready;
    if (s.probe_pid > 0) {
        // Still running after kProbeTimeout: its reap schedules the next probe.
        end_probe_scope(s);
        return;
    }
    retire_scopes(s);  // earlier probes' scopes, once empty
    s.probe_scope = host_->new_scope("probe-" + s.spec.name + "." + std::to_string(++s.probes));
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

}  // namespace lastcall
