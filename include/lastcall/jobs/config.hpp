// SPDX-License-Identifier: Apache-2.0
// Scheduled jobs from the TOML config (`[jobs.NAME]` and the top-level keys) or from a plain
// crontab (supercronic's format). `[services.*]` belongs to the services loader and is skipped.
// Every error is one line "FILE:LINE: KEY: message"; main() prints it and exits 2 before
// anything starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/cli/options.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/jobs/cron.hpp"
#include "lastcall/process/credentials.hpp"

namespace lastcall {

// A fire time that comes while the previous run of the same job is still going.
// `overlap` (lastcall's word) or `concurrency` (a Kubernetes CronJob's): with a shared ledger
// the rule holds across replicas (any replica's active run counts).
enum class Overlap {
    Skip,     // recorded as skipped (concurrency = "forbid")
    Queue,    // run after the current one ends (at most one waits; more are skipped); one machine
    Allow,    // run at once, side by side
    Replace,  // the active run is interrupted ("replaced by run N") and stopped; this one runs
};
// What the next start does with a run that was interrupted (shutdown grace or a crash).
enum class OnInterrupted {
    Retry,         // run the job again at once, staging file kept (a job may resume from it)
    CleanupRetry,  // remove the staging file, then run again at once
    Hold,          // never retry, and run the job no more, until `lastcall runs release ID`
    None,          // never retry; the job runs again at its next fire time
};
std::string_view to_string(Overlap o);
std::string_view to_string(OnInterrupted o);
// The word of to_string() back (a TOML `on_interrupted`, a crontab's "# on_interrupted:").
std::optional<OnInterrupted> parse_on_interrupted(std::string_view word);

struct JobSpec {
    std::string name;
    std::string origin;  // "FILE:LINE" of its table or crontab line, for messages
    std::optional<cron::Schedule> schedule;  // always set once loaded
    std::vector<std::string> command;        // argv; a string command is /bin/sh -c STRING
    std::optional<Millis> timeout;
    Overlap overlap = Overlap::Skip;
    // [jobs.*]: retry unless set; a crontab line: none unless a "# on_interrupted:" comment
    // asks (cron and supercronic never run an interrupted line again at the next start).
    OnInterrupted on_interrupted = OnInterrupted::Retry;
    std::string output;               // absolute path of the final artifact; empty: none
    std::vector<std::string> verify;  // argv, given the staged path as its last argument
    std::vector<std::string> env;     // extra "K=V" (crontab assignments)
    // `user` (USER[:GROUP]) and `group` of a [jobs.NAME] table; main() applies unit_credentials()
    // so that a job without them, and every crontab line, runs as --user. The verify command
    // runs as the same user, and the staged output must be owned by it to be promoted.
    std::optional<Credentials> user;
    std::optional<gid_t> group;
};

// A user crontab (crontab -e: schedule, command) or the system format of /etc/crontab and
// /etc/cron.d (schedule, user, command).
enum class CrontabFormat { User, System };

struct JobsConfig {
    std::vector<JobSpec> jobs;    // in file order
    std::string state_dir;        // top-level `state_dir`; empty: the default
    std::string ledger;           // top-level `ledger`: a postgresql:// URL; empty: SQLite
    std::optional<Millis> lease;  // top-level `lease`: a shared ledger's run lease
    // top-level `retention`: final runs older than this are pruned from the ledger while
    // lastcall runs (none: kept until `lastcall runs prune`)
    std::optional<Millis> retention;
    // top-level `cluster`: the deployment key of a shared ledger (none: derived from the jobs)
    std::optional<std::string> cluster;
};

// A claimed run's lease in a shared ledger when the config sets none, and its bounds.
inline constexpr Millis kDefaultLease{30'000};
inline constexpr Millis kMinLease{3'000};

// The staging path of a job's output: next to the final name (rename(2) needs one filesystem),
// hidden, and unique to the run (a retry never promotes what an earlier run staged).
std::string staging_path_for(const std::string& output, std::int64_t run_id);
// True if `name` (a file name in the output's directory) is a staging file of this output,
// of any run (or of a lastcall before per-run staging).
bool is_staging_name_of(const std::string& output, const std::string& name);

Result<JobsConfig> parse_jobs_toml(std::string_view text, const std::string& path);
Result<JobsConfig> load_jobs_config(const std::string& path);
// Entries are named by a `# name: NAME` comment on the line before, else by
// crontab_entry_name(): stable when lines are inserted or moved, so the ledger keeps their history.
// The schedule is read as supercronic reads it (cron::crontab_schedule_words); an error names
// the file, the line and its text.
Result<std::vector<JobSpec>> parse_crontab(std::string_view text, const std::string& path,
                                           CrontabFormat format = CrontabFormat::User);
std::string crontab_entry_name(const std::string& schedule, const std::string& command);
// System when the file is an etc/crontab or in a cron.d directory, as cron reads them.
CrontabFormat crontab_format_of(const std::string& path);
// A file, or a cron.d-like directory: every file cron would read there, in the system format.
Result<std::vector<JobSpec>> load_crontab(const std::string& path);

// Jobs of --config and --crontab together (names unique), and the state dir to use.
struct JobsSetup {
    std::vector<JobSpec> jobs;
    std::string state_dir;
    std::string ledger_url;  // --ledger, else the config's `ledger`; empty: SQLite in state_dir
    Millis lease = kDefaultLease;
    std::optional<Millis> retention;
    std::optional<std::string> cluster;  // `cluster =`; none: cluster_key_of(jobs)
};
// A shared ledger's deployment key when the config names none: "jobs-" and 8 hex digits of a
// hash of every job's name, schedule and command, so that two deployments whose jobs differ
// never share fire times by accident (and a rollout that changes a command changes the key:
// name it with `cluster =` to keep one across such rollouts).
std::string cluster_key_of(const std::vector<JobSpec>& jobs);
// "name\tcommand" lines: what a replica says it runs, for the cluster's other replicas.
std::string job_commands(const std::vector<JobSpec>& jobs);
// config_text: the text of --config when the caller has read it already (main reads it once
// for the services and the jobs: a config from a pipe has one reader); else the file is read.
Result<JobsSetup> load_jobs(const Options& options, const std::string* config_text = nullptr);
// The run ledger's directory: --state-dir, else the config's state_dir, else $STATE_DIRECTORY
// (systemd's StateDirectory=), else one directory per config (or crontab) file under
// default_state_dir(), named by state_dir_name(): two instances with different configs on one
// host never share a ledger. Without a unit file (lastcall runs alone): the base itself.
std::string resolve_state_dir(const std::string& flag, const std::string& from_config,
                              const std::string& unit_file);
// "<file name without extension>-<8 hex digits of a hash of its absolute path>".
std::string state_dir_name(const std::string& unit_file);

// The base: /var/lib/lastcall for root, $XDG_STATE_HOME/lastcall (or ~/.local/state/lastcall)
// for anyone else.
std::string default_state_dir();

}  // namespace lastcall
