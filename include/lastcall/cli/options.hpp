// SPDX-License-Identifier: Apache-2.0
// Everything the command line (native or a compat mode) decides, as plain data.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lastcall/core/log.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/process/credentials.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/shutdown/grace.hpp"

namespace lastcall {

// Who receives a forwarded signal (HUP, USR1, ...), and who receives the stop signal.
enum class Scope { Child, Group, Tree };
// When lastcall tells systemd READY=1: once the child is spawned, or when the child says so itself.
enum class ReadyOn { Spawn, Notify };

struct Options {
    std::vector<std::string> command;
    // --config FILE: TOML with [services.*] and [jobs.*]; each loader ignores the other's tables.
    std::string config_path;
    // --crontab FILE: plain crontab lines as jobs (supercronic's format).
    std::string crontab_path;
    // --state-dir DIR: where the run ledger lives; empty: the config's state_dir or the default.
    std::string state_dir;
    // --ledger URL: a postgresql:// ledger shared by the replicas of a deployment.
    std::string ledger_url;
    // --replica-id ID: this replica's name in a shared ledger; empty: the host name.
    std::string replica_id;

    // Budget and shutdown.
    std::chrono::milliseconds grace{kDefaultGrace};
    std::chrono::milliseconds drain_delay{0};
    std::chrono::milliseconds coalesce{100};
    int stop_signal = 0;  // 0: the signal that triggered the shutdown (SIGTERM on child exit)
    std::string ready_file;
    ReadyOn ready_on = ReadyOn::Spawn;
    std::string pre_stop;
    std::string report_path;
    std::string metrics_path;    // --metrics-file: Prometheus text, rewritten while running
    std::string metrics_listen;  // --metrics-listen: the same text over HTTP

    // Tree.
    Scope kill_scope = Scope::Tree;
    Scope forward_to = Scope::Group;
    TrackerKind tracker = TrackerKind::Auto;
    bool new_session = true;  // false: the child stays in lastcall's session, in its own group

    // Signal and exit mapping.
    std::map<int, int> rewrite;   // received -> forwarded; 0 drops
    std::set<int> success_exits;  // exit codes reported as 0
    int pdeathsig = 0;

    // Asked for by the compat modes (compat.cpp); the native CLI leaves them at their defaults.
    CompatMode compat = CompatMode::None;
    // SIGTERM/SIGINT/SIGQUIT are forwarded like any other signal, every time, instead of starting
    // lastcall's shutdown (the peers' contract). Only the main child's exit starts the teardown.
    bool forward_termination = false;
    // tini -p: PR_SET_PDEATHSIG on lastcall itself; the signal is then handled as a received one.
    int self_pdeathsig = 0;
    // tini: the child gets the signal mask and ignored dispositions lastcall inherited.
    bool restore_inherited_signals = false;
    // Captured by main before lastcall blocks anything (only when restore_inherited_signals).
    std::optional<InheritedSignals> inherited_signals;
    bool warn_on_reap = false;  // tini -w: a warning for each reaped process but the main child
    // tini without -s: say that lastcall registers as a subreaper anyway (tini would not).
    bool warn_implicit_subreaper = false;
    int exec_failure_exit = 0;  // nonzero: the exit code when the command cannot be executed

    // Child credentials: --user as given, and as resolved by parse_command_line (a bad value is
    // a usage error there). The default of every unit: the main command, the pre-stop hook,
    // crontab lines, and services and jobs without their own `user`.
    std::string user;
    std::optional<Credentials> credentials;
    bool no_new_privs = false;
    // --stay: a run of services alone (no command, no job) keeps running once every service
    // has ended, instead of exiting (ServiceManagerOptions::end_when_idle).
    bool stay = false;

    // Logging.
    std::string log_level = "info";
    // Under a peer's name: the level of lastcall's own lines, while log_level is the peer's
    // (its -v count). Scripts grep the peer's lines at the peer's verbosity; lastcall's own
    // debug lines would be noise there. Empty: log_level.
    std::string own_log_level;
    LogFormat log_format = LogFormat::Text;
    // What the logger is told (core/log.hpp knows nothing of the command line).
    LogSettings log_settings() const {
        return LogSettings{log_format, log_level, compat, own_log_level};
    }
};

std::string_view to_string(Scope s);

}  // namespace lastcall
