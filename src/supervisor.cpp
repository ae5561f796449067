// SPDX-License-Identifier: Apache-2.0
#include "lastcall/supervisor.hpp"

#include "lastcall/supervisor_host.hpp"

#include "lastcall/shutdown/metrics.hpp"

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
#include "lastcall/process/limits.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/shutdown/emergency.hpp"

namespace lastcall {

namespace {

// A forwarded signal is logged at most once per period; repeats are counted (see on_signal).
constexpr std::chrono::seconds kFloodLogPeriod{1};

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
}

ShutdownConfig shutdown_config(const Options& o) {
    ShutdownConfig c;
    c.grace = o.grace;
    c.drain_delay = o.drain_delay;
    c.coalesce = o.coalesce;
    c.stop_signal = o.stop_signal;
    c.has_pre_stop = !o.pre_stop.empty();
    return c;
}

bool send_via_pidfd(int pidfd, int sig) {
    return pidfd_signal(pidfd, sig);
}

}  // namespace

Status block_handled_signals() {
    sigset_t set = handled_signals();
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return sys_error("sigprocmask", errno);
    return Ok{};
}

Supervisor::Supervisor(Options options, const Clock& clock)
    : opts_(std::move(options)), clock_(clock), shutdown_(shutdown_config(opts_), clock_, *this) {}

int Supervisor::run() {
    // One top-level handler: whatever escapes the loop (std::bad_alloc under a memory limit, a
    // bug) or ends in std::terminate, the tree is killed and reaped and a minimal report written
    // by a teardown that needs no allocation.
    emergency_install_terminate_handler();
    try {
        return run_guarded();
    } catch (const std::exception& e) {
        return emergency_teardown(e.what());
    } catch (...) {
        return emergency_teardown("unknown exception");
    }
}

int Supervisor::run_guarded() {
    if (auto st = set_up(); !st) {
        spdlog::error("{}", st.error().message);
        return 1;
    }
    // Without a command (only scheduled jobs or services from a config), components start the
    // work and the run lasts until a termination signal or request_shutdown().
    if (!opts_.command.empty()) {
        if (auto failed = start_child()) {
            if (tracker_) (void)tracker_->remove();
            return *failed;
        }
    }
    loop_until_stopped();
    return finish();
}

Status Supervisor::set_up() {
    // Its descriptor limit raised, its OOM score lowered, before the first unit: see limits.hpp.
    (void)protect_self();
    if (::getpid() == 1) {
        spdlog::debug("running as PID 1: orphans of the whole namespace are reaped here");
    } else if (auto st = become_subreaper(); !st) {
        return st;
    } else if (!opts_.warn_implicit_subreaper) {
        voice_.subreaper_registered();  // tini -s
    } else {
        // tini without -s would not reap orphans here; lastcall does, and says so once.
        spdlog::warn(
            "not running as PID 1: registered as a child subreaper (tini needs -s or "
            "TINI_SUBREAPER for that; pass either to silence this warning)");
    }
    // tini -p: lastcall itself learns of its parent's death, as a signal it then handles like
    // any other it receives (forwarded in tini mode).
    if (opts_.self_pdeathsig > 0 && ::prctl(PR_SET_PDEATHSIG, opts_.self_pdeathsig) != 0)
        return sys_error("prctl(PR_SET_PDEATHSIG)", errno);
    bool other_units = std::any_of(components_.begin(), components_.end(),
                                   [](const SupervisorComponent* c) { return c->runs_units(); });
    auto choice = make_tracker(opts_.tracker, instance_id(), /*main_leaf=*/other_units);
    if (!choice) return choice.error();
    tracker_ = std::move(choice->tracker);
    spdlog::debug("tracking the process tree with the {} tracker: {}{}", tracker_->name(),
                  choice->reason, tracker_->where().empty() ? "" : " (" + tracker_->where() + ")");

    auto loop = EventLoop::create();
    if (!loop) return loop.error();
    loop_.emplace(std::move(*loop));
    auto timer = DeadlineTimer::create();
    if (!timer) return timer.error();
    timer_.emplace(std::move(*timer));

    sigset_t set = handled_signals();
    signal_fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signal_fd_) return sys_error("signalfd", errno);

    if (auto st = loop_->watch(signal_fd_.get(), EPOLLIN, [this](auto) { on_signals(); }); !st)
        return st;
    if (auto st = loop_->watch(timer_->fd(), EPOLLIN, [this](auto) { on_timer(); }); !st) return st;
    // The tree's events (cgroup.events) are watched from the start of the shutdown only: while
    // Running nothing acts on them, and the notification that the cgroup became populated woke
    // the loop once on every start.
    for (auto* c : components_)
        if (auto st = c->attach(*this); !st) return st;
    // A few descriptors held back for the shutdown: signalling a member needs a pidfd and a /proc
    // read at once, and a tree that exhausted RLIMIT_NOFILE must still get its stop signal.
    // The fourth is ns_last_pid, read for the birth line just before the main child's stop
    // signal (stop_main_child_first): opened here, off the path of that signal.
    // One open, then copies: a dup costs no path lookup (1.5 us against 6.5 us here).
    reserved_fds_[0].reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    for (std::size_t i = 1; i < std::size(reserved_fds_) && reserved_fds_[0]; ++i)
        reserved_fds_[i].reset(::fcntl(reserved_fds_[0].get(), F_DUPFD_CLOEXEC, 0));
    last_pid_fd_ = open_ns_last_pid();
    // Without it (no /proc/sys), still a reserve: an empty read there draws no line.
    if (!last_pid_fd_ && reserved_fds_[0])
        last_pid_fd_.reset(::fcntl(reserved_fds_[0].get(), F_DUPFD_CLOEXEC, 0));
    emergency_instance_cgroup_ = tracker_->where();
    emergency_prepare(opts_.report_path.c_str(), emergency_instance_cgroup_.c_str());
    return Ok{};
}

std::optional<int> Supervisor::start_child() {
    // The main child is a unit of work like any other: admitted before it starts, rolled back if
    // it never does, released when it has been reaped.
    main_ticket_ = admission_.try_admit(EntryPath::Main);
    SpawnSpec spec;
    spec.argv = opts_.command;
    spec.env = Environment::inherited(UnitKind::Main).entries();
    spec.session =
        opts_.new_session ? SpawnSpec::Session::NewSession : SpawnSpec::Session::NewGroup;
    spec.take_tty = ::isatty(STDIN_FILENO) == 1;
    hand_over_terminal(spec);
    if (opts_.restore_inherited_signals && opts_.inherited_signals)
        spec.inherited_signals = &*opts_.inherited_signals;
    spec.cgroup_fd = tracker_->spawn_cgroup_fd();
    spec.pdeathsig = opts_.pdeathsig;
    spec.no_new_privs = opts_.no_new_privs;
    spec.credentials = opts_.credentials;  // resolved (and checked) by parse_command_line
    for (auto* c : components_) c->prepare_spawn(spec, true);
    auto result = spawn(spec);
    if (result.error) {
        spdlog::error("{}", result.error->message);
        main_ticket_->rollback();
        report_start_failure(1, result.error->message);
        return 1;
    }
    if (result.failure) {
        main_ticket_->rollback();
        const auto& f = *result.failure;
        int code = opts_.exec_failure_exit ? opts_.exec_failure_exit : f.exit_code();
        if (f.stage == SpawnStage::Exec && voice_.exec_failed(opts_.command.front(), f.err)) {
            if (opts_.compat == CompatMode::Tini) code = PeerVoice::tini_exec_exit_code(f.err);
        } else {
            spdlog::error("{}", f.message());
        }
        report_start_failure(code, f.message());
        return code;
    }
    main_ticket_->started();
    main_pid_ = result.child->pid;
    main_pidfd_ = std::move(result.child->pidfd);
    emergency_main_started(main_pid_);
    book_.set_main(main_pid_, opts_.command);
    if (!voice_.spawned(main_pid_, opts_.command.front()))
        spdlog::debug("spawned pid {}: {}", main_pid_, join(opts_.command));
    voice_.setsid_done(spec.take_tty);
    for (auto* c : components_) c->child_started(main_pid_);
    if (voice_.says_idle_polls()) start_idle_polls();

    if (!opts_.ready_file.empty()) {
        // Written as root, possibly where the app can write too: never through a planted link,
        // FIFO or hard link (safe_path.hpp).
        auto fd = create_file_safely(opts_.ready_file, 0644);
        if (!fd) {
            spdlog::error("ready file: {}", fd.error().message);
        } else {
            std::string pid = std::to_string(main_pid_) + "\n";
            if (::write(fd->get(), pid.data(), pid.size()) < 0)
                spdlog::error("write ready file {}: {}", opts_.ready_file, std::strerror(errno));
            spdlog::debug("ready: created {}", opts_.ready_file);
        }
    }
    return std::nullopt;
}

void Supervisor::hand_over_terminal(SpawnSpec& spec) {
    if (opts_.compat == CompatMode::DumbInit && opts_.new_session) {
        // dumb-init's setsid mode: give up the terminal, so that the child, leading a new
        // session, can take it as its controlling terminal (TIOCSCTTY in the spawner) and a
        // shell there has job control. A session leader that lets go of its terminal makes the
        // kernel send SIGHUP and SIGCONT to its foreground group, that is to lastcall itself.
        bool leader = ::getsid(0) == ::getpid();
        int err = ::ioctl(STDIN_FILENO, TIOCNOTTY) == 0 ? 0 : errno;
        voice_.tty_detach(err, leader);
        if (err == 0 && leader) policy_.expect_handoff_echo();
        return;
    }
    // `docker run -it`: lastcall leads the session whose controlling terminal is on stdin, and
    // nobody above it does job control. A child in a new session could not have the terminal
    // (it is lastcall's), so it gets a group of its own in lastcall's session, made the
    // terminal's foreground group: ^C, ^Z and ^\ reach it from the kernel, and a shell there
    // runs its jobs as on any terminal.
    if (opts_.compat == CompatMode::None && spec.take_tty &&
        spec.session == SpawnSpec::Session::NewSession && ::tcgetsid(STDIN_FILENO) == ::getpid())
        spec.session = SpawnSpec::Session::NewGroup;
}

void Supervisor::loop_until_stopped() {
    while (shutdown_.state() != State::Stopped) {
        if (auto st = loop_->run_once(); !st) {
            // Nothing can be waited for any more: end the tree now rather than leave it behind.
            spdlog::critical("event loop failed: {}; killing the tree", st.error().message);
            kill_tree();
            reap_all(nullptr, [this](const Reaped& r) { book_.reaped(r, true, clock_.now()); });
            return;
        }
        rearm_timer();
    }
}

void Supervisor::rearm_timer() {
    auto deadline = shutdown_.next_deadline();
    if (auto st = timer_->arm(deadline); !st) spdlog::error("{}", st.error().message);
}

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
    // first, and the outside must see it closed before the child can react), the main child
    // gets the stop signal through the pidfd it already has, before any bookkeeping: the log
    // lines, the state machine, the enumeration of the rest of the tree and its pidfds.
    // signal_tree() then skips it: each process gets the stop signal once.
    // The main child's TERM handler may fork a cleanup helper before the passes over the rest
    // of the tree reach it (the freeze takes 0.1-1 ms to settle; a /proc walk as long): the
    // birth line, read just before the signal, tells the passes that it was born after the stop
    // began, and they leave it alone (take_stop). Without a birth line the main child is
    // signalled first only where nothing is frozen, as before the line existed.
    // The pidfd last: bench/hot_symbols.py runs lastcall under valgrind, which has no pidfds,
    // and lists what it sees run; every other check here is then on its list (a function on
    // this path outside the hot pages faults before the signal: 37 us once).
    if (main_status_ || opts_.drain_delay.count() > 0 || !opts_.pre_stop.empty() ||
        !opts_.ready_file.empty() || !opts_.config_path.empty() || announced_outside() ||
        !main_pidfd_)
        return;
    auto line = read_birth_line(last_pid_fd_.get());
    if (!line && effective_scope() != Scope::Child && tracker_->freezes()) return;
    int stop = opts_.stop_signal ? opts_.stop_signal : sig;
    if (!send_stop_to_main(stop)) return;
    birth_line_ = line;
    // The child may be woken on this CPU (the kernel places a wakee near its waker), where it
    // waited for lastcall's bookkeeping below, 0.35-0.55 ms, before its handler could run (one
    // run in eight in sched traces). Its handler first: the rest of the tree gets its stop
    // signal a slice later at most. Where the child runs elsewhere this returns at once.
    // Through syscall(), which start-up has already called (pidfd_open): sched_yield() would be
    // the dynamic binary's first call of it, bound lazily by ld.so (a symbol lookup and a page of
    // libc faulted in) before the yield, while the child waited on this CPU.
    ::syscall(SYS_sched_yield);
    main_stopped_first_ = true;
    // Its record exists since the spawn: no /proc read here. The stop passes fill in its start
    // time when they come to it.
    if (auto* rec = book_.live_main()) {
        rec->stop_signal = stop;
        rec->signalled_at = clock_.now();
        rec->last_pid_at_stop = line ? line->last_pid : 0;
    }
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
    children_gone_ = reap_all(want_info, [&](const Reaped& r) {
        ++count;
        on_reaped(r, forcing, outcome);
    });
    if (outcome.pre_stop_done) {
        on_pre_stop_output();  // whatever is left in the pipe
        warn_if_pre_stop_failed();
        shutdown_.on_pre_stop_done();
    }
    if (outcome.main_exited) shutdown_.on_main_exit();
    pace_sweeps(shutdown_.state() == State::Running ? count : 0, clock_.now() - began);
    check_tree_gone();
}

void Supervisor::on_reaped(const Reaped& r, bool forcing, ReapOutcome& outcome) {
    book_.reaped(r, forcing, clock_.now());
    for (auto* c : components_) c->reaped(r);
    bool peer_logged = voice_.reaped(r.pid, r.status, r.pid == main_pid_);
    if (r.pid == main_pid_) {
        main_status_ = r.status;
        emergency_main_reaped(r.status);
        if (main_pidfd_watched_) loop_->unwatch(main_pidfd_.get());  // before its number is reused
        main_pidfd_watched_ = false;
        main_pidfd_.reset();
        main_ticket_->release();
        outcome.main_exited = true;
        if (!peer_logged) spdlog::debug("child pid {} {}", r.pid, describe_wait_status(r.status));
    } else if (r.pid == pre_stop_pid_) {
        remove_helper_session(pre_stop_pid_);
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

void Supervisor::check_tree_gone() {
    State s = shutdown_.state();
    if (s == State::Running || s == State::Stopped) return;
    // No SIGCHLD may ever come (lastcall ran without a command and nothing was running), and a
    // component may have spawned since the last reap saw none (a scheduled job): ask the kernel
    // directly, without reaping, whether any child is left.
    children_gone_ = peek_children() == Children::None;
    // lastcall is PID 1 or a subreaper, so every descendant is reparented to it before it dies:
    // no child left means no descendant left. cgroup.events is not waited for: its
    // notification is rate-limited by the kernel and would add milliseconds to every exit.
    if (!children_gone_) return;
    shutdown_.on_tree_empty();
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

Supervisor::Children Supervisor::peek_children() const {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
        return errno == ECHILD ? Children::None : Children::Running;  // EINTR: assume some
    return si.si_pid != 0 ? Children::Exited : Children::Running;
}

void Supervisor::on_timer() {
    timer_->consume();
    shutdown_.on_timer();
}

bool Supervisor::note_stop_signal(const ProcInfo& p, int sig) {
    if (shutdown_.state() == State::Running) return true;  // not part of a shutdown's record
    auto& rec = book_.observe(p);
    if (rec.stop_signal) return false;
    rec.stop_signal = sig;
    rec.signalled_at = clock_.now();
    return true;
}

bool Supervisor::take_stop(const ProcInfo& p) {
    if (stop_scope_ == Scope::Group && p.pgid != main_pid_) return false;
    // Born after the stop began to a process that had already been told to stop (or to one of
    // its helpers): a cleanup helper. Not a member to stop; the kill at grace end covers it if it
    // is still there. Born after the line to a process that had not had the stop signal yet (a
    // pre-fork server's worker, forked while the passes had not reached its parent): a member
    // like any other, or it would only ever get the SIGKILL (a forced stop of a tree that
    // obeys SIGTERM).
    if (birth_line_ && p.pid != main_pid_ && birth_line_->born_after(p)) {
        std::optional<StopHelpers::Parent> parent;
        if (const ProcessRecord* rec = book_.find_live(p.ppid))
            parent = StopHelpers::Parent{rec->stop_signal, rec->last_pid_at_stop};
        static const StopHelpers::Probes probes{stop_signal_pending,
                                                [](pid_t pid) -> std::optional<unsigned long long> {
                                                    if (auto info = read_proc_stat(pid))
                                                        return info->start;
                                                    return std::nullopt;
                                                }};
        if (stop_helpers_.is_helper(p, parent, probes)) return false;
    }
    // lastcall's own helpers (the pre-stop hook, a job's verify) are not part of what is being
    // stopped: a commit step cut by the tree's SIGTERM would throw away finished work.
    if (helper_sessions_.count(p.sid)) return false;
    auto& rec = book_.observe(p);
    if (rec.stop_signal) return false;  // each process gets the stop signal once
    for (const auto* c : components_)
        if (c->sent_stop_signal(p)) return false;
    rec.stop_signal = stop_signal_;
    rec.signalled_at = clock_.now();
    rec.last_pid_at_stop = 0;  // read once the signal is out (send_stop_and_mark)
    return true;
}

// The stop signal to a member the passes took, then the last pid handed out: a child with a
// larger pid was born after the signal went out. Read before the signal, a worker a pre-fork
// server forked between the read and the signal was taken for a helper and only ever got the
// SIGKILL (CI under the sanitizers: two workers, a tree that obeys SIGTERM reported forced). A
// fork that the signal finds in progress still completes, with a pid the kernel allocates late
// in it, possibly after this read: StopHelpers takes that child for a member only while its
// parent still has the signal pending (the known limit in docs/design.md).
bool Supervisor::send_stop_and_mark(const ProcInfo& p, int sig) {
    bool sent = signal_exact(p, sig);
    if (sent && sig == stop_signal_)
        if (auto* rec = book_.find_live(p.pid))
            rec->last_pid_at_stop = read_last_pid(last_pid_fd_.get());
    return sent;
}

void Supervisor::on_pre_stop_output() {
    if (!pre_stop_out_) return;
    char buf[4096];
    // At most 64 KiB per turn of the loop, as a service's output (on_output): a hook that writes
    // as fast as it can must not keep a signal, a reap or the grace's timer waiting. epoll is
    // level-triggered: the rest is read on the next turn.
    for (int reads = 0; reads < 16; ++reads) {
        ssize_t n = ::read(pre_stop_out_.get(), buf, sizeof buf);
        if (n > 0) {
            pre_stop_partial_.append(buf, static_cast<size_t>(n));
            std::size_t nl;
            while ((nl = pre_stop_partial_.find('\n')) != std::string::npos) {
                if (nl > 0) pre_stop_last_line_ = pre_stop_partial_.substr(0, nl);
                spdlog::debug("pre-stop: {}", pre_stop_partial_.substr(0, nl));
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
            spdlog::debug("pre-stop: {}", pre_stop_partial_);
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

// ---- ShutdownActions: what each state change does to the world ----

void Supervisor::state_changed(State from, State to, Event why) {
    spdlog::debug("state {} -> {} ({})", to_string(from), to_string(to), to_string(why));
    // Intake closes before anything else happens in the shutdown: from here on no spawn, run or
    // restart is admitted, so the drain's view of active work can only shrink.
    if (from == State::Running) {
        // Every exit wakes the loop again: the shutdown sweeps at each SIGCHLD.
        end_sweep_pacing();
        admission_.close();
        // Not last_pid_fd_: the stop passes read it after each stop signal (send_stop_and_mark).
        for (auto& fd : reserved_fds_) fd.reset();
        watch_tree_events();
    }
    if (why == Event::HoldExpired)
        spdlog::warn(
            "the ordered stop is past half of the grace: the rest of the tree gets its "
            "stop signal now");
    for (auto* c : components_) c->state_changed(from, to);
    if (to == State::Forcing)
        record_force(ForceKind::EnteredForcing, std::string(to_string(why)), 0);
    if (why == Event::GiveUp) {
        gave_up_ = true;
        record_force(ForceKind::Abandoned, "survived SIGKILL", 0);
        spdlog::error("processes survived SIGKILL for {}: giving up on them",
                      format_duration(ShutdownConfig{}.force_limit));
    }
}

void Supervisor::readiness_off() {
    if (opts_.ready_file.empty()) return;
    if (auto st = remove_file_safely(opts_.ready_file); !st)
        spdlog::error("readiness off: {}", st.error().message);
    else
        spdlog::debug("readiness off: removed {}", opts_.ready_file);
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
    add_helper_session(pre_stop_pid_);
    pre_stop_out_ = std::move(read_end);
    auto st = loop_->watch(pre_stop_out_.get(), EPOLLIN, [this](auto) { on_pre_stop_output(); });
    if (!st) spdlog::warn("pre-stop output will not be logged: {}", st.error().message);
    spdlog::debug("pre-stop hook started, pid {}: {}", pre_stop_pid_, opts_.pre_stop);
}

void Supervisor::signal_tree(int sig) {
    Scope scope = effective_scope();
    stop_signal_ = sig;
    stop_scope_ = scope;
    int n = main_stopped_first_ ? 1 : 0;
    if (scope == Scope::Child) {
        if (!main_stopped_first_ && main_pidfd_ && send_stop_to_main(sig)) {
            if (auto info = read_proc_stat(main_pid_)) book_.observe(*info).stop_signal = sig;
            n = 1;
        }
    } else if (peek_children() != Children::None) {
        // With no child left there is no descendant left either (lastcall is PID 1 or a
        // subreaper): the common exit path of a command that left nothing behind skips the
        // enumeration (a read of cgroup.procs, or of all of /proc for the /proc tracker).
        // The birth line, unless the main child's stop signal drew it already: from here on,
        // a new process is a helper of the stop.
        if (!last_pid_fd_) last_pid_fd_ = open_ns_last_pid();
        if (!birth_line_) birth_line_ = read_birth_line(last_pid_fd_.get());
        n += run_stop_passes();
    }
    spdlog::debug("sent {} to {} process(es) (kill scope {})", signal_name(sig), n,
                  to_string(scope));
    check_tree_gone();
}

int Supervisor::run_stop_passes() {
    // The stop primitive: once to each member, SIGCONT after it, passes until nobody new.
    // No kill(-pgid) first: a process would get it twice. No rescans later: a process born
    // after this is a cleanup helper, and the kill at grace end covers it.
    // A round ends at the grace deadline at the latest: the grace timer must be free to fire.
    auto out_of_time =
        stop_rounds_.budget([this] { return clock_.now(); }, shutdown_.next_deadline());
    StopPassIo io{[&] { return tracker_->members_within(out_of_time); },
                  [this](const ProcInfo& p, int sig) { return send_stop_and_mark(p, sig); },
                  out_of_time, [this] { return one_hold(hold_tree_still()); }};
    auto result = send_stop_round(
        io, stop_signal_, [this](const ProcInfo& p) { return take_stop(p); }, stop_rounds_);
    if (result.cut()) {
        // The budget ended a pass half-way (the /proc tracker signals a member in about 0.2 ms
        // on a slow machine: a 1,000-process tree's first pass took longer than the budget),
        // and members it had not reached yet would have waited for the kill at grace end
        // without ever getting the stop signal. The loop gets its turn (a second signal, the
        // grace timer), then the passes go on where the record says they stopped: take_stop()
        // still gives each process the signal once. The tree stays held meanwhile
        // (stop_rounds_), so that no cleanup helper is born to be taken for a member.
        loop_->post([this] {
            if (shutdown_.state() != State::Stopping) {
                stop_rounds_.end();  // forcing or stopped meanwhile: the kill needs no hold
                return;
            }
            int more = run_stop_passes();
            spdlog::debug("sent {} to {} more process(es)", signal_name(stop_signal_), more);
            check_tree_gone();
        });
    } else if (!result.settled()) {
        spdlog::warn(
            "processes kept appearing while {} went out: the rest is killed at the end of the "
            "grace",
            signal_name(stop_signal_));
    }
    return result.signalled;
}

void Supervisor::kill_tree() {
    // A repeat while the tree collapses is put off, up to a second: 2,000 processes killed at
    // once take the kernel over half a second to end, and a walk of them meanwhile (every
    // 100 ms) competed with their exits for the CPU and kept the loop from reaping them (a fork
    // bomb's force: 0.2-0.5 s longer). Collapsing: a child waits to be reaped, or one was
    // reaped since the last look. Reaping is what shrinks the tree, and the walk after it is
    // short. Not forever: a process outside the killed groups may keep leaving children to reap.
    MonoTime now = clock_.now();
    bool collapsing =
        book_.reaped_count() > reaped_at_last_look_ || peek_children() == Children::Exited;
    reaped_at_last_look_ = book_.reaped_count();
    if (last_kill_walk_ && now - *last_kill_walk_ < std::chrono::seconds(1) && collapsing) return;
    last_kill_walk_ = now;
    for (auto* c : components_) c->before_force();
    // With the /proc tracker nothing holds off forks while /proc is walked. Under a fork bomb
    // (2,000 processes of one user retrying fork on 2 cores) lastcall got a sliver of the CPU,
    // one walk took tens of seconds while the bomb refilled what it killed, and lastcall gave up
    // with processes left (58 s in CI). SIGSTOP to the whole groups first (the main child's
    // process group; every process of the namespace as PID 1): in one system call the bulk of
    // the tree stops forking and stops competing for the CPU, so the walk below is short,
    // complete, and names each process before it dies. The cgroup tracker's kill is
    // cgroup.kill, atomic however many members fork: no stop needed.
    //
    // Not killed first: a process that dies before the walk reaches it, reaped by its own
    // parent, would be missing from the record (a fork bomb's report named 1,376 of 1,999).
    auto group = tracker_->name() == "proc" ? whole_group_target() : std::nullopt;
    bool held = group && ::kill(*group, SIGSTOP) == 0;
    // A stopped member of the held groups is killed as soon as the walk has named it and listed
    // its children (Tracker::members_listing): the kernel ends the first members while the walk
    // finds the last, where killing the groups after the walk left 2,000 exits (half a second
    // on 2 cores) to start only once the walk (0.1 s) was over. By its pid alone, with one
    // kill(): stopped, it can neither exit nor leave the group, so the pid still names it, and
    // a pidfd_open, a /proc read and a pidfd_send_signal for each of thousands would lengthen
    // the walk. Its children, reparented to lastcall when it dies, are on the walk's list and
    // stopped too. A zombie leader with live threads is signalled through its pidfd.
    auto killed_while_held = [&](const ProcInfo& p) {
        return held && p.state != 'Z' && (*group == -1 || p.pgid == -*group) &&
               ::kill(p.pid, SIGKILL) == 0;
    };
    int killed_held = 0;
    // Whatever the kill scope, the escalation covers the whole tree: lastcall never exits with
    // a descendant left behind. Held, one walk: the group cannot fork, and what a process
    // outside it forks meanwhile gets the next SIGKILL (Forcing repeats it every 100 ms).
    int n = tracker_->kill_all(
        [&](const ProcInfo& p) {
            auto& rec = book_.observe(p);
            if (rec.killed) {
                // Killed while held, and still here: slow to die, or not stopped after all (its
                // parent moved it into the group after the stop). One more SIGKILL, through its
                // pidfd, settles either.
                if (std::exchange(rec.killed_by_pid, false)) (void)signal_exact(p, SIGKILL);
                return false;
            }
            rec.killed = true;
            if (!killed_while_held(p)) return true;
            rec.killed_by_pid = true;
            ++killed_held;
            return false;
        },
        held ? 1 : 3);
    n += killed_held;
    // After the walk: the groups' kill reaches what the walk missed (a member stopped above that
    // forked just before the stop), and is the fallback when lastcall has no descriptor left
    // for the walk (RLIMIT_NOFILE lowered under its feet).
    (void)signal_whole_groups(SIGKILL);
    record_force(tracker_->name() == "cgroup" ? ForceKind::CgroupKill : ForceKind::Sigkill,
                 "escalation", n);
    if (n > 0) spdlog::warn("sent SIGKILL to {} process(es)", n);
}

FreezeHold Supervisor::hold_tree_still() {
    // With a birth line the passes are right without a hold: a process forked while they run is
    // born after the line, a helper the passes leave alone, so one pass reaches every member and
    // the next finds nobody new. Frozen anyway, the main child signalled first would be caught
    // by the freeze on its way into its TERM handler (SIGTERM to the handler: 0.9 ms instead of
    // 0.3). A hold still keeps the passes short when the tree competes for the CPU (below).
    bool crowded = run_queue_crowded();
    if (birth_line_ && !crowded) return {};
    if (tracker_->freezes()) return tracker_->freeze();
    // The /proc tracker's walk competes for the CPU with the tree it walks. Under a fork bomb
    // (2,000 runnable processes on 2 cores) one stop pass took 8 s of a 2 s grace, and the grace
    // timer could not fire while it ran. Then the main group is held with SIGSTOP for the passes:
    // the walk is short and sees a tree that cannot grow. Only then: a parent that waits with
    // WUNTRACED sees the stop (an interactive shell reports its job stopped), which the cgroup
    // freezer never shows.
    if (!crowded) return {};
    auto target = whole_group_target();
    if (!target || ::kill(*target, SIGSTOP) != 0) return {};
    spdlog::debug("the run queue is crowded: the tree is held with SIGSTOP for the stop passes");
    return FreezeHold::stopped_group(*target);
}

std::optional<pid_t> Supervisor::whole_group_target() const {
    // As PID 1 every process of the namespace is part of the tree; otherwise the main child's
    // process group, whose id cannot be reused while the main child is unreaped.
    if (::getpid() == 1) return -1;
    if (main_pid_ > 0 && !main_status_) return -main_pid_;
    return std::nullopt;
}

bool Supervisor::signal_whole_groups(int sig) {
    // One system call, and one a racing fork cannot escape: the kernel fails a fork that a group
    // signal interrupts, and the parent retries it only after the signal has acted.
    auto target = whole_group_target();
    return target && ::kill(*target, sig) == 0;
}

Scope Supervisor::effective_scope() const {
    // "The child" cannot be signalled once it is gone (or when there is none): then the stop
    // signal goes to what is left of the tree instead of it waiting for SIGKILL.
    Scope scope = opts_.kill_scope;
    if (scope == Scope::Child && (main_status_ || main_pid_ < 0)) scope = Scope::Tree;
    return scope;
}

void Supervisor::forward_extra(int sig) {
    Scope scope = effective_scope();
    forward(sig, scope);
    spdlog::debug("sent {} to the {} (a distinct signal of the stop burst)", signal_name(sig),
                  to_string(scope));
}

void Supervisor::record_force(ForceKind kind, std::string source, int count) {
    if (shutdown_.state() == State::Running) return;
    // Forcing repeats SIGKILL every 100 ms: one fact per source and kind, with the largest count.
    for (auto& f : force_facts_)
        if (f.kind == kind && f.source == source) {
            f.count = std::max(f.count, count);
            return;
        }
    force_facts_.push_back({kind, std::move(source), count, clock_.now()});
}

void Supervisor::request_shutdown(int exit_code) {
    if (shutdown_.state() != State::Running) return;
    requested_exit_ = exit_code;
    shutdown_.on_main_exit();
    check_tree_gone();
    rearm_timer();
}

void Supervisor::request_shutdown_soon(int exit_code) {
    if (shutdown_.state() != State::Running || requested_exit_) return;
    requested_exit_ = exit_code;
    admission_.close();
    loop_->post([this, exit_code] { request_shutdown(exit_code); });
}

void Supervisor::hold_drain() {
    shutdown_.hold_drain();
}

void Supervisor::release_drain() {
    shutdown_.release_drain();
    check_tree_gone();
    rearm_timer();
}

Supervisor::~Supervisor() = default;

UnitHost& Supervisor::unit_host() {
    if (!unit_host_) unit_host_ = make_supervisor_host(*this);
    return *unit_host_;
}

ReportInput Supervisor::report_input(int code) {
    ReportInput in;
    in.book = &book_;
    in.gave_up = gave_up_;
    in.force_facts = &force_facts_;
    in.command = opts_.command;
    in.main_pid = main_pid_;
    in.main_status = main_status_;
    in.exit_code = code;
    in.tracker = std::string(tracker_->name());
    in.kill_scope = std::string(to_string(opts_.kill_scope));
    in.grace = opts_.grace;
    in.drain_delay = opts_.drain_delay;
    in.shutdown = &shutdown_;
    in.now = clock_.now();
    in.wall_now = std::chrono::system_clock::now();
    in.admission = admission_.stats();
    in.log_lines_lost = log_lines_lost();
    in.log_lines_waiting = log_lines_waiting();
    in.pre_stop = pre_stop_run_;
    in.oom_kills = oom_kills_since_start();
    return in;
}

// A command that could not be started still leaves its record: the previous run's report must
// not stay in place and tell whoever reads it (a crash-looping container's volume) that this run
// ended clean with code 0.
void Supervisor::report_start_failure(int code, const std::string& why) {
    if (opts_.report_path.empty()) return;
    ReportInput in = report_input(code);
    in.extra = [&why](JsonWriter& j) {
        j.key("start_failed").begin_object();
        j.field("error", why);
        j.end_object();
    };
    if (auto st = write_report(opts_.report_path, render_report(in)); !st)
        spdlog::error("shutdown report not written: {}", st.error().message);
}

int Supervisor::finish() {
    // The main child's code; a component's requested code; without a main child, 0 for a clean
    // stop; 128+SIGKILL when the main child could not even be reaped.
    ReportInput in = report_input(0);
    int code = requested_exit_ ? *requested_exit_
               : main_status_  ? exit_code_of(*main_status_)
               : main_pid_ < 0 ? exit_code_without_main(verdict_of(in))
                               : 128 + SIGKILL;
    if (opts_.success_exits.count(code)) {
        spdlog::debug("child exit code {} counts as success (--success-exit)", code);
        code = 0;
    }
    for (const auto& [sig, flood] : floods_)
        if (flood.unlogged > 0)
            spdlog::debug("received {} {} more time(s) since the last line: each forwarded",
                          signal_name(sig), flood.unlogged);
    in.exit_code = code;
    for (auto* c : components_) c->settle_records();
    in.extra = [this](JsonWriter& j) {
        for (auto* c : components_) c->contribute_report(j);
    };
    // The record is written after every process is reaped and before shared resources close.
    if (!opts_.report_path.empty()) {
        if (auto st = write_report(opts_.report_path, render_report(in)); !st)
            spdlog::error("shutdown report not written: {}", st.error().message);
        else
            spdlog::debug("shutdown report written to {}", opts_.report_path);
    }
    if (auto st = tracker_->remove(); !st) spdlog::warn("{}", st.error().message);
    ending_ = std::make_unique<Ending>(ending_of(in));
    for (auto* c : components_) c->finished(code);
    // The one line a shutdown prints at the default level; everything before it is -v.
    if (worth_a_line(in))
        spdlog::info("{}", summarize(in));
    else
        spdlog::debug("{}", summarize(in));
    voice_.exiting();
    return code;
}

}  // namespace lastcall
