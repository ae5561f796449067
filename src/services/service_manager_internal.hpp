// SPDX-License-Identifier: Apache-2.0
// Private to src/services/service_manager*.cpp: the manager's state of one service, and the
// tunings its parts share.
#pragma once

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/process/environment.hpp"
#include "lastcall/process/unit.hpp"
#include "lastcall/services/service_manager.hpp"

namespace lastcall {

// While a service's tree drains, it is enumerated again at this period: members that exit are
// not all lastcall's children, so no SIGCHLD tells about them.
inline constexpr Millis kStopPoll{20};
// How long a killed leftover may take to go before the service restarts beside it anyway: a
// process in uninterruptible sleep (a hung NFS mount) dies only when the kernel lets it, and the
// service must not stay down for that.
inline constexpr Millis kKillSettle{1000};
// A readiness probe (connect or command) that takes longer is abandoned and tried again.
inline constexpr Millis kProbeTimeout{5000};
// Services started per turn of the loop (start_eligible): a signal waits for 16 spawns at most.
inline constexpr std::size_t kStartsPerSlice = 16;
// The name of lastcall's own lines in the prefix columns (`lastcall up`; foreman's `system`).
inline constexpr std::string_view kOwnName = "lastcall";
// The level of the lifecycle lines in the log: info, or debug (-v) when the prefix columns say
// them already (narrating, `lastcall up`).
inline spdlog::level::level_enum lifecycle_level(bool narrate) {
    return narrate ? spdlog::level::debug : spdlog::level::info;
}

// lastcall's environment, then the .env file's, then the service's own: later wins, once.
inline std::vector<std::string> service_environment(const std::vector<std::string>& dotenv,
                                                    const std::vector<std::string>& own) {
    Environment env = Environment::inherited(UnitKind::Service);
    for (const auto& kv : dotenv) env.set(kv);
    for (const auto& kv : own) env.set(kv);
    return std::move(env).entries();
}

struct ServiceManager::Service {
    explicit Service(ServiceSpec s) : spec(std::move(s)), backoff(spec.backoff) {}

    ServiceSpec spec;
    ServiceState state = ServiceState::Pending;
    Backoff backoff;
    std::vector<std::size_t> deps;
    bool ever_ready = false;  // dependents wait for this, not for "ready right now"

    std::optional<Ticket> ticket;  // the admitted unit of work of the current instance
    pid_t pid = -1;                // leader of the current instance; -1 when none
    int output = -1;               // its output's stream (UnitOutput::drain), -1 when none
    // The processes of the current instance, and of earlier instances while anything of them
    // is left (a daemon an instance forked must still be stopped with its service).
    std::unique_ptr<UnitScope> scope;
    std::vector<std::unique_ptr<UnitScope>> retired;
    MonoTime started{};
    std::time_t started_wall = 0;
    int starts = 0;
    std::deque<MonoTime> recent_starts;  // within restart_limit.interval of the last one
    bool told_waiting = false;           // "waiting for X" said once per wait
    std::optional<int> last_status;
    MonoTime ended{};              // when the last instance's leader exited
    std::optional<MonoTime> wake;  // Backoff: restart; Starting: probe; Stopping: poll

    pid_t probe_pid = -1;
    // A ready.exec probe is a unit of its own: what it starts (a setsid daemon) ends with it.
    std::unique_ptr<UnitScope> probe_scope;
    int probes = 0;
    UniqueFd probe_sock;

    // Its stop (process/unit.hpp): of the current instance and of what earlier ones left
    // behind, Stopping both for the shutdown's stop and for the cleanup of leftovers
    // (ServiceState::Cleaning); made at attach, in the host's root unit.
    std::unique_ptr<Unit> unit;
    // A kill of the unit (unit->killed()) while lastcall was running: what an exited instance
    // left behind, killed at the end of
    // its grace, is a fact of the run, not a forced stop (the report's `forced` is `killed`
    // without it) until the shutdown forces the service itself (before_force, a forced end).
    bool killed_while_running = false;
    int leftovers_killed = 0;  // the report's count of those kills

    int restarts() const { return starts > 1 ? starts - 1 : 0; }
    // The report's `forced`, and the "(forced)" of the stop's log line.
    bool forced() const { return unit->killed() && !killed_while_running; }
    // The shutdown killed the service itself (the tree's kill, a forced end).
    void killed_by_shutdown() {
        unit->kill();
        killed_while_running = false;
    }
};

}  // namespace lastcall
