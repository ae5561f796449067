// SPDX-License-Identifier: Apache-2.0
// The narrow interface through which the orchestrators of units of work (ServiceManager,
// JobScheduler) act on the world: time and wakeups, descriptors on the loop, scopes, spawning and
// signalling processes, and the supervisor's shutdown. In lastcall it is the supervisor
// (SupervisorHost); in the unit tests a fake whose clock is advanced and whose children "exit"
// when the test says so, so that restart back-off, dependency order, parallel stop, per-unit
// graces and timeouts are tested without processes and without sleeping.
//
// Calls that change the supervisor's state (request_shutdown, release_drain) are not carried out
// inside the caller: they are queued and processed by the loop after the current event, so a
// component is never re-entered (state_changed from inside its own reaped()) while it is
// half-way through an update.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/spawner.hpp"
#include "lastcall/process/unit.hpp"
#include "lastcall/process/unit_output.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/shutdown/grace.hpp"
#include "lastcall/shutdown/report.hpp"

namespace lastcall {

class EventLoop;

// A wakeup at the nearest deadline a component needs (a restart, a probe, a stop poll).
class WakeTimer {
  public:
    virtual ~WakeTimer() = default;
    virtual Status arm(std::optional<MonoTime> deadline) = 0;
};

// A wakeup at a wall-clock time (a job's fire time: cron times are wall-clock times, and a clock
// step must move them). A time in the past fires on the loop's next turn; none disarms.
using WallTime = std::chrono::system_clock::time_point;
class WallTimer {
  public:
    virtual ~WallTimer() = default;
    virtual Status arm(std::optional<WallTime> at) = 0;
};

// The shutdown's settings a unit's orchestration needs.
struct HostSettings {
    std::chrono::milliseconds grace{kDefaultGrace};  // the global budget
    std::chrono::milliseconds drain_delay{0};        // before the first stop signal
    bool no_new_privs = false;                       // for every spawn
};

class UnitHost {
  public:
    virtual ~UnitHost() = default;

    // -- time and the loop
    virtual const Clock& clock() const = 0;
    virtual WallTime wall_now() const = 0;
    virtual Result<std::unique_ptr<WakeTimer>> new_timer(std::function<void()> on_expiry) = 0;
    virtual Result<std::unique_ptr<WallTimer>> new_wall_timer(std::function<void()> on_expiry) = 0;
    virtual Status watch(int fd, std::uint32_t events, std::function<void(std::uint32_t)> h) = 0;
    virtual void unwatch(int fd) = 0;
    // Runs `task` on the loop after the current event (an answer that must not re-enter its
    // caller: the ledger worker's in the unit tests).
    virtual void post(std::function<void()> task) = 0;

    // -- processes
    // A new scope for one unit of work ("svc-web.3"), nested in the instance's.
    virtual std::unique_ptr<UnitScope> new_scope(const std::string& unit) = 0;
    // The cgroup fd for a helper that belongs to no unit (a readiness probe), or -1.
    virtual int helper_cgroup_fd() = 0;
    virtual SpawnResult spawn(const SpawnSpec& spec) = 0;
    // A signal to a process lastcall did not just fork: through its (pid, start time) identity.
    virtual bool signal(const ProcInfo& p, int sig) = 0;
    // A signal to the group of a child lastcall forked and has not reaped (its pid cannot have
    // been reused): a readiness probe's.
    virtual void signal_child_group(pid_t pgid, int sig) = 0;

    // -- the shutdown
    virtual Admission& admission() = 0;
    virtual const HostSettings& settings() const = 0;
    // The tree's stop signal, and whether it goes to every unit (not only the main child).
    virtual int stop_signal() const = 0;
    virtual bool stop_reaches_tree() const = 0;
    // See Supervisor: hold the drain while units stop in order; queued, see the top.
    virtual void hold_drain() = 0;
    virtual void release_drain() = 0;
    // `why` names what ended the run in the report's trigger ("service worker exited with code
    // 3"): a run without a main command has none to name.
    virtual void request_shutdown(int exit_code, std::string why) = 0;
    virtual void record_force(ForceKind kind, std::string source, int count) = 0;
    // The root unit: every unit of work (process/unit.hpp) is made in it, so that its stop
    // signals land in the one record and the tree's pass leaves its own stop alone.
    virtual UnitTree& units() = 0;
};

// The units' output (process/unit_output.hpp) read on this host's loop.
void attach_output(UnitOutput& output, UnitHost& host);
// At the end: the output's last lines printed, and what nothing read in time said once.
void finish_output(UnitOutput& output);

}  // namespace lastcall
