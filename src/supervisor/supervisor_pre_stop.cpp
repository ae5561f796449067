// SPDX-License-Identifier: Apache-2.0
// Readiness off and the pre-stop hook: the first two steps of the drain, before any stop signal.
#include "lastcall/supervisor/supervisor.hpp"

#include "lastcall/supervisor/supervisor_host.hpp"

#include "lastcall/metrics/metrics.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <iterator>
#include <map>
#include <set>

#include "lastcall/core/duration.hpp"
#include "lastcall/core/instance.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/log.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/shutdown/emergency.hpp"

namespace lastcall {

void Supervisor::on_pre_stop_output() {
    if (!pre_stop_out_) return;
    char buf[4096];
    // Its lines are shown at the default level, as systemd puts ExecStop's output in the
    // journal: a deregistration that printed why it failed is read where lastcall's log is.
    // At most 64 KiB per turn of the loop, as a service's output (UnitOutput): a hook that writes
    // as fast as it can must not keep a signal, a reap or the grace's timer waiting. epoll is
    // level-triggered: the rest is read on the next turn.
    for (int reads = 0; reads < 16; ++reads) {
        ssize_t n = ::read(pre_stop_out_.get(), buf, sizeof buf);
        if (n > 0) {
            pre_stop_partial_.append(buf, static_cast<size_t>(n));
            std::size_t nl;
            while ((nl = pre_stop_partial_.find('\n')) != std::string::npos) {
                if (nl > 0) pre_stop_last_line_ = pre_stop_partial_.substr(0, nl);
                spdlog::info("pre-stop: {}", pre_stop_partial_.substr(0, nl));
                pre_stop_partial_.erase(0, nl + 1);
            }
            if (pre_stop_partial_.size() > 65536) {  // a line without end: kept in part
                pre_stop_last_line_ = pre_stop_partial_.substr(0, 4096);
                pre_stop_partial_.clear();
            }
            continue;
        }
        if (n < 0 && errno == EAGAIN) return;
        // EOF (or an error): the hook and everything it started closed the pipe.
        if (!pre_stop_partial_.empty()) {
            pre_stop_last_line_ = pre_stop_partial_;
            spdlog::info("pre-stop: {}", pre_stop_partial_);
        }
        pre_stop_partial_.clear();
        loop_->unwatch(pre_stop_out_.get());
        pre_stop_out_.reset();
        return;
    }
}

// The hook's output is debug chatter (a deregistration's progress); its failure is not: the
// drain it was there to start (a load balancer told to stop sending) may not have happened, and
// without -v nothing said so (the report alone had the exit code).
void Supervisor::warn_if_pre_stop_failed() const {
    if (!pre_stop_run_ || !pre_stop_run_->status) return;
    int status = *pre_stop_run_->status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    std::string last = pre_stop_partial_.empty() ? pre_stop_last_line_ : pre_stop_partial_;
    if (last.size() > 200) last = last.substr(0, 200) + "...";
    if (last.empty())
        spdlog::warn("pre-stop hook {}", describe_wait_status(status));
    else
        spdlog::warn("pre-stop hook {} (its last line: {})", describe_wait_status(status), last);
}

void Supervisor::start_pre_stop() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        spdlog::error("pre-stop hook: pipe2: {}", std::strerror(errno));
        return shutdown_.on_pre_stop_done();
    }
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    // Non-blocking on lastcall's side only: the event loop must never wait on the hook, but the
    // hook's writes must block when the pipe is full, not fail with EAGAIN and lose output.
    if (::fcntl(read_end.get(), F_SETFL, O_NONBLOCK) != 0) {
        spdlog::error("pre-stop hook: fcntl O_NONBLOCK: {}", std::strerror(errno));
        return shutdown_.on_pre_stop_done();
    }
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", opts_.pre_stop};
    spec.env = Environment::inherited(UnitKind::Helper).entries();
    // Its own session: the tree's stop signal does not reach a helper of lastcall's.
    spec.session = SpawnSpec::Session::NewSession;
    spec.cgroup_fd = tracker_->spawn_cgroup_fd();
    spec.stdout_fd = write_end.get();
    // The hook runs as --user like the command it stops: never as root with every capability.
    spec.credentials = opts_.credentials;
    spec.no_new_privs = opts_.no_new_privs;
    for (auto* c : components_) c->prepare_spawn(spec, false);
    auto result = spawn(spec);
    if (!result.child) {
        spdlog::error("pre-stop hook: {}",
                      result.error ? result.error->message : result.failure->message());
        return shutdown_.on_pre_stop_done();
    }
    pre_stop_pid_ = result.child->pid;
    pre_stop_run_ = ReportInput::Hook{pre_stop_pid_, clock_.now(), std::nullopt, std::nullopt};
    // A unit of lastcall's own (UnitRole::Helper): the tree's stop leaves its session alone.
    pid_t sid = pre_stop_pid_;
    pre_stop_unit_ = std::make_unique<Unit>(
        units_, "pre-stop hook", clock_,
        Unit::MembersWithin([this, sid](const Unit::OutOfTime& out_of_time) {
            auto members = tracker_->members_within(out_of_time);
            std::erase_if(members, [sid](const ProcInfo& p) { return p.sid != sid; });
            return members;
        }),
        Unit::Freeze{}, lastcall::signal_exact, UnitPolicy{UnitRole::Helper, {}, sid});
    pre_stop_out_ = std::move(read_end);
    auto st = loop_->watch(pre_stop_out_.get(), EPOLLIN, [this](auto) { on_pre_stop_output(); });
    if (!st) spdlog::warn("pre-stop output will not be logged: {}", st.error().message);
    spdlog::debug("pre-stop hook started, pid {}: {}", pre_stop_pid_, opts_.pre_stop);
}

void Supervisor::readiness_off() {
    if (opts_.ready_file.empty()) return;
    if (auto st = remove_file_safely(opts_.ready_file); !st)
        spdlog::error("readiness off: {}", st.error().message);
    else
        spdlog::debug("readiness off: removed {}", opts_.ready_file);
}

}  // namespace lastcall
