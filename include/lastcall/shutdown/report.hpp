// SPDX-License-Identifier: Apache-2.0
// What became of every process of the tree, and the shutdown report built from it.
//
// The ProcessBook learns about processes two ways: when an enumeration of the tree sees them
// (signalling, forcing) and when lastcall reaps them. A process reaped by its own parent is only
// known to be gone, not how it ended; the report says so instead of guessing.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/shutdown/admission.hpp"
#include "lastcall/shutdown/shutdown.hpp"

namespace lastcall {

class JsonWriter;

struct ProcessRecord {
    pid_t pid = 0;
    unsigned long long start = 0;
    std::string comm;
    std::string cmdline;
    pid_t pgid = 0;
    bool is_main = false;
    // The unit of work it belonged to ("main", "service web", "job backup run 7"); empty: not
    // known (a process that left its unit's session before lastcall first saw it).
    std::string unit;
    int stop_signal = 0;         // the stop signal it was sent, 0 if none
    bool killed = false;         // it was alive when SIGKILL went out
    bool killed_by_pid = false;  // ...while held stopped, by kill() of its pid (no pidfd)
    std::optional<int> status;   // wait status, when lastcall reaped it
    // When the stop signal went out and when lastcall reaped it (the report's timeline).
    std::optional<MonoTime> signalled_at;
    std::optional<MonoTime> ended_at;
    // The pid namespace's last pid just before its stop signal (0: unknown): a child of it with
    // a larger pid was forked after it was told to stop (a cleanup helper), one with a smaller or
    // equal pid before (a member that must get the stop signal too).
    pid_t last_pid_at_stop = 0;
    // Still alive when lastcall gave up on the tree (it outlived SIGKILL for the force limit:
    // uninterruptible, frozen in a v1 freezer): what it was doing then, from /proc.
    struct Survivor {
        char state = '?';   // D, usually
        std::string wchan;  // where it sleeps in the kernel (__refrigerator, a filesystem's wait)
    };
    std::optional<Survivor> survived;
};

class ProcessBook {
  public:
    // The main child, just spawned from `command`.
    void set_main(pid_t pid, const std::vector<std::string>& command);
    // The main child's record (set_main), unless it was reaped since.
    ProcessRecord* live_main();
    // Records a member seen alive; returns its record (existing or new).
    ProcessRecord& observe(const ProcInfo& info);
    // Names the unit of each new record (the supervisor's, over its unit tree).
    using Labeller = std::function<std::string(const ProcInfo&)>;
    void set_labeller(Labeller labeller) { labeller_ = std::move(labeller); }
    // A big tree's stop records each new member by its stat alone: the command line's read
    // takes the process's mmap lock and pages in its arguments (a tenth of the CPU of a
    // 10,000-process stop with the /proc tracker).
    void skip_command_lines() { command_lines_ = false; }
    // Room for `more` new records: a big tree's listing, observed member by member, grew the
    // records 14 times over (each a copy of all of them) during its first pass.
    void reserve(std::size_t more) { records_.reserve(records_.size() + more); }
    // Records a reap. `forcing`: SIGKILL had gone out, so a SIGKILL death is lastcall's doing.
    void reaped(const Reaped& r, bool forcing, MonoTime at);
    const std::vector<ProcessRecord>& records() const { return records_; }
    // A live record exists for this pid (seen alive, not yet reaped).
    bool knows(pid_t pid) const { return live_.count(pid) != 0; }
    // The live record of this pid, if any.
    const ProcessRecord* find_live(pid_t pid) const {
        auto it = live_.find(pid);
        return it == live_.end() ? nullptr : &records_[it->second];
    }
    ProcessRecord* find_live(pid_t pid) {
        auto it = live_.find(pid);
        return it == live_.end() ? nullptr : &records_[it->second];
    }
    // Pids forced with SIGKILL.
    std::vector<pid_t> forced() const;
    long long reaped_count() const { return reaped_; }

  private:
    std::vector<ProcessRecord> records_;
    std::map<pid_t, std::size_t> live_;  // pid -> index of its current record
    pid_t main_pid_ = 0;
    long long reaped_ = 0;
    Labeller labeller_;
    bool command_lines_ = true;
};

// What makes a shutdown forced, recorded at the moment it happens (never inferred from what is
// left at the end): a SIGKILL lastcall sent (main tree, a service's own grace, a job's timeout,
// the escalation), a write to cgroup.kill, the entry into Forcing, a process abandoned because
// SIGKILL could not end it. One such fact is enough: the verdict is `forced`.
enum class ForceKind { Sigkill, CgroupKill, EnteredForcing, Abandoned };
std::string_view to_string(ForceKind k);

struct ForceFact {
    ForceKind kind;
    std::string source;  // "escalation", "service web: grace", "job backup: timeout", ...
    int count = 0;       // processes signalled (0: none found, which still counts)
    MonoTime at{};
};

enum class Verdict { Clean, Forced };
std::string_view to_string(Verdict v);
// The verdict is a function of the recorded facts alone.
Verdict verdict_from(const std::vector<ForceFact>& facts);
// lastcall's exit code when there is no main command: 0 for a clean stop, 128+SIGKILL forced.
int exit_code_without_main(Verdict v);

struct ReportInput {
    std::vector<std::string> command;
    pid_t main_pid = 0;
    std::optional<int> main_status;
    int exit_code = 0;
    std::string tracker;
    std::string kill_scope;
    std::chrono::milliseconds grace{};
    std::chrono::milliseconds drain_delay{};
    const Shutdown* shutdown = nullptr;
    const ProcessBook* book = nullptr;
    // `now` and `wall_now` are read together, once: every time in the report is placed on the
    // wall clock through this one pair. Reading the wall clock afresh for each time made the
    // later ones drift by however long the report took to render (7 ms for 300 processes under
    // the sanitizers, enough to put the trigger after a log line it preceded).
    MonoTime now{};
    std::chrono::system_clock::time_point wall_now{};
    bool gave_up = false;  // SIGKILL could not end everything within the force limit
    const std::vector<ForceFact>* force_facts = nullptr;
    std::optional<AdmissionStats> admission;
    std::uint64_t log_lines_lost = 0;
    std::uint64_t log_lines_waiting = 0;
    std::optional<MonoTime> trigger_arrival;  // when the trigger's signal was dequeued
    // What ended the run when it was not the main command (a component's request_shutdown:
    // "service worker exited with code 3"); empty: the main command, or a signal.
    std::string trigger_reason;
    // The pre-stop hook, when one ran: its start, its end and its wait status.
    struct Hook {
        pid_t pid = 0;
        MonoTime started{};
        std::optional<MonoTime> ended;
        std::optional<int> status;
    };
    std::optional<Hook> pre_stop;
    // Processes the OOM killer ended in lastcall's memory cgroup during the run (none: no memory
    // cgroup that counts them, process/limits.hpp).
    std::optional<long long> oom_kills;
    // Extra top-level keys (components: interrupted runs, services).
    std::function<void(JsonWriter&)> extra;
};

Verdict verdict_of(const ReportInput& in);
std::string render_report(const ReportInput& in);
// One line for the log, the same facts as the report.
std::string summarize(const ReportInput& in);
// Processes that were sent the stop signal.
int stop_signalled(const ReportInput& in);
// The facts of the report that the last metrics carry.
struct Ending ending_of(const ReportInput& in);
// Whether the summary is news at the default log level: a shutdown was asked for, or something
// had to be stopped or killed. A command that simply ended, alone, is not (tini prints nothing).
bool worth_a_line(const ReportInput& in);
Status write_report(const std::string& path, const std::string& json);
// The report's `start_failed` object: the command, or the run itself, could not start.
void write_start_failed(JsonWriter& j, std::string_view error);
// The report of a run that ended before anything ran (the command could not be spawned, or
// lastcall refused at its set-up: a config, a state directory, too few descriptors): `in` with
// `start_failed` added, and an empty shutdown, book and force facts where `in` has none (no
// supervisor yet). It replaces the previous run's report, which must not speak for this run.
Status write_start_failure_report(const std::string& path, ReportInput in, std::string_view error);

}  // namespace lastcall
