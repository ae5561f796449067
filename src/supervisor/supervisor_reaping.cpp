// SPDX-License-Identifier: Apache-2.0
// Reaping: every exited child with waitpid, paced during a burst of exits, the main child at
// once; when the tree is gone.
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

namespace {

// A sweep of the shutdown that reaped this many children paces the next one (sweep_children).
constexpr long kPacedShutdownSweep = 64;

}  // namespace

void Supervisor::on_sigchld() {
    // While a burst of exits is paced (process/reap_pacer.hpp) SIGCHLD is not in the signalfd
    // at all (pace_sweeps): a SIGCHLD read here always sweeps.
    sweep_children({});
}

bool Supervisor::reap_main_child(ReapOutcome& outcome) {
    if (main_pid_ <= 0 || main_status_) return false;
    int status = 0;
    // By pid: the kernel looks at this one child, without walking the list of all of them.
    if (::waitpid(main_pid_, &status, WNOHANG) != main_pid_) return false;
    on_reaped(Reaped{main_pid_, status, std::nullopt}, false, outcome);
    return true;  // the caller sweeps the rest: the shutdown starts with the main child's exit
}

void Supervisor::sweep_children(ReapOutcome outcome) {
    // During the shutdown every process is itemised in the report; one already seen alive needs
    // no second /proc read. While running, reaped orphans are only counted.
    std::function<bool(pid_t)> want_info;
    if (shutdown_.state() != State::Running)
        want_info = [this](pid_t pid) { return !book_.knows(pid); };
    bool forcing = shutdown_.state() == State::Forcing;
    long count = 0;
    MonoTime began = clock_.now();
    reap_all(want_info, [&](const Reaped& r) {
        ++count;
        on_reaped(r, forcing, outcome);
    });
    if (outcome.pre_stop_done) {
        on_pre_stop_output();  // whatever is left in the pipe
        warn_if_pre_stop_failed();
        shutdown_.on_pre_stop_done();
    }
    if (outcome.main_exited) shutdown_.on_main_exit();
    // While running every burst is paced. During the shutdown only a crowd: each waitid walks
    // lastcall's children up to the first exited one, and swept at every exit of a
    // 10,000-process teardown, the exits were sparse among the living and each walk long (the
    // kernel's wait_consider_task, half of lastcall's CPU in it); paced, they pile up and each
    // walk is short. A small tree's exit is still swept at once.
    bool crowd = count >= kPacedShutdownSweep;
    pace_sweeps(shutdown_.state() == State::Running || crowd ? count : 0, clock_.now() - began);
    check_tree_gone();
}

void Supervisor::on_reaped(const Reaped& r, bool forcing, ReapOutcome& outcome) {
    teardown_.reaped(r, forcing);
    bool peer_logged = voice_.reaped(r.pid, r.status, r.pid == main_pid_);
    if (r.pid == main_pid_) {
        main_status_ = r.status;
        emergency_main_reaped(r.status);
        if (main_pidfd_watched_) loop_->unwatch(main_pidfd_.get());  // before its number is reused
        main_pidfd_watched_ = false;
        main_pidfd_.reset();
        if (main_unit_) main_unit_->gone();
        main_ticket_->release();
        outcome.main_exited = true;
        if (!peer_logged) spdlog::debug("child pid {} {}", r.pid, describe_wait_status(r.status));
    } else if (r.pid == pre_stop_pid_) {
        // What the hook left behind in its session is the tree's to stop from here on.
        if (pre_stop_unit_) pre_stop_unit_->gone();
        pre_stop_unit_.reset();
        pre_stop_pid_ = -1;
        outcome.pre_stop_done = true;
        if (pre_stop_run_) {
            pre_stop_run_->ended = clock_.now();
            pre_stop_run_->status = r.status;
        }
        spdlog::debug("pre-stop hook {}", describe_wait_status(r.status));
    } else if (!peer_logged && spdlog::should_log(spdlog::level::debug)) {
        // Asked first: PID 1 reaps every orphan of the container here, and the description is a
        // string built per call whether or not the line is written.
        spdlog::debug("reaped pid {} ({})", r.pid, describe_wait_status(r.status));
    }
}

void Supervisor::pace_sweeps(long reaped, std::chrono::steady_clock::duration cost) {
    auto next = reap_pacer_.swept(clock_.now(), reaped, cost);
    if (!next) return end_sweep_pacing();
    // The timer is made on the first burst: a run whose children exit one at a time (most)
    // never opens it.
    if (!sweep_timer_) {
        auto st = watch_new_timer(*loop_, sweep_timer_, [this] {
            sweep_timer_->consume();
            sweep_children({});
        });
        if (!st) return unpaced(st.error());
    }
    if (auto st = sweep_timer_->arm(next); !st) return unpaced(st.error());
    if (sigchld_paused_) return;
    // Until the paced sweep, SIGCHLD does not wake lastcall at all (it stays pending, blocked):
    // a wake costs more than the reap on this path (two context switches per exit). The main
    // child's exit is watched on its pidfd instead, which becomes readable when it exits.
    if (main_pidfd_ && !main_pidfd_watched_) {
        auto st = loop_->watch(main_pidfd_.get(), EPOLLIN, [this](auto) {
            ReapOutcome outcome;
            if (reap_main_child(outcome)) sweep_children(outcome);
        });
        if (!st) return unpaced(st.error());
        main_pidfd_watched_ = true;
    }
    if (auto st = watch_sigchld(false); !st) return unpaced(st.error());
    sigchld_paused_ = true;
}

void Supervisor::end_sweep_pacing() {
    reap_pacer_.stop_pacing();
    if (sweep_timer_) (void)sweep_timer_->arm(std::nullopt);
    // The pidfd only while paused: at every other time SIGCHLD reports the main child (during
    // the shutdown its reap must be recorded as the escalation's when it is), and a pidfd that
    // is readable while waitpid cannot reap yet (a tracer holds the zombie) would spin the loop.
    if (main_pidfd_watched_) {
        loop_->unwatch(main_pidfd_.get());
        main_pidfd_watched_ = false;
    }
    if (!sigchld_paused_) return;
    // A SIGCHLD that came meanwhile is pending: the signalfd is readable at once, and the next
    // turn sweeps.
    if (auto st = watch_sigchld(true); st) {
        sigchld_paused_ = false;
        return;
    }
    // Not expected (signalfd on a descriptor lastcall holds): the timer sweeps instead, and
    // tries again, until it works.
    spdlog::error("SIGCHLD does not wake the loop; sweeping on a timer");
    (void)sweep_timer_->arm(clock_.now() + reap_pacer_.interval());
}

void Supervisor::unpaced(const Error& e) {
    spdlog::warn("reaping unpaced: {}", e.message);
    end_sweep_pacing();
}

Status Supervisor::watch_sigchld(bool on) {
    sigset_t set = handled_signals();
    if (!on) ::sigdelset(&set, SIGCHLD);
    // On an existing signalfd, signalfd() replaces the set it reads; the process mask (every
    // handled signal blocked since the top of main) does not change.
    if (::signalfd(signal_fd_.get(), &set, 0) < 0) return sys_error("signalfd (SIGCHLD)", errno);
    return Ok{};
}

void Supervisor::watch_tree_events() {
    int fd = tracker_->watch_fd();
    if (fd < 0) return;
    // EPOLLPRI only: kernfs files always poll readable, the change is signalled as PRI. A change
    // since the file was opened is reported at once, so nothing is missed by watching late.
    auto st = loop_->watch(fd, EPOLLPRI, [this](auto) {
        tracker_->consume_watch();
        check_tree_gone();
    });
    // Not fatal: the reaper's ECHILD decides when the tree is gone; this only wakes the loop.
    if (!st) spdlog::warn("tree events will not wake the loop: {}", st.error().message);
}

Children Supervisor::peek_children() const {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
        return errno == ECHILD ? Children::None : Children::Running;  // EINTR: assume some
    return si.si_pid != 0 ? Children::Exited : Children::Running;
}

void Supervisor::on_timer() {
    timer_->consume();
    shutdown_.on_timer();
}

}  // namespace lastcall
