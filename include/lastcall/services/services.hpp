// SPDX-License-Identifier: Apache-2.0
// Several services in one lastcall: their specification (from `[services.*]` in the TOML config
// or from a Procfile), the per-service state model and the restart backoff. Pure data and logic;
// the ServiceManager (service_manager.hpp) runs them.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/process/spawner.hpp"
#include "lastcall/process/unit.hpp"

namespace lastcall {

enum class RestartPolicy { No, OnFailure, Always };
std::string_view to_string(RestartPolicy p);

// Whether an instance that ended with this wait status is started again.
bool should_restart(RestartPolicy policy, int wait_status);

// Exponential backoff with a cap, reset after a stable period: the n-th consecutive quick exit
// waits initial * factor^(n-1), at most max; an instance that ran for reset_after or longer
// counts as stable, and the next delay starts again from initial.
struct BackoffPolicy {
    Millis initial{100};
    Millis max{30000};
    double factor = 2.0;
    Millis reset_after{10000};
};

// At most `burst` starts within `interval` (systemd's StartLimitBurst=/StartLimitIntervalSec=,
// the same defaults): a service that keeps failing (a missing working directory, a bad config)
// ends in `failed` instead of restarting forever.
struct RestartLimit {
    int burst = 5;
    Millis interval{10000};
};

class Backoff {
  public:
    explicit Backoff(BackoffPolicy policy) : policy_(policy) {}
    // The instance ran from `started` to `ended`: the delay before the next start.
    Millis next_delay(MonoTime started, MonoTime ended);
    int consecutive() const { return consecutive_; }

  private:
    BackoffPolicy policy_;
    int consecutive_ = 0;
};

struct ReadyCheck {
    enum class Kind { None, File, Tcp, Exec };
    Kind kind = Kind::None;
    std::string file;  // File: ready once it exists (it is removed before each start)
    std::string host;  // Tcp: numeric IPv4/IPv6 address; ready once connect() succeeds
    std::uint16_t port = 0;
    std::vector<std::string> exec;  // Exec: ready once this exits 0
    Millis interval{100};           // between two probes
};

struct ServiceSpec {
    std::string name;
    std::vector<std::string> argv;  // a string command becomes {"/bin/sh", "-c", command}
    std::vector<std::string> env;   // "K=V", added to (and overriding) lastcall's environment
    std::string workdir;
    // `user` (USER[:GROUP]) and `group`, resolved when the file is read; main() then applies
    // unit_credentials() so that a service without them runs as --user.
    std::optional<Credentials> user;
    std::optional<gid_t> group;
    RestartPolicy restart = RestartPolicy::No;
    BackoffPolicy backoff;
    RestartLimit restart_limit;
    std::vector<std::string> depends_on;
    std::string depends_on_origin;  // "file:line" of the depends_on key (cycle errors)
    ReadyCheck ready;
    int stop_signal = SIGTERM;
    std::optional<Millis> grace;  // unset: the global --grace
    // `kill_scope`: who gets the stop signal (tree: every process of the instance's scope;
    // group: its leader's process group; child: the leader alone). The kill at the end of the
    // grace takes the whole scope whatever it says (docs/services.md).
    StopReach kill_scope = StopReach::Tree;
    bool main = false;   // its exit ends the run with its exit code
    std::string origin;  // "file:line", for messages
};

// True for names usable as a service name: [A-Za-z0-9_.-]+ (they appear in prefixes, the status
// file and logs, so no spaces or separators).
bool valid_service_name(std::string_view name);

// Reads `[services.NAME]` tables; every other top-level table (`[jobs.*]`, ...) belongs to other
// loaders and is ignored. Errors: one line, "FILE:LINE: services.NAME.KEY: what is wrong".
// The result is in start order (see order_by_dependencies). `path` names the file in errors.
Result<std::vector<ServiceSpec>> parse_services_toml(std::string_view text,
                                                     const std::string& path);

// Stable topological order: each service after every service in its depends_on, otherwise in
// the given order. An unknown dependency or a cycle is an error naming the service's origin.
Status order_by_dependencies(std::vector<ServiceSpec>& services);

// Procfile (foreman/honcho): "name: command" per line; blank lines and lines starting with '#'
// are skipped. Errors: "FILE:LINE: ...".
struct ProcfileEntry {
    std::string name;
    std::string command;
    int line = 0;
};
Result<std::vector<ProcfileEntry>> parse_procfile(std::string_view text, const std::string& path);
// The argv that runs a Procfile line: /bin/sh -c, with `exec` in front when the line is one
// simple command (no unquoted ; & | ( ) or newline, no leading assignment or shell keyword), so
// that the process is the command itself, as foreman and honcho run it: its name in the logs,
// its pid the one signalled, no shell in between to swallow a signal.
std::vector<std::string> procfile_argv(const std::string& line);

// .env: "KEY=value" lines, optional "export ", '#' comments, values optionally in single quotes
// (literal) or double quotes (\n, \", \\ escapes). Returns "K=V" strings in file order.
Result<std::vector<std::string>> parse_dotenv(std::string_view text, const std::string& path);

// ---- The state of one service: one enum, one transition table. ----
//
//   Pending --Spawned--> Starting --ReadyPassed--> Ready
//   Starting/Ready --LeftBehind--> Cleaning
//   Starting/Ready/Cleaning --ExitedRestart--> Backoff --Spawned--> Starting
//   Starting/Ready/Cleaning --ExitedFinal--> Exited
//   Starting/Ready/Cleaning --LimitReached--> Failed
//   Pending --DependencyFailed--> Failed
//   Pending/Backoff --RestartRefused / StopRequested--> Stopped
//   Starting/Ready/Cleaning/Exited/Failed --StopRequested--> Stopping --TreeGone--> Stopped
//
// Pending:  waiting for its dependencies to be ready.
// Starting: its process runs; the readiness check has not passed yet.
// Ready:    running and ready (at once after the spawn when it has no readiness check).
// Cleaning: its leader exited and left processes behind: they had its stop signal, and lastcall
//           waits for them to go (at most the service's grace, then its scope is killed) before
//           the service restarts or ends. A new instance must not run beside the old one's
//           daemon (the port it holds, the lock, a second writer), as systemd stops a unit's
//           whole cgroup before it restarts it.
// Backoff:  it exited and will be started again when its backoff delay has passed.
// Exited:   it ended by itself and will not be started again.
// Failed:   it hit its restart limit, or a service it depends on failed: not started again.
// Stopping: lastcall sent its stop signal and waits for its whole tree to go.
// Stopped:  stopped by lastcall (or never started because the shutdown had begun). Final.
enum class ServiceState {
    Pending,
    Starting,
    Ready,
    Cleaning,
    Backoff,
    Exited,
    Failed,
    Stopping,
    Stopped
};
enum class ServiceEvent {
    Spawned,
    ReadyPassed,
    LeftBehind,
    ExitedRestart,
    ExitedFinal,
    LimitReached,
    DependencyFailed,
    RestartRefused,
    StopRequested,
    TreeGone,
};
std::string_view to_string(ServiceState s);
std::string_view to_string(ServiceEvent e);
// nullopt: the event does not apply in that state.
std::optional<ServiceState> service_transition(ServiceState from, ServiceEvent event);

}  // namespace lastcall
