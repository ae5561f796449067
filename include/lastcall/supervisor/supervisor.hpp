// SPDX-License-Identifier: Apache-2.0
// The supervisor wires the event loop to the shutdown state machine, the spawner and the tree
// tracker. It is the only part that knows all the others.
#pragma once

#include <signal.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "lastcall/cli/options.hpp"
#include "lastcall/core/clock.hpp"
#include "lastcall/core/event_loop.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/reap_pacer.hpp"
#include "lastcall/process/spawner.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/process/unit.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/shutdown/report.hpp"
#include "lastcall/shutdown/shutdown.hpp"
#include "lastcall/supervisor/forwarding.hpp"
#include "lastcall/supervisor/teardown.hpp"

namespace lastcall {

class JsonWriter;
class MetricsWriter;
struct Ending;
class Supervisor;
class UnitHost;

// A part that lives beside the main child (notify protocol, scheduler, services). The supervisor
// calls these hooks from its single-threaded loop; a component registers its own fds on loop().
class SupervisorComponent {
  public:
    virtual ~SupervisorComponent() = default;
    // Once the loop exists, before anything is spawned.
    virtual Status attach(Supervisor&) { return Ok{}; }
    // Just before each spawn (main_child false: a hook such as --pre-stop): the last word on the
    // child's environment and inherited fds (notify proxy socket, socket activation).
    virtual void prepare_spawn(SpawnSpec& /*spec*/, bool /*main_child*/) {}
    virtual void child_started(pid_t /*pid*/) {}
    virtual void state_changed(State /*from*/, State /*to*/) {}
    // True when the shutdown must be announced outside lastcall (systemd's STOPPING=1) before
    // any process of the tree gets its stop signal: the main child is then not signalled ahead
    // of the first state change (Supervisor::stop_main_child_first).
    virtual bool announces_shutdown() const { return false; }
    // True when this component starts units of work of its own (service instances, job runs),
    // each in a scope of its own: the main command then gets a scope beside theirs, not the
    // instance's own cgroup (make_tracker). Asked once, before attach.
    virtual bool runs_units() const { return false; }
    // Just before SIGKILL goes to the tree: the last moment to record in-flight work as
    // interrupted, so that nothing that happens after the kill can pass for a success. Called
    // again each time SIGKILL is repeated while forcing: must be idempotent. `why`: the
    // shutdown's event that began the force (GraceExpired: the grace ran out; Escalate: a second
    // signal cut it short), so that no component has to guess it from the clock.
    virtual void before_force(Event /*why*/) {}
    // Every process lastcall reaps (its own children, and orphans reparented to it).
    virtual void reaped(const Reaped& /*r*/) {}
    // After every process is reaped, right before the report: records still being written (the
    // run ledger's) get what is left of their time, so the report can say which did not land.
    virtual void settle_records() {}
    // Extra keys for the shutdown report's top-level object.
    virtual void contribute_report(JsonWriter& /*j*/) {}
    // Samples for --metrics-file (metrics/metrics.hpp).
    virtual void contribute_metrics(MetricsWriter& /*m*/) {}
    // After the report; shared resources (sockets, databases) close here, before logs flush.
    virtual void finished(int /*exit_code*/) {}
};

// Blocks every signal lastcall handles; they are read from a signalfd from then on. Must run
// before any thread exists and before the child is spawned.
Status block_handled_signals();

class Supervisor final : private TeardownHost {
  public:
    Supervisor(Options options, const Clock& clock);
    ~Supervisor() override;
    // Runs the command to the end of its whole tree; returns lastcall's exit code.
    int run();

    // For components. Not owned; must outlive run().
    void add_component(SupervisorComponent* c) { components_.push_back(c); }
    EventLoop& loop() { return *loop_; }
    Admission& admission() override { return admission_; }
    Tracker& tracker() override { return *tracker_; }
    const Clock& clock() const override { return clock_; }
    // The one UnitHost over this supervisor (supervisor_host.hpp), for the components that
    // orchestrate units of work; made on first use, once the loop exists.
    UnitHost& unit_host();
    // How the run ended, once finish() has worked it out (for the last metrics); null before.
    const Ending* ending() const { return ending_.get(); }
    const Options& options() const { return opts_; }
    State state() const { return shutdown_.state(); }
    pid_t main_pid() const override { return main_pid_; }
    // The stop signal of the shutdown, and whether it goes to the whole tree (every service and
    // job run) rather than only to the main child or its group.
    int stop_signal() const { return shutdown_.stop_signal(); }
    bool stop_reaches_tree() const { return effective_scope() == Scope::Tree; }
    // A component ends the run as if the main child had exited with exit_code (a `main = true`
    // service exited): the whole tree is drained and lastcall exits with that code.
    // `why` is the report's trigger ("service worker exited with code 3").
    void request_shutdown(int exit_code, std::string why);
    // The same from inside a component's hook: the exit code is claimed and intake closes now
    // (nothing else is admitted in this turn of the loop), the state change itself runs after
    // the current event, so the component is not re-entered mid-update.
    void request_shutdown_soon(int exit_code, std::string why);
    // A component that stops its own work in order (services, in reverse dependency order) holds
    // the drain from its state_changed(Running -> Draining) until it is done: the supervisor's
    // stop signal to the whole tree waits, its grace timer and SIGKILL escalation do not.
    void hold_drain();
    void release_drain();
    // A fact that makes the shutdown forced, recorded when it happens (a service's grace kill, a
    // job's timeout kill). Outside the shutdown (a job timeout while running) it is not the
    // shutdown's doing and is not recorded.
    void record_force(ForceKind kind, std::string source, int count) {
        teardown_.record_force(kind, std::move(source), count);
    }
    // The root unit: the one record of stop signals and every unit of work (process/unit.hpp).
    // lastcall's own helpers (a job's verify, the pre-stop hook) are units of their own
    // (UnitRole::Helper) that the tree's stop signal never reaches: they are not the work being
    // stopped. They are still killed by the force at grace end.
    UnitTree& units() { return units_; }

  private:
    int run_guarded();
    Status set_up();
    std::optional<int> start_child();
    void loop_until_stopped();
    int finish();

    void on_signals();
    void on_signal(int sig, MonoTime arrival);
    void start_or_escalate(int sig, MonoTime arrival);
    void log_forward(const SignalAction& a);
    // Who gets the terminal on stdin: decided once, before the main child is spawned.
    void hand_over_terminal(SpawnSpec& spec);
    void on_sigchld();
    // What one reaped child changed, for the end of the sweep.
    struct ReapOutcome {
        bool main_exited = false;
        bool pre_stop_done = false;
    };
    // Every exited child, with waitpid(-1) (process/reap_pacer.hpp says when); `outcome`
    // carries what reap_main_child found just before.
    void sweep_children(ReapOutcome outcome);
    // The main child only, by pid; true if it was reaped.
    bool reap_main_child(ReapOutcome& outcome);
    void on_reaped(const Reaped& r, bool forcing, ReapOutcome& outcome);
    // After a sweep that reaped `reaped` children in `cost`: arms the next paced sweep (and
    // SIGCHLD stops waking the loop until then), or ends pacing.
    void pace_sweeps(long reaped, std::chrono::steady_clock::duration cost);
    void end_sweep_pacing();
    void unpaced(const Error& e);
    // Whether the signalfd reads SIGCHLD.
    Status watch_sigchld(bool on);
    void on_timer();
    // tini -vvv's poll line after a turn that handled a signal, and every second between them
    // (PeerVoice::says_idle_polls); the tick is armed only for such a run.
    void start_idle_polls();
    void idle_poll();
    void on_pre_stop_output();
    void warn_if_pre_stop_failed() const;
    ReportInput report_input(int code);
    void report_start_failure(int code);
    // The report's `start_failed` object, when the command could not be started.
    void add_start_failure(JsonWriter& j) const;

    // The stop signal to the main child through its pidfd, SIGCONT before it; false if not sent.
    bool send_stop_to_main(int sig);
    // The first termination signal's fast path to the main child (see supervisor_signals.cpp).
    void stop_main_child_first(int sig);
    // The main command's unit: made once it is spawned. Its member is the main child alone,
    // named without a /proc read (its stop signal is on the hot path).
    void make_main_unit();
    std::vector<ProcInfo> main_members() const;
    // The main unit's stop: the birth line drawn just before its signal (nullopt: none could
    // be read), the signal through the pidfd, and the line kept for the root's pass. False if
    // the main child was not signalled (gone, or frozen with the tree is safer: see the .cpp).
    bool stop_main_unit(int sig, MonoTime deadline);
    bool announced_outside() const;
    void suspend(int sig);
    void check_tree_gone() { teardown_.check_tree_gone(); }
    // Registers the tracker's watch fd (cgroup.events) on the loop; at the start of the shutdown.
    void watch_tree_events();
    std::string unit_of(const ProcInfo& p) const;
    void rearm_timer();

    // TeardownHost (supervisor_stop.cpp): the kernel's side of the teardown.
    void post(std::function<void()> task) override;
    Children peek_children() const override;
    bool signal_exact(const ProcInfo& p, int sig) override;
    bool signal_listed(const ProcInfo& p, int sig, pid_t listed_after, int first) override;
    bool kill(pid_t target, int sig) override;
    std::optional<pid_t> whole_group_target() const override;
    bool run_queue_crowded() const override;
    std::string wchan(pid_t pid) const override;
    std::optional<ProcInfo> proc_stat(pid_t pid) const override;
    bool is_pid1() const override;
    bool proc_lists_namespace() const override;
    std::vector<ProcInfo> descendants_outside(const std::vector<pid_t>& listed) override;
    UniqueFd open_last_pid() override;
    void shutdown_begun() override;
    void readiness_off() override;
    void start_pre_stop() override;
    void forward(int sig, Scope scope) override;
    Scope effective_scope() const override;
    bool main_alive() const override;
    bool main_signalled() const override;
    bool stop_main(int sig, MonoTime deadline) override { return stop_main_unit(sig, deadline); }
    std::vector<Unit*> own_units() override;

    Options opts_;
    const Clock& clock_;
    std::vector<SupervisorComponent*> components_;
    // The shutdown's state machine and record, and the teardown it drives (teardown.hpp).
    Teardown teardown_;
    Shutdown& shutdown_ = teardown_.shutdown();
    ProcessBook& book_ = teardown_.book();
    UnitTree& units_ = teardown_.units();
    ForwardingPolicy policy_{opts_};
    PeerVoice voice_{opts_};
    std::optional<EventLoop> loop_;
    std::optional<DeadlineTimer> timer_;
    // At least 5 ms between paced sweeps, more after a costly one (ReapPacer): a service's or a
    // job's exit is noticed up to ReapPacer::kMaxWait later during a burst, the main child's at
    // once.
    ReapPacer reap_pacer_{std::chrono::milliseconds(5)};
    std::optional<DeadlineTimer> sweep_timer_;      // made on the first burst
    std::optional<DeadlineTimer> idle_poll_timer_;  // tini -vvv only
    bool sigchld_paused_ = false;      // SIGCHLD left out of the signalfd until it fires
    bool main_pidfd_watched_ = false;  // the main child's exit, watched while paused
    UniqueFd signal_fd_;
    std::unique_ptr<Tracker> tracker_;
    Admission admission_;
    std::optional<Ticket> main_ticket_;
    std::unique_ptr<UnitHost> unit_host_;
    std::string start_failure_;  // why the command could not be started; empty if it was
    // The main command as a unit (the root unit, its record and birth line: teardown_).
    std::unique_ptr<Unit> main_unit_;
    std::unique_ptr<Unit> pre_stop_unit_;  // lastcall's helper: the pre-stop hook

    pid_t main_pid_ = -1;
    UniqueFd main_pidfd_;
    std::optional<int> main_status_;
    std::optional<int> requested_exit_;
    std::string requested_why_;  // what a component said ended the run (the report's trigger)
    pid_t pre_stop_pid_ = -1;
    std::optional<ReportInput::Hook> pre_stop_run_;  // for the report's timeline
    UniqueFd pre_stop_out_;
    std::string pre_stop_partial_;
    std::string pre_stop_last_line_;  // for the warning when the hook fails
    std::unique_ptr<Ending> ending_;
    struct Flood {
        std::optional<MonoTime> logged;  // when the signal was last logged
        long long unlogged = 0;          // arrivals since then, forwarded but not logged
    };
    std::map<int, Flood> floods_;
    std::string emergency_instance_cgroup_;  // kept alive for the emergency plan
    std::string fatal_;
};

}  // namespace lastcall
