#include "lastcall/supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <spdlog/spdlog.h>

#include "lastcall/duration.hpp"
#include "lastcall/signals.hpp"

extern char** environ;

namespace lastcall {

namespace {

// During the drain, the tree is enumerated again at this period so that a process forked after
// the stop signal went out gets it too. Only while Stopping: an idle lastcall never wakes.
constexpr std::chrono::milliseconds kDrainRescan{50};
constexpr std::chrono::milliseconds kDrainRescanMax{800};

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
    return "changed state " + std::to_string(status);
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
    return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
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
    if (::getpid() == 1) {
        spdlog::debug("running as PID 1: orphans of the whole namespace are reaped here");
    } else if (auto st = become_subreaper(); !st) {
        return st;
    } else if (opts_.warn_implicit_subreaper) {
        // tini without -s would not reap orphans here; lastcall does, and says so once.
        spdlog::warn("not running as PID 1: registered as a child subreaper (tini needs -s or "
                     "TINI_SUBREAPER for that; pass either to silence this warning)");
    }
    auto choice = make_tracker(opts_.tracker, "lastcall-" + std::to_string(::getpid()));
    if (!choice) return choice.error();
    tracker_ = std::move(choice->tracker);
    spdlog::info("tracking the process tree with the {} tracker: {}", tracker_->name(),
                 choice->reason);

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
    if (auto st = loop_->watch(timer_->fd(), EPOLLIN, [this](auto) { on_timer(); }); !st)
        return st;
    // The tree's events (cgroup.events) are watched from the start of the shutdown only: while
    // Running nothing acts on them, and the notification that the cgroup became populated woke
    // the loop once on every start.
    for (auto* c : components_)
        if (auto st = c->attach(*this); !st) return st;
    // A few descriptors held back for the shutdown: signalling a member needs a pidfd and a /proc
    // read at once, and a tree that exhausted RLIMIT_NOFILE must still get its stop signal.
    for (auto& fd : reserved_fds_) fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return Ok{};
}

std::vector<std::string> Supervisor::child_environment() const {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        std::string_view kv(*e);
        // The child must not talk to systemd behind lastcall's back: systemd knows lastcall as the
        // service's main pid and would refuse (or misattribute) the child's messages.
        if (kv.starts_with("NOTIFY_SOCKET=")) continue;
        env.emplace_back(kv);
    }
    return env;
}

std::optional<int> Supervisor::start_child() {
    // The main child is a unit of work like any other: admitted before it starts, rolled back if
    // it never does, released when it has been reaped.
    main_ticket_ = admission_.try_admit();
    SpawnSpec spec;
    spec.argv = opts_.command;
    spec.env = child_environment();
    spec.session =
        opts_.new_session ? SpawnSpec::Session::NewSession : SpawnSpec::Session::NewGroup;
    spec.take_tty = ::isatty(STDIN_FILENO) == 1;
    spec.cgroup_procs_fd = tracker_->spawn_cgroup_fd();
    spec.pdeathsig = opts_.pdeathsig;
    spec.no_new_privs = opts_.no_new_privs;
    if (!opts_.user.empty()) {
        auto creds = lookup_credentials(opts_.user);
        if (!creds) {
            spdlog::error("{}", creds.error().message);
            return 1;
        }
        spec.credentials = *creds;
    }
    for (auto* c : components_) c->prepare_spawn(spec, true);
    auto result = spawn(spec);
    if (result.error) {
        spdlog::error("{}", result.error->message);
        main_ticket_->rollback();
        return 1;
    }
    if (result.failure) {
        spdlog::error("{}", result.failure->message());
        main_ticket_->rollback();
        return opts_.exec_failure_exit ? opts_.exec_failure_exit : result.failure->exit_code();
    }
    main_ticket_->started();
    main_pid_ = result.child->pid;
    main_pidfd_ = std::move(result.child->pidfd);
    book_.set_main(main_pid_);
    spdlog::info("spawned pid {}: {}", main_pid_, join(opts_.command));
    for (auto* c : components_) c->child_started(main_pid_);

    if (!opts_.ready_file.empty()) {
        UniqueFd fd(::open(opts_.ready_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) {
            spdlog::error("ready file {}: {}", opts_.ready_file, std::strerror(errno));
        } else {
            std::string pid = std::to_string(main_pid_) + "\n";
            if (::write(fd.get(), pid.data(), pid.size()) < 0)
                spdlog::error("write ready file {}: {}", opts_.ready_file, std::strerror(errno));
            spdlog::info("ready: created {}", opts_.ready_file);
        }
    }
    return std::nullopt;
}

void Supervisor::loop_until_stopped() {
    while (shutdown_.state() != State::Stopped) {
        if (auto st = loop_->run_once(); !st) {
            // Nothing can be waited for any more: end the tree now rather than leave it behind.
            spdlog::critical("event loop failed: {}; killing the tree", st.error().message);
            kill_tree();
            reap_all(nullptr, [this](const Reaped& r) { book_.reaped(r, true); });
            return;
        }
        rearm_timer();
    }
}

void Supervisor::rearm_timer() {
    auto deadline = shutdown_.next_deadline();
    if (next_rescan_ && shutdown_.state() == State::Stopping)
        deadline = deadline ? std::min(*deadline, *next_rescan_) : *next_rescan_;
    if (auto st = timer_->arm(deadline); !st) spdlog::error("{}", st.error().message);
}

void Supervisor::on_signals() {
    signalfd_siginfo info;
    bool child_event = false;
    for (;;) {
        ssize_t n = ::read(signal_fd_.get(), &info, sizeof info);
        if (n != static_cast<ssize_t>(sizeof info)) break;  // EAGAIN: all pending signals read
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
        if (sig == SIGCHLD)
            child_event = true;
        else
            on_signal(sig);
    }
    if (child_event) on_sigchld();
}

void Supervisor::on_signal(int received) {
    int sig = received;
    if (auto it = opts_.rewrite.find(received); it != opts_.rewrite.end()) {
        sig = it->second;
        if (sig == 0) {
            spdlog::info("received {}: dropped (--rewrite)", signal_name(received));
            return;
        }
        spdlog::debug("received {}: rewritten to {}", signal_name(received), signal_name(sig));
    }
    if (is_termination_signal(sig)) {
        if (shutdown_.state() == State::Running) stop_main_child_first(sig);
        // Logged before the state machine runs, so the log reads cause first, then effects.
        if (shutdown_.state() == State::Running)
            spdlog::info("received {}: starting shutdown (grace {})", signal_name(sig),
                         format_duration(opts_.grace));
        switch (shutdown_.on_signal(sig)) {
            case SignalOutcome::Started:
                break;
            case SignalOutcome::Coalesced:
                spdlog::debug("received {} within {} of the previous one: same burst",
                              signal_name(sig), format_duration(opts_.coalesce));
                break;
            case SignalOutcome::Escalated:
                spdlog::warn("received {} again: escalating to SIGKILL", signal_name(sig));
                break;
            case SignalOutcome::Ignored:
                spdlog::debug("received {}: already forcing", signal_name(sig));
                break;
        }
        return;
    }
    if (is_job_control_signal(sig)) return suspend(sig);
    if (sig == SIGCONT) {
        spdlog::info("received SIGCONT: resuming the child's group");
        return forward(SIGCONT, Scope::Group);
    }
    spdlog::info("received {}: forwarding to the {}", signal_name(sig),
                 to_string(opts_.forward_to));
    forward(sig, opts_.forward_to);
}

void Supervisor::stop_main_child_first(int sig) {
    // When the shutdown will signal the tree at once (no drain delay, readiness file, pre-stop
    // hook or ordered stop of --config services before it), the main child gets the stop signal
    // through the pidfd it already has, before any bookkeeping: the log lines, the state machine,
    // the enumeration of the rest of the tree and its pidfds. signal_tree() then skips it: each
    // process gets the stop signal once.
    if (main_status_ || !main_pidfd_ || opts_.drain_delay.count() > 0 || !opts_.pre_stop.empty() ||
        !opts_.ready_file.empty() || !opts_.config_path.empty())
        return;
    int stop = opts_.stop_signal ? opts_.stop_signal : sig;
    if (!send_via_pidfd(main_pidfd_.get(), stop)) return;
    main_stopped_first_ = true;
    if (auto info = read_proc_stat(main_pid_)) book_.observe(*info).stop_signal = stop;
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
            tracker_->signal_all(
                sig, [&](const ProcInfo& p) { return seen.insert({p.pid, p.start}).second; });
            break;
        }
    }
}

void Supervisor::suspend(int sig) {
    // As a shell expects of a job: the child's group stops, then lastcall itself, so the parent
    // shell sees a stopped job. SIGCONT (fg/bg) resumes lastcall, which then resumes the group.
    spdlog::info("received {}: stopping the child's group and lastcall", signal_name(sig));
    // A child that leads its own session is in an orphaned process group (its parent, lastcall,
    // is in another session), and the kernel discards SIGTSTP/TTIN/TTOU sent to such a group
    // unless they are caught: only SIGSTOP is sure to stop it (dumb-init does the same).
    forward(opts_.new_session ? SIGSTOP : sig, Scope::Group);
    if (::getpid() != 1) ::kill(::getpid(), SIGSTOP);
}

void Supervisor::on_sigchld() {
    bool main_exited = false, pre_stop_done = false;
    // During the shutdown every process is itemised in the report; one already seen alive needs
    // no second /proc read. While running, reaped orphans are only counted.
    std::function<bool(pid_t)> want_info;
    if (shutdown_.state() != State::Running)
        want_info = [this](pid_t pid) { return !book_.knows(pid); };
    bool forcing = shutdown_.state() == State::Forcing;
    children_gone_ = reap_all(want_info, [&](const Reaped& r) {
        book_.reaped(r, forcing);
        for (auto* c : components_) c->reaped(r);
        if (r.pid == main_pid_) {
            main_status_ = r.status;
            main_pidfd_.reset();
            main_ticket_->release();
            main_exited = true;
            spdlog::info("child pid {} {}", r.pid, describe_status(r.status));
        } else if (r.pid == pre_stop_pid_) {
            pre_stop_pid_ = -1;
            pre_stop_done = true;
            spdlog::info("pre-stop hook {}", describe_status(r.status));
        } else {
            if (opts_.warn_on_reap)
                spdlog::warn("reaped zombie process pid {} ({})", r.pid, describe_status(r.status));
            else
                spdlog::debug("reaped pid {} ({})", r.pid, describe_status(r.status));
        }
    });
    if (pre_stop_done) {
        on_pre_stop_output();  // whatever is left in the pipe
        shutdown_.on_pre_stop_done();
    }
    if (main_exited) shutdown_.on_main_exit();
    check_tree_gone();
}

void Supervisor::check_tree_gone() {
    State s = shutdown_.state();
    if (s == State::Running || s == State::Stopped) return;
    {
        // No SIGCHLD may ever come (lastcall ran without a command and nothing was running),
        // and a component may have spawned since the last reap saw none (a scheduled job): ask
        // the kernel directly, without reaping, whether any child is left.
        siginfo_t si{};
        children_gone_ = ::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD;
    }
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

bool Supervisor::has_children() const {
    siginfo_t si{};
    return !(::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD);
}

void Supervisor::on_timer() {
    timer_->consume();
    if (next_rescan_ && clock_.now() >= *next_rescan_) rescan_drain();
    shutdown_.on_timer();
}

void Supervisor::rescan_drain() {
    next_rescan_.reset();
    if (shutdown_.state() != State::Stopping) return;
    // One pass: rescans repeat on their own, and each pass of the /proc tracker reads the
    // whole of /proc.
    int n = tracker_->signal_all(
        stop_signal_, [this](const ProcInfo& p) { return take_stop(p); }, 1);
    if (n > 0)
        spdlog::info("sent {} to {} process(es) born during the drain", signal_name(stop_signal_), n);
    // Each rescan reads /proc for the whole tree; a large tree that is slowly draining must not
    // keep lastcall busy, so the period doubles up to kDrainRescanMax while nobody new shows up.
    rescan_period_ = n > 0 ? kDrainRescan : std::min(rescan_period_ * 2, kDrainRescanMax);
    next_rescan_ = clock_.now() + rescan_period_;
}

bool Supervisor::take_stop(const ProcInfo& p) {
    if (stop_scope_ == Scope::Group && p.pgid != main_pid_) return false;
    auto& rec = book_.observe(p);
    if (rec.stop_signal) return false;  // each process gets the stop signal once
    rec.stop_signal = stop_signal_;
    return true;
}

void Supervisor::on_pre_stop_output() {
    if (!pre_stop_out_) return;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(pre_stop_out_.get(), buf, sizeof buf);
        if (n > 0) {
            pre_stop_partial_.append(buf, static_cast<size_t>(n));
            std::size_t nl;
            while ((nl = pre_stop_partial_.find('\n')) != std::string::npos) {
                spdlog::info("pre-stop: {}", pre_stop_partial_.substr(0, nl));
                pre_stop_partial_.erase(0, nl + 1);
            }
            continue;
        }
        if (n < 0 && errno == EAGAIN) return;
        // EOF (or an error): the hook and everything it started closed the pipe.
        if (!pre_stop_partial_.empty()) spdlog::info("pre-stop: {}", pre_stop_partial_);
        pre_stop_partial_.clear();
        loop_->unwatch(pre_stop_out_.get());
        pre_stop_out_.reset();
        return;
    }
}

// ---- ShutdownActions: what each state change does to the world ----

void Supervisor::state_changed(State from, State to, Event why) {
    spdlog::info("state {} -> {} ({})", to_string(from), to_string(to), to_string(why));
    // Intake closes before anything else happens in the shutdown: from here on no spawn, run or
    // restart is admitted, so the drain's view of active work can only shrink.
    if (from == State::Running) {
        admission_.close();
        for (auto& fd : reserved_fds_) fd.reset();
        watch_tree_events();
    }
    for (auto* c : components_) c->state_changed(from, to);
    if (why == Event::GiveUp) {
        gave_up_ = true;
        spdlog::error("processes survived SIGKILL for {}: giving up on them",
                      format_duration(ShutdownConfig{}.force_limit));
    }
}

void Supervisor::readiness_off() {
    if (opts_.ready_file.empty()) return;
    if (::unlink(opts_.ready_file.c_str()) != 0 && errno != ENOENT)
        spdlog::error("readiness off: unlink {}: {}", opts_.ready_file, std::strerror(errno));
    else
        spdlog::info("readiness off: removed {}", opts_.ready_file);
}

void Supervisor::start_pre_stop() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        spdlog::error("pre-stop hook: pipe2: {}", std::strerror(errno));
        return shutdown_.on_pre_stop_done();
    }
    UniqueFd read_end(fds[0]), write_end(fds[1]);
    SpawnSpec spec;
    spec.argv = {"/bin/sh", "-c", opts_.pre_stop};
    spec.env = child_environment();
    spec.session = SpawnSpec::Session::NewGroup;
    spec.cgroup_procs_fd = tracker_->spawn_cgroup_fd();
    spec.stdout_fd = write_end.get();
    for (auto* c : components_) c->prepare_spawn(spec, false);
    auto result = spawn(spec);
    if (!result.child) {
        spdlog::error("pre-stop hook: {}", result.error ? result.error->message
                                                        : result.failure->message());
        return shutdown_.on_pre_stop_done();
    }
    pre_stop_pid_ = result.child->pid;
    pre_stop_out_ = std::move(read_end);
    auto st = loop_->watch(pre_stop_out_.get(), EPOLLIN, [this](auto) { on_pre_stop_output(); });
    if (!st) spdlog::warn("pre-stop output will not be logged: {}", st.error().message);
    spdlog::info("pre-stop hook started, pid {}: {}", pre_stop_pid_, opts_.pre_stop);
}

void Supervisor::signal_tree(int sig) {
    // "The child" cannot be signalled once it is gone (or when there is none): then the stop
    // signal goes to what is left of the tree instead of it waiting for SIGKILL.
    Scope scope = opts_.kill_scope;
    if (scope == Scope::Child && (main_status_ || main_pid_ < 0)) scope = Scope::Tree;
    stop_signal_ = sig;
    stop_scope_ = scope;
    int n = main_stopped_first_ ? 1 : 0;
    if (scope == Scope::Child) {
        if (!main_stopped_first_ && main_pidfd_ && send_via_pidfd(main_pidfd_.get(), sig)) {
            if (auto info = read_proc_stat(main_pid_)) book_.observe(*info).stop_signal = sig;
            n = 1;
        }
    } else if (has_children()) {
        // With no child left there is no descendant left either (lastcall is PID 1 or a
        // subreaper): the common exit path of a command that left nothing behind skips the
        // enumeration (a read of cgroup.procs, or of all of /proc for the /proc tracker).
        if (scope == Scope::Group && !main_status_) ::kill(-main_pid_, sig);
        n += tracker_->signal_all(sig, [this](const ProcInfo& p) { return take_stop(p); });
        if (scope == Scope::Tree) {
            rescan_period_ = kDrainRescan;
            next_rescan_ = clock_.now() + rescan_period_;
        }
    }
    spdlog::info("sent {} to {} process(es) (kill scope {})", signal_name(sig), n,
                 to_string(scope));
    check_tree_gone();
}

void Supervisor::kill_tree() {
    for (auto* c : components_) c->before_force();
    // Whatever the kill scope, the escalation covers the whole tree: lastcall never exits with
    // a descendant left behind.
    int n = tracker_->kill_all([&](const ProcInfo& p) {
        auto& rec = book_.observe(p);
        if (rec.killed) return false;
        rec.killed = true;
        return true;
    });
    // A fallback that needs no descriptor and no enumeration (RLIMIT_NOFILE lowered under
    // lastcall's feet): as PID 1 every process of the namespace is part of the tree; otherwise
    // the main child's group, whose id cannot be reused while the main child is unreaped.
    if (::getpid() == 1)
        ::kill(-1, SIGKILL);
    else if (main_pid_ > 0 && !main_status_)
        ::kill(-main_pid_, SIGKILL);
    if (n > 0) spdlog::warn("sent SIGKILL to {} process(es)", n);
}

void Supervisor::request_shutdown(int exit_code) {
    if (shutdown_.state() != State::Running) return;
    requested_exit_ = exit_code;
    shutdown_.on_main_exit();
    check_tree_gone();
    rearm_timer();
}

void Supervisor::hold_drain() { shutdown_.hold_drain(); }

void Supervisor::release_drain() {
    shutdown_.release_drain();
    check_tree_gone();
    rearm_timer();
}

int Supervisor::finish() {
    // The main child's code; a component's requested code; without a main child, 0 for a clean
    // stop; 128+SIGKILL when the main child could not even be reaped.
    int code = requested_exit_  ? *requested_exit_
               : main_status_   ? exit_code_of(*main_status_)
               : main_pid_ < 0  ? (shutdown_.forced() && !book_.forced().empty() ? 128 + SIGKILL : 0)
                                : 128 + SIGKILL;
    if (opts_.success_exits.count(code)) {
        spdlog::info("child exit code {} counts as success (--success-exit)", code);
        code = 0;
    }
    ReportInput in;
    in.command = opts_.command;
    in.main_pid = main_pid_;
    in.main_status = main_status_;
    in.exit_code = code;
    in.tracker = std::string(tracker_->name());
    in.kill_scope = std::string(to_string(opts_.kill_scope));
    in.grace = opts_.grace;
    in.drain_delay = opts_.drain_delay;
    in.shutdown = &shutdown_;
    in.book = &book_;
    in.now = clock_.now();
    in.gave_up = gave_up_;
    in.extra = [this](JsonWriter& j) {
        for (auto* c : components_) c->contribute_report(j);
    };
    // The record is written after every process is reaped and before shared resources close.
    if (!opts_.report_path.empty()) {
        if (auto st = write_report(opts_.report_path, render_report(in)); !st)
            spdlog::error("shutdown report not written: {}", st.error().message);
        else
            spdlog::info("shutdown report written to {}", opts_.report_path);
    }
    if (auto st = tracker_->remove(); !st) spdlog::warn("{}", st.error().message);
    for (auto* c : components_) c->finished(code);
    spdlog::info("{}", summarize(in));
    return code;
}

}  // namespace lastcall
