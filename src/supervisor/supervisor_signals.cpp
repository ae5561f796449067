// SPDX-License-Identifier: Apache-2.0
// The signals lastcall receives: what each means (ForwardingPolicy), forwarded to whom, the
// shutdown it starts or escalates, the first stop signal's fast path to the main child.
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

// A forwarded signal is logged at most once per period; repeats are counted (see on_signal).
constexpr std::chrono::seconds kFloodLogPeriod{1};

bool send_via_pidfd(int pidfd, int sig) {
    return pidfd_signal(pidfd, sig);
}

}  // namespace

void Supervisor::on_signals() {
    // Everything pending is dequeued first, with the time it was read, and only then handled:
    // the kernel keeps no arrival time, and handling one signal (forwarding HUP to a large tree)
    // must not make the next one look later than it was. One read takes as many as fit (the
    // signalfd fills the buffer with whole records), so a lone SIGTERM costs one read, not a
    // second one to learn that nothing else is pending. At most kBatch per turn, so a flood
    // cannot hold the loop; the rest stays readable for the next turn.
    // 16 (2 KiB on the stack): 64 pushed the frame onto a page of stack that nothing before had
    // touched, and its fault came before the main child's stop signal.
    constexpr int kBatch = 16;
    signalfd_siginfo batch[kBatch];
    ssize_t n = ::read(signal_fd_.get(), batch, sizeof batch);
    int count = n > 0 ? static_cast<int>(n / static_cast<ssize_t>(sizeof batch[0])) : 0;
    MonoTime arrival = clock_.now();
    bool child_event = false;
    for (int i = 0; i < count; ++i) {
        const signalfd_siginfo& info = batch[i];
        int sig = static_cast<int>(info.ssi_signo);
        // SIGPIPE and SIGXFSZ that lastcall's own writes raised (a log line into a pipe whose
        // reader went away, a report over RLIMIT_FSIZE) are nobody's request: forwarded, they
        // would kill the child with a signal no one sent. Worse, each forward logs a line that
        // raises the next SIGPIPE, and the signalfd hands out the lowest number first, so a
        // SIGTERM behind them would never be read. The write itself fails with EPIPE/EFBIG.
        if ((sig == SIGPIPE || sig == SIGXFSZ) && info.ssi_code == SI_USER &&
            static_cast<pid_t>(info.ssi_pid) == ::getpid())
            continue;
        // SIGCHLD is handled once per batch: one waitpid loop covers any number of them.
        if (sig == SIGCHLD) {
            child_event = true;
            voice_.sigchld();
            continue;
        }
        on_signal(sig, arrival);
    }
    if (child_event) on_sigchld();
    if (count > 0 && idle_poll_timer_) idle_poll();
}

void Supervisor::start_idle_polls() {
    auto st = watch_new_timer(*loop_, idle_poll_timer_, [this] {
        idle_poll_timer_->consume();
        idle_poll();
    });
    if (!st) {
        spdlog::warn("tini's trace lines between signals are off: {}", st.error().message);
        return;
    }
    (void)idle_poll_timer_->arm(clock_.now() + std::chrono::seconds(1));
}

void Supervisor::idle_poll() {
    // Once the main child is reaped tini says only its exit lines (PeerVoice::exiting).
    if (main_status_) {
        (void)idle_poll_timer_->arm(std::nullopt);
        return;
    }
    voice_.idle_poll();
    // tini's next wait starts now and times out a second later.
    (void)idle_poll_timer_->arm(clock_.now() + std::chrono::seconds(1));
}

void Supervisor::on_signal(int received, MonoTime arrival) {
    // What the signal means (and whom it goes to) is the forwarding policy's decision: lastcall's
    // own in native mode, the peer's under tini's or dumb-init's name.
    SignalAction a = policy_.decide(received);
    bool peer_logged = voice_.signal(a);
    switch (a.kind) {
        case SignalAction::Kind::Drop:
            if (!peer_logged) {
                if (a.sig == 0)
                    spdlog::debug("received {}: dropped (--rewrite)", signal_name(received));
                else
                    spdlog::debug("received {}: ignored", signal_name(received));
            }
            break;
        case SignalAction::Kind::Shutdown:
            if (!peer_logged && a.sig != received)
                spdlog::debug("received {}: rewritten to {}", signal_name(received),
                              signal_name(a.sig));
            return start_or_escalate(a.sig, arrival);
        case SignalAction::Kind::Suspend:
            return suspend(a.sig);
        case SignalAction::Kind::Forward:
            if (!peer_logged) {
                if (a.sig != received)
                    spdlog::debug("received {}: rewritten to {}", signal_name(received),
                                  signal_name(a.sig));
                if (a.sig == SIGCONT)
                    spdlog::debug("received SIGCONT: resuming the child's group");
                else
                    log_forward(a);
            }
            forward(a.sig, a.scope);
            break;
    }
    // As dumb-init: stopped after forwarding, so the shell that started it sees a stopped job.
    if (a.stop_self && ::getpid() != 1) ::kill(::getpid(), SIGSTOP);
}

void Supervisor::log_forward(const SignalAction& a) {
    // Each arrival is forwarded; a flood of one signal is logged once a second with its count
    // (a runaway sender must not turn into a million log lines).
    auto& flood = floods_[a.sig];
    MonoTime now = clock_.now();
    if (flood.logged && now - *flood.logged < kFloodLogPeriod) {
        ++flood.unlogged;
        return;
    }
    if (flood.unlogged > 0)
        spdlog::debug("received {} {} more time(s) since the last line: each forwarded",
                      signal_name(a.sig), flood.unlogged);
    spdlog::debug("received {}: forwarding to the {}", signal_name(a.sig), to_string(a.scope));
    flood = {now, 0};
}

void Supervisor::start_or_escalate(int sig, MonoTime arrival) {
    if (shutdown_.state() == State::Running) stop_main_child_first(sig);
    // Logged before the state machine runs, so the log reads cause first, then effects.
    if (shutdown_.state() == State::Running)
        spdlog::debug("received {}: starting shutdown (grace {})", signal_name(sig),
                      format_duration(opts_.grace));
    switch (shutdown_.on_signal(sig, arrival)) {
        case SignalOutcome::Started:
            break;
        case SignalOutcome::Forwarded:
            spdlog::debug("received {} in the same burst: forwarded once, not escalating",
                          signal_name(sig));
            break;
        case SignalOutcome::Joined:
            spdlog::debug(
                "received {}: the shutdown already runs (the command exited by "
                "itself); not escalating",
                signal_name(sig));
            break;
        case SignalOutcome::Coalesced:
            spdlog::debug("received {} within {} of the previous one: same burst", signal_name(sig),
                          format_duration(opts_.coalesce));
            break;
        case SignalOutcome::Escalated:
            // "Again" only when it is: a SIGINT after a SIGTERM is a second stop request, not a
            // repeat of the first.
            spdlog::warn("received {} {}: escalating to SIGKILL", signal_name(sig),
                         shutdown_.trigger().signal == sig || shutdown_.trigger().signal == 0
                             ? std::string("again")
                             : "after " + signal_name(shutdown_.trigger().signal));
            break;
        case SignalOutcome::Ignored:
            spdlog::debug("received {}: already forcing", signal_name(sig));
            break;
    }
}

bool Supervisor::send_stop_to_main(int sig) {
    // SIGCONT first: the main child's state is not read here (no /proc read before the signal),
    // and a SIGCONT after the stop signal could land after the child's reaction to it and
    // discard a stop that the reaction queued (send_stop_signal). Resumed first, a stopped
    // child then gets the stop signal at once.
    if (needs_sigcont(sig)) send_via_pidfd(main_pidfd_.get(), SIGCONT);
    return send_via_pidfd(main_pidfd_.get(), sig);
}

bool Supervisor::announced_outside() const {
    for (auto* c : components_)
        if (c->announces_shutdown()) return true;
    return false;
}

void Supervisor::stop_main_child_first(int sig) {
    // When the shutdown will signal the tree at once (no drain delay, readiness file, STOPPING=1
    // to systemd, pre-stop hook or ordered stop of --config services before it: intake closes
    // first, and the outside must see it closed before the child can react), the main unit is
    // stopped here, its signal through the pidfd it already has, before any bookkeeping: the
    // log lines, the state machine, the enumeration of the rest of the tree and its pidfds.
    // signal_tree() then skips it: each unit is stopped once.
    // The pidfd last: bench/hot_symbols.py runs lastcall under valgrind, which has no pidfds,
    // and lists what it sees run; every other check here is then on its list (a function on
    // this path outside the hot pages faults before the signal: 37 us once).
    if (main_status_ || opts_.drain_delay.count() > 0 || !opts_.pre_stop.empty() ||
        !opts_.ready_file.empty() || !opts_.config_path.empty() || announced_outside() ||
        !main_pidfd_ || !main_unit_)
        return;
    int stop = opts_.stop_signal ? opts_.stop_signal : sig;
    if (!stop_main_unit(stop, clock_.now() + opts_.grace)) return;
    // The child may be woken on this CPU (the kernel places a wakee near its waker), where it
    // waited for lastcall's bookkeeping below, 0.35-0.55 ms, before its handler could run (one
    // run in eight in sched traces). Its handler first: the rest of the tree gets its stop
    // signal a slice later at most. Where the child runs elsewhere this returns at once.
    // Through syscall(), which start-up has already called (pidfd_open): sched_yield() would be
    // the dynamic binary's first call of it, bound lazily by ld.so (a symbol lookup and a page of
    // libc faulted in) before the yield, while the child waited on this CPU.
    ::syscall(SYS_sched_yield);
    // Its record exists since the spawn: no /proc read here. The stop passes fill in its start
    // time when they come to it. (Before the shutdown starts the root's record keeps nothing:
    // UnitTree::record.)
    if (auto* rec = book_.live_main()) {
        rec->stop_signal = stop;
        rec->signalled_at = clock_.now();
    }
}

void Supervisor::make_main_unit() {
    main_unit_ = std::make_unique<Unit>(
        units_, "main", clock_, [this] { return main_members(); }, Unit::Freeze{},
        [this](const ProcInfo&, int sig) { return send_stop_to_main(sig); },
        UnitPolicy{UnitRole::Main, {}, 0});
}

std::vector<ProcInfo> Supervisor::main_members() const {
    // The main child alone, while it is unreaped: its pidfd names it (send_stop_to_main), and
    // its record the rest (its start time once a walk has seen it: the same key as the walk's).
    std::vector<ProcInfo> members;
    if (main_status_ || !main_pidfd_) return members;
    ProcInfo p;
    p.pid = main_pid_;
    p.pgid = main_pid_;
    if (const auto* rec = book_.find_live(main_pid_)) p.start = rec->start;
    members.push_back(std::move(p));
    return members;
}

bool Supervisor::stop_main_unit(int sig, MonoTime deadline) {
    // The main child's TERM handler may fork a cleanup helper before the root's passes over the
    // rest of the tree reach it (the freeze takes 0.1-1 ms to settle; a /proc walk as long): the
    // birth line, read just before the signal, tells the passes that it was born after the stop
    // began, and they leave it alone (root_admits). Without a birth line the main child is
    // signalled first only where nothing is frozen, as before the line existed; otherwise the
    // root's pass signals it with the rest, frozen.
    auto line = units_.read_line();
    if (!line && effective_scope() != Scope::Child && tracker_->freezes()) return false;
    if (main_unit_->stop(sig, deadline) == 0) return false;
    units_.draw_birth_line(line);
    // A child of the main command with a larger pid than the line's was forked after its stop
    // signal went out (StopHelpers): the line was read just before it, with nothing between.
    if (auto* rec = book_.live_main()) rec->last_pid_at_stop = line ? line->last_pid : 0;
    return true;
}

void Supervisor::forward(int sig, Scope scope) {
    // Without a main command (only services or jobs) there is no child or group to aim at, and
    // kill(-main_pid_) would reach init: the whole tree gets the signal.
    if (main_pid_ <= 0) scope = Scope::Tree;
    switch (scope) {
        case Scope::Child:
            if (main_pidfd_ && !send_via_pidfd(main_pidfd_.get(), sig) && errno != ESRCH)
                spdlog::warn("pidfd_send_signal {} to pid {}: {}", signal_name(sig), main_pid_,
                             std::strerror(errno));
            break;
        case Scope::Group:
            // While the main child is unreaped its pid cannot be reused, so neither can its
            // group id. After that, only members still carrying that pgid are signalled.
            if (!main_status_) {
                if (::kill(-main_pid_, sig) != 0 && errno != ESRCH)
                    spdlog::warn("kill {} to group {}: {}", signal_name(sig), main_pid_,
                                 std::strerror(errno));
            } else {
                std::set<std::pair<pid_t, unsigned long long>> seen;
                tracker_->signal_all(sig, [&](const ProcInfo& p) {
                    return p.pgid == main_pid_ && seen.insert({p.pid, p.start}).second;
                });
            }
            break;
        case Scope::Tree: {
            std::set<std::pair<pid_t, unsigned long long>> seen;
            tracker_->signal_all(sig, [&](const ProcInfo& p) {
                return seen.insert({p.pid, p.start}).second;
            });
            break;
        }
    }
}

void Supervisor::suspend(int sig) {
    // As a shell expects of a job: the child's group stops, then lastcall itself, so the parent
    // shell sees a stopped job. SIGCONT (fg/bg) resumes lastcall, which then resumes the group.
    spdlog::debug("received {}: stopping the child's group and lastcall", signal_name(sig));
    // A child that leads its own session is in an orphaned process group (its parent, lastcall,
    // is in another session), and the kernel discards SIGTSTP/TTIN/TTOU sent to such a group
    // unless they are caught: only SIGSTOP is sure to stop it (dumb-init does the same).
    forward(opts_.new_session ? SIGSTOP : sig, Scope::Group);
    if (::getpid() != 1) ::kill(::getpid(), SIGSTOP);
}

}  // namespace lastcall
