// SPDX-License-Identifier: Apache-2.0
// Runs the services of a config or Procfile beside (or instead of) the main command, as one
// SupervisorComponent on the supervisor's single-threaded loop.
//
// Tree identity: every instance of a service is a unit of work with its own scope
// (process_tree.hpp): a child cgroup of the instance's, or, without cgroups, its leader's
// descendants, its session and every process once seen as a member. The supervisor's whole-tree
// stop and its grace timer and SIGKILL escalation remain the outer bound of everything here.
//
// Starting: in dependency order; a service starts once each of its depends_on has passed its
// readiness check. Each start (first or restart) is a unit of work admitted by the supervisor's
// Admission, so none is started once the shutdown has begun.
//
// Stopping: on Running -> Draining the manager holds the drain and stops the services in reverse
// dependency order, in parallel: every service that nothing running depends on gets its stop
// signal at once (the stop primitive, process/stop.hpp: once per process, then SIGCONT); a
// service whose dependents are still running waits until they have exited or been killed. Each
// has its own grace, capped by the global budget, then its scope is killed. Then the manager
// releases the drain and the supervisor sends its stop signal to whatever is left.
//
// Wakeups: one timerfd, armed only for a due restart, a readiness probe, or a stop in progress;
// an idle lastcall with ready services sleeps in epoll_wait.
#pragma once

#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/event_loop.hpp"
#include "lastcall/process/unit_output.hpp"
#include "lastcall/services/services.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/supervisor/supervisor.hpp"
#include "lastcall/supervisor/unit_host.hpp"

namespace lastcall {

struct ServiceManagerOptions {
    // Where the services' prefixed lines go, shared with the job scheduler (one writer, one
    // column width); none: the manager makes its own on stdout, uncoloured.
    std::shared_ptr<UnitOutput> output;
    // `lastcall up`: what happens to the processes is said in the prefix columns (foreman's
    // `exited with code 3`), in order with their own lines, and no service is a `main` one in
    // lastcall's words: a Procfile has none.
    bool narrate = false;
    std::string state_path;              // status file for `lastcall status`; empty: none
    std::string instance;                // named in it, for `lastcall status ID`
    std::string config_path;             // named in it (absolute), for `status FILE`
    std::vector<std::string> extra_env;  // "K=V" for every service, below its own env (.env)
    // Nothing else is supervised (no main command, no job, no --stay): once every service has
    // ended for good, the run ends too (1 if one failed or exited non-zero), instead of an init
    // that does nothing.
    bool end_when_idle = false;
};

class ServiceManager final : public SupervisorComponent {
  public:
    ServiceManager(std::vector<ServiceSpec> specs, ServiceManagerOptions options);
    ~ServiceManager() override;
    ServiceManager(const ServiceManager&) = delete;
    ServiceManager& operator=(const ServiceManager&) = delete;

    bool empty() const { return services_.empty(); }
    // A service's current state (none: no such service). For `lastcall status` and the tests.
    std::optional<ServiceState> state_of(std::string_view name) const;

    Status attach(Supervisor& sup) override;
    // The same on any host (the unit tests' fake): what attach() does once it has one.
    Status attach_host(UnitHost& host);
    void state_changed(State from, State to) override;
    void before_force(Event why) override;
    void reaped(const Reaped& r) override;
    bool runs_units() const override { return true; }
    void contribute_report(JsonWriter& j) override;
    void contribute_metrics(MetricsWriter& m) override;
    void finished(int exit_code) override;

  private:
    struct Service;
    bool limit_reached(Service& s, MonoTime now);
    void fail_dependents(Service& failed);
    void tell_waiting(Service& restarting);
    bool apply(Service& s, ServiceEvent e);
    void end_if_idle();
    void start_eligible();
    void start(Service& s);
    void mark_ready(Service& s);
    void instance_ended(Service& s, int status);
    void conclude_instance(Service& s);
    void on_timer();
    void rearm();
    void probe(Service& s);
    void probe_tcp(Service& s, MonoTime now);
    void probe_exec(Service& s, MonoTime now);
    void probe_finished(Service& s, bool ok);
    void cancel_probe(Service& s);
    void end_probe_scope(Service& s);
    void begin_ordered_stop();
    void expire_order();
    bool stop_done(Service& s);
    void stop_eligible();
    bool stop_eligible_pass();  // true: a stop done at once, the pass must repeat
    void begin_stop(Service& s);
    void check_stop(Service& s);
    void end_ordered_stop(bool forced);
    std::vector<ProcInfo> members_of(Service& s);
    int kill_members(Service& s);
    void retire_scopes(Service& s);
    // A line of lastcall's own about a service: in its prefix column when narrating (`up`),
    // else in the log.
    void tell(const Service& s, const std::string& text);
    void write_status();      // the first change of a turn at once, the turn's later ones after it
    void write_status_now();  // at once: the last state, before the loop ends

    std::vector<Service> services_;
    ServiceManagerOptions opts_;
    UnitHost* host_ = nullptr;
    std::unique_ptr<WakeTimer> timer_;
    // Where the prefixed lines go, never blocking the loop: a stalled reader costs lines
    // (counted, said at the end), never the stop.
    std::shared_ptr<UnitOutput> out_;

    bool shutting_down_ = false;
    bool holding_drain_ = false;
    std::optional<MonoTime> stop_begin_;  // the drain delay passes before the first stop signal
    MonoTime global_deadline_{};
    // The shutdown's hold expired: a service no longer waits for its dependents to be gone.
    bool order_expired_ = false;
    long long refused_ = 0;  // starts refused because the shutdown had begun
    bool status_failing_ = false;
    bool idle_ended_ = false;       // end_if_idle asked for the shutdown
    bool start_posted_ = false;     // the next slice of starts waits for a later turn
    bool batching_status_ = false;  // within a slice of starts: the status file waits for its end
    bool status_posted_ = false;    // written in this turn: its later changes wait for its end
    bool status_dirty_ = false;     // ... and a state changed meanwhile
};

// The services of `--config FILE` ([services.*]; other tables are ignored), from its text as
// main() read it once (a config from a pipe has one reader). No file: none.
Result<std::vector<ServiceSpec>> load_config_services(const std::string& config_path,
                                                      const std::string& config_text);

}  // namespace lastcall
