// SPDX-License-Identifier: Apache-2.0
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
#include "lastcall/core/fd_reserve.hpp"
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

// A signal holds a pidfd and a /proc file at once, beside the cgroup.freeze of a frozen stop;
// the report's walk holds two directories at once, then its directory beside the temporary file.
// Three, as many as the reserve of before (released at the stop then): lastcall's minimum
// RLIMIT_NOFILE is unchanged (docs/reliability.md).
constexpr std::size_t kStopReserveFds = 3;

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

}  // namespace

Status block_handled_signals() {
    sigset_t set = handled_signals();
    if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return sys_error("sigprocmask", errno);
    return Ok{};
}

Supervisor::Supervisor(Options options, const Clock& clock)
    : opts_(std::move(options)),
      clock_(clock),
      teardown_(shutdown_config(opts_), clock_, *this, components_) {
    book_.set_labeller([this](const ProcInfo& p) { return unit_of(p); });
}

// Which unit of work a process belonged to, for the report (rows that read `bash bash bash` said
// nothing of which service each was): the unit that signalled it or whose session it is in,
// else its parent's, else the main command's when it is in the main child's group.
std::string Supervisor::unit_of(const ProcInfo& p) const {
    if (const Unit* u = units_.owner_of(p)) return u->name();
    if (const ProcessRecord* parent = book_.find_live(p.ppid); parent && !parent->unit.empty())
        return parent->unit;
    if (main_pid_ > 0 && p.pgid == main_pid_) return "main";
    return {};
}

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
        // Refused before anything ran (too few descriptors for the reserve, no subreaper, no
        // tracker): the record says so, in place of the previous run's.
        start_failure_ = st.error().message;
        report_start_failure(1);
        if (tracker_) (void)tracker_->remove();
        return 1;
    }
    // Without a command (only scheduled jobs or services from a config), components start the
    // work and the run lasts until a termination signal or request_shutdown().
    if (!opts_.command.empty()) {
        if (auto failed = start_child()) {
            bool other_units =
                std::any_of(components_.begin(), components_.end(),
                            [](const SupervisorComponent* c) { return c->runs_units(); });
            if (!other_units) {
                report_start_failure(*failed);
                if (tracker_) (void)tracker_->remove();
                return *failed;
            }
            // Services (or jobs) started before the command: returning here left them running
            // and their records unwritten (a spawn's pipe2 failing with EMFILE at a low
            // RLIMIT_NOFILE). The run ends as any other: the tree stopped within the grace,
            // then the report, which says why the command never ran.
            request_shutdown(*failed, "the command did not start");
        }
    }
    // What the set-up posted (the services' status file after their first slice of starts) is
    // done now, not after the first event: a service that exited at once was reaped in the
    // first turn before it, and `lastcall status` showed its dependents still pending in
    // between (CI).
    loop_->run_posted();
    loop_until_stopped();
    return finish();
}

Status Supervisor::set_up() {
    // Its descriptor limit raised, its OOM score lowered, before the first unit: see limits.hpp.
    (void)protect_self();
    // Descriptors held back for the stop path and the report, for the whole run, taken before
    // anything else of the set-up (the tracker's, the loop's) and before any unit starts (a
    // service's pipes and pidfds): lent to their short opens (a pidfd and the /proc read that
    // checks it, cgroup.procs, cgroup.kill, the report's directory and temporary file), taken
    // back at the next (core/fd_reserve.hpp). Taken first, they are there for the report of a
    // set-up refused at the limit too (at RLIMIT_NOFILE 8, its directory could not be opened).
    fd_reserve_hold(kStopReserveFds);
    // Without them, a stop at the limit could not be carried out: refused now, before anything
    // runs, rather than a tree left behind at the end.
    if (fd_reserve_held() < kStopReserveFds)
        return sys_error("hold " + std::to_string(kStopReserveFds) +
                             " descriptors in reserve for the stop and the report",
                         EMFILE);
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
    // ns_last_pid, read for the birth line just before the main child's stop signal
    // (stop_main_child_first): opened here, off the path of that signal. Without it (no
    // /proc/sys), /dev/null: an empty read there draws no line.
    UniqueFd last_pid_fd = open_ns_last_pid();
    if (!last_pid_fd) last_pid_fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    units_.set_last_pid_source(std::move(last_pid_fd));
    // The tree's events (cgroup.events) are watched from the start of the shutdown only: while
    // Running nothing acts on them, and the notification that the cgroup became populated woke
    // the loop once on every start.
    for (auto* c : components_)
        if (auto st = c->attach(*this); !st) return st;
    teardown_.make_root_unit();
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
        start_failure_ = result.error->message;
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
        start_failure_ = f.message();
        return code;
    }
    main_ticket_->started();
    main_pid_ = result.child->pid;
    main_pidfd_ = std::move(result.child->pidfd);
    emergency_main_started(main_pid_);
    book_.set_main(main_pid_, opts_.command);
    make_main_unit();
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
            teardown_.kill_tree();
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

void Supervisor::request_shutdown(int exit_code, std::string why) {
    if (shutdown_.state() != State::Running) return;
    requested_exit_ = exit_code;
    requested_why_ = std::move(why);
    shutdown_.on_main_exit();
    check_tree_gone();
    rearm_timer();
}

void Supervisor::request_shutdown_soon(int exit_code, std::string why) {
    if (shutdown_.state() != State::Running || requested_exit_) return;
    requested_exit_ = exit_code;
    admission_.close();
    loop_->post([this, exit_code, why = std::move(why)]() mutable {
        request_shutdown(exit_code, std::move(why));
    });
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
    in.gave_up = teardown_.gave_up();
    in.force_facts = &teardown_.force_facts();
    in.command = opts_.command;
    in.main_pid = main_pid_;
    in.main_status = main_status_;
    in.trigger_reason = requested_why_;
    in.exit_code = code;
    in.tracker = tracker_ ? std::string(tracker_->name()) : "";  // none: refused before it
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
void Supervisor::report_start_failure(int code) {
    if (opts_.report_path.empty()) return;
    if (auto st = write_start_failure_report(opts_.report_path, report_input(code), start_failure_);
        !st)
        spdlog::error("shutdown report not written: {}", st.error().message);
}

void Supervisor::add_start_failure(JsonWriter& j) const {
    if (!start_failure_.empty()) write_start_failed(j, start_failure_);
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
        add_start_failure(j);
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
