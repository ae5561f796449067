// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/scheduler.hpp"

#include "lastcall/shutdown/metrics.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <spdlog/spdlog.h>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

namespace {

// After a job's timeout its scope gets SIGTERM; if anything of it is still there this much later,
// SIGKILL.
constexpr std::chrono::seconds kTimeoutKillAfter{5};
constexpr const char* kShuttingDown = "shutting down";

RunOutcome outcome_of(int status) {
    RunOutcome o;
    if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
    return o;
}

// Removes a leftover staging file; a missing one is the normal case. Through the output
// directory's descriptor: unlinkat follows no link, and no swapped parent redirects it.
void remove_staging(const std::string& staging, std::string_view why) {
    auto [dir, name] = split_path(staging);
    auto dirfd = open_dir_safely(dir);
    if (!dirfd) {
        spdlog::warn("unlink staging file {}: {}", staging, dirfd.error().message);
        return;
    }
    if (::unlinkat(dirfd->get(), name.c_str(), 0) == 0)
        spdlog::info("removed staging file {} ({})", staging, why);
    else if (errno != ENOENT)
        spdlog::warn("unlink staging file {}: {}", staging, std::strerror(errno));
}

// The uid a job's staged output must belong to: the user the job ran as.
uid_t output_owner(const JobSpec& spec) {
    return spec.user ? spec.user->uid : ::geteuid();
}

// The job's staged output, as lastcall (root) may trust it: reached through its directory's
// descriptor, a regular file of the job's own user with a single link. Never a symbolic link,
// a device, a FIFO or a hard link to someone else's file.
struct Staged {
    UniqueFd dir;
    UniqueFd file;
    struct stat st {};
};
Result<Staged> open_staged(const JobSpec& spec, const std::string& staging) {
    auto [dir, name] = split_path(staging);
    Staged out;
    auto dirfd = open_dir_safely(dir);
    if (!dirfd) return dirfd.error();
    out.dir = std::move(*dirfd);
    auto fd = open_owned_regular(out.dir.get(), name, output_owner(spec), staging, &out.st);
    if (!fd) return fd.error();
    out.file = std::move(*fd);
    return out;
}

}  // namespace

JobScheduler::JobScheduler(std::vector<JobSpec> jobs, Ledger ledger) : ledger_(std::move(ledger)) {
    for (auto& spec : jobs) jobs_.push_back(JobState{std::move(spec), {}, {}, 0, 0});
}

Status JobScheduler::attach(Supervisor& sup) {
    return attach_host(sup.unit_host());
}

Status JobScheduler::attach_host(UnitHost& host) {
    host_ = &host;
    auto fire = host.new_wall_timer([this] { on_fire_timer(); });
    if (!fire) return fire.error();
    fire_timer_ = std::move(*fire);
    auto timeout = host.new_timer([this] { on_timeout_timer(); });
    if (!timeout) return timeout.error();
    timeout_timer_ = std::move(*timeout);
    recover();
    auto now = wall_seconds();
    for (auto& j : jobs_) {
        j.next_fire = j.spec.schedule->next_after(now);
        if (j.next_fire)
            spdlog::info("job {}: schedule '{}', next run at {}", j.spec.name,
                         j.spec.schedule->expression(),
                         iso_utc(j.next_fire->time_since_epoch().count()));
        else
            spdlog::warn("job {}: schedule '{}' never fires again", j.spec.name,
                         j.spec.schedule->expression());
    }
    arm_fire_timer();
    return Ok{};
}

// The previous owner's unfinished runs become interrupted; then each job's interrupted runs are
// retried, cleaned up and retried, or held, as the job says.
void JobScheduler::recover() {
    auto fixed =
        ledger_->interrupt_unfinished("lastcall stopped before the run ended (killed or crashed)");
    if (!fixed) {
        spdlog::error("run ledger recovery: {}", fixed.error().message);
        return;
    }
    for (const auto& r : *fixed) {
        spdlog::warn(
            "run {} of job {} (scheduled {}) was left {} by a previous lastcall: now "
            "interrupted",
            r.id, r.job, iso_utc(r.scheduled_at), r.started_ms ? "started" : "scheduled");
        if (r.started_ms) kill_leftovers(r);
    }
    auto pending = ledger_->awaiting_recovery();
    if (!pending) {
        spdlog::error("run ledger recovery: {}", pending.error().message);
        return;
    }
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        const JobSpec& spec = jobs_[j].spec;
        std::vector<std::int64_t> ids;
        std::int64_t slot = 0;
        bool released = false;
        for (const auto& r : *pending) {
            if (r.job != spec.name) continue;
            ids.push_back(r.id);
            slot = std::max(slot, r.scheduled_at);
            released = released || r.recovery == kRecoveryReleased;
        }
        if (ids.empty()) continue;
        std::string staging = spec.output.empty() ? "" : staging_path_for(spec.output, ids.back());
        if (spec.on_interrupted == OnInterrupted::Hold && !released) {
            for (auto id : ids) {
                if (auto st = ledger_->set_recovery(id, kRecoveryHeld); !st)
                    spdlog::error("hold run {}: {}", id, st.error().message);
                spdlog::warn(
                    "job {} is held: run {} was interrupted; `lastcall runs release {}` "
                    "lets it run again{}",
                    spec.name, id, id,
                    staging.empty() ? "" : " (staging file " + staging + " kept)");
            }
            continue;
        }
        // cleanup-retry: the retry's start removes every earlier staging file of the job.
        bool keep = spec.on_interrupted == OnInterrupted::Retry;
        spdlog::info("job {}: retrying interrupted run(s) now (on_interrupted = {})", spec.name,
                     released ? "released" : to_string(spec.on_interrupted));
        retries_.push_back(Retry{j, slot, ids, keep});
    }
}

// A run that a killed lastcall left `started` may still have processes: a background writer that
// left the run's session, with no cgroup to hold it (the /proc tracker) and no pdeathsig (fork
// clears it). It would go on writing into what a retry is about to produce, so it is found by the
// variables the run's processes were given (this ledger's path and the run id), killed through
// a pidfd, and waited for (at most 2 s) before any retry starts.
void JobScheduler::kill_leftovers(const RunRecord& run) {
    auto found = processes_with_environment(
        {"LASTCALL_LEDGER=" + ledger_->path(), "LASTCALL_RUN_ID=" + std::to_string(run.id)});
    std::vector<ProcessRef> killed;
    std::string pids;
    for (const auto& p : found) {
        auto ref = ProcessRef::open(p);
        if (!ref || !ref->signal(SIGKILL)) continue;
        pids += (pids.empty() ? "" : ", ") + std::to_string(p.pid);
        killed.push_back(std::move(*ref));
    }
    if (killed.empty()) return;
    spdlog::warn("run {} of job {}: killed {} process(es) the previous lastcall left running ({})",
                 run.id, run.job, killed.size(), pids);
    // A pidfd is readable once its process has exited (a zombie included).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (const auto& ref : killed) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd pfd{ref.pidfd(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
            spdlog::error("run {} of job {}: pid {} did not end within 2s of SIGKILL", run.id,
                          run.job, ref.pid());
            break;
        }
    }
}

cron::sys_seconds JobScheduler::wall_seconds() const {
    return std::chrono::floor<std::chrono::seconds>(host_->wall_now());
}

void JobScheduler::arm_fire_timer() {
    std::optional<WallTime> at;
    if (!retries_.empty()) {
        at = WallTime{};  // the past: fires on the loop's first turn
    } else {
        for (const auto& j : jobs_)
            if (j.next_fire && (!at || *j.next_fire < *at)) at = WallTime{*j.next_fire};
    }
    if (auto st = fire_timer_->arm(at); !st)
        spdlog::error("job schedule timer: {}", st.error().message);
}

void JobScheduler::on_fire_timer() {
    auto retries = std::move(retries_);
    retries_.clear();
    for (auto& r : retries) {
        if (!host_->admission().is_open()) {
            record_skipped(r.job, r.scheduled_at, kShuttingDown);
            continue;
        }
        start_run(r.job, r.scheduled_at, std::nullopt, r.of, r.keep_staging);
    }
    auto now = wall_seconds();
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        auto& job = jobs_[j];
        if (!job.next_fire || *job.next_fire > now) continue;
        // After a suspend or a clock jump only the latest missed fire runs: a backlog of
        // identical runs helps nobody.
        cron::sys_seconds due = *job.next_fire;
        int missed = 0;
        auto next = job.spec.schedule->next_after(due);
        while (next && *next <= now) {
            due = *next;
            ++missed;
            next = job.spec.schedule->next_after(due);
        }
        if (missed > 0)
            spdlog::warn("job {}: {} fire time(s) missed (suspend or clock jump)", job.spec.name,
                         missed);
        job.next_fire = next;
        fire(j, due.time_since_epoch().count());
    }
    arm_fire_timer();
}

void JobScheduler::record_skipped(std::size_t job, std::int64_t scheduled_at,
                                  const std::string& reason) {
    const auto& name = jobs_[job].spec.name;
    if (reason == kShuttingDown) ++skipped_at_shutdown_;
    auto id = ledger_->add(name, scheduled_at, RunState::Skipped, reason);
    if (!id)
        spdlog::error("job {}: run at {} skipped ({}) but not recorded: {}", name,
                      iso_utc(scheduled_at), reason, id.error().message);
    else
        spdlog::info("job {}: run {} at {} skipped: {}", name, *id, iso_utc(scheduled_at), reason);
}

void JobScheduler::fire(std::size_t j, std::int64_t scheduled_at) {
    auto& job = jobs_[j];
    if (!host_->admission().is_open()) return record_skipped(j, scheduled_at, kShuttingDown);
    auto held = ledger_->held_run(job.spec.name);
    if (!held) {
        spdlog::error("job {}: {}", job.spec.name, held.error().message);
    } else if (*held) {
        return record_skipped(j, scheduled_at,
                              "held: run " + std::to_string((*held)->id) +
                                  " was interrupted; `lastcall runs release " +
                                  std::to_string((*held)->id) + "` lets the job run again");
    }
    if (job.running > 0) {
        switch (job.spec.overlap) {
            case Overlap::Skip:
                return record_skipped(j, scheduled_at,
                                      "the previous run is still running (overlap = skip)");
            case Overlap::Queue: {
                if (job.queued_id)
                    return record_skipped(j, scheduled_at,
                                          "a run is already queued behind the running one "
                                          "(overlap = queue)");
                auto id = ledger_->add(job.spec.name, scheduled_at, RunState::Scheduled,
                                       "queued behind the running run");
                if (!id) {
                    spdlog::error("job {}: queue run: {}", job.spec.name, id.error().message);
                    return;
                }
                job.queued_id = *id;
                job.queued_at = scheduled_at;
                spdlog::info("job {}: run {} queued behind the running one", job.spec.name, *id);
                return;
            }
            case Overlap::Allow:
                break;
        }
    }
    // Interrupted runs released by `lastcall runs release` while lastcall runs: this run is
    // their retry, so that the next start does not retry them a second time.
    std::vector<std::int64_t> released;
    std::int64_t key_at = 0;
    if (auto pending = ledger_->awaiting_recovery(); !pending)
        spdlog::error("job {}: {}", job.spec.name, pending.error().message);
    else
        for (const auto& r : *pending)
            if (r.job == job.spec.name && r.recovery == kRecoveryReleased) {
                released.push_back(r.id);
                key_at = std::max(key_at, r.scheduled_at);
            }
    // A released run is retried with its own policy for the staging file, and keeps its key.
    start_run(j, scheduled_at, std::nullopt, released,
              job.spec.on_interrupted == OnInterrupted::Retry, key_at);
}

std::vector<std::string> JobScheduler::environment(const Run& run, const std::string& staging) {
    const JobSpec& spec = jobs_[run.job].spec;
    // Each variable once: the job's own settings override lastcall's, and the LASTCALL_* that
    // describe this run override everything (Environment::inherited already dropped any
    // LASTCALL_* of lastcall's own environment).
    Environment env = Environment::inherited(UnitKind::Job);
    for (const auto& kv : spec.env) env.set(kv);
    env.set("LASTCALL_JOB", spec.name);
    env.set("LASTCALL_RUN_ID", std::to_string(run.id));
    // With the run id, what identifies the run's processes to a later lastcall on this ledger
    // (kill_leftovers); not part of the documented interface.
    env.set("LASTCALL_LEDGER", ledger_->path());
    env.set("LASTCALL_SCHEDULED_TIME", iso_utc(run.scheduled_at));
    // One key for a fire time and all its retries (also after `runs release`): what a job uses
    // to make its side effects idempotent.
    env.set("LASTCALL_RUN_KEY",
            spec.name + "@" + iso_utc(run.key_at ? run.key_at : run.scheduled_at));
    if (run.retry_of) env.set("LASTCALL_RETRY_OF", std::to_string(*run.retry_of));
    if (!run.resume_from.empty()) env.set("LASTCALL_RESUME_FROM", run.resume_from);
    std::string watermark;
    if (auto w = ledger_->watermark(spec.name); !w)
        spdlog::error("job {}: {}", spec.name, w.error().message);
    else if (*w)
        watermark = iso_utc(**w);
    env.set("LASTCALL_WATERMARK", watermark);
    if (!staging.empty()) env.set("LASTCALL_OUTPUT", staging);
    return env.entries();
}

// Every staging file of the job's output but `keep` (a retry's resume file) is an earlier run's
// leftover: a failed run's output kept for inspection until the next run, or a cleaned-up retry's.
void JobScheduler::remove_old_staging(const JobSpec& spec, const std::string& keep) {
    std::string dir = dir_of(spec.output);
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
    if (!d) {
        spdlog::warn("job {}: opendir {}: {}", spec.name, dir, std::strerror(errno));
        return;
    }
    std::vector<std::string> old;
    while (auto* e = ::readdir(d.get())) {
        std::string name = e->d_name;
        std::string path = dir + "/" + name;
        if (is_staging_name_of(spec.output, name) && path != keep) old.push_back(path);
    }
    for (const auto& path : old) remove_staging(path, "left by an earlier run");
}

void JobScheduler::start_run(std::size_t j, std::int64_t scheduled_at,
                             std::optional<std::int64_t> existing_id,
                             const std::vector<std::int64_t>& retry_of, bool keep_staging,
                             std::int64_t key_at) {
    auto& job = jobs_[j];
    const JobSpec& spec = job.spec;
    // Registered before anything starts: after the drain closed intake this is refused, so no
    // run begins once the drain has counted the active work.
    auto ticket = host_->admission().try_admit(EntryPath::JobFire);
    if (!ticket) {
        if (existing_id) {
            ++skipped_at_shutdown_;
            auto done = ledger_->finish(*existing_id, RunState::Skipped, {}, kShuttingDown);
            if (!done) spdlog::error("job {}: {}", spec.name, done.error().message);
            return;
        }
        return record_skipped(j, scheduled_at, kShuttingDown);
    }
    Result<std::int64_t> id = existing_id ? Result<std::int64_t>(*existing_id)
                              : retry_of.empty()
                                  ? ledger_->add(spec.name, scheduled_at, RunState::Scheduled, "")
                                  : ledger_->add_retry(spec.name, scheduled_at, retry_of);
    if (!id) {
        // Not recorded, so not run: a run the ledger does not know of would be a silent one.
        spdlog::error("job {}: run at {} not started: {}", spec.name, iso_utc(scheduled_at),
                      id.error().message);
        return;  // the ticket rolls back
    }
    Run run;
    run.id = *id;
    run.job = j;
    run.scheduled_at = scheduled_at;
    run.key_at = key_at ? key_at : scheduled_at;
    if (!retry_of.empty()) run.retry_of = retry_of.back();
    if (!spec.output.empty()) {
        run.staging = staging_path_for(spec.output, run.id);
        // A run writes its own staging file and only that one is ever promoted. A retry
        // (on_interrupted = retry) is offered the interrupted run's file to resume from, as
        // $LASTCALL_RESUME_FROM; everything else staged earlier is removed.
        if (keep_staging && run.retry_of) {
            std::string previous = staging_path_for(spec.output, *run.retry_of);
            if (::access(previous.c_str(), F_OK) == 0) run.resume_from = previous;
        }
        remove_old_staging(spec, run.resume_from);
    }
    // `started` is written before the spawn: a run the ledger cannot call started must not run
    // (the next lastcall would start it again). The pid follows the spawn.
    if (auto started = ledger_->start(run.id, 0); !started || !*started) {
        std::string why = started ? "the run is no longer scheduled" : started.error().message;
        ticket->rollback();
        note_unwritten(run, "started", why);
        auto done = ledger_->finish(run.id, RunState::Skipped, {},
                                    "not started: `started` could not be recorded: " + why);
        if (!done) spdlog::error("job {}: run {}: {}", spec.name, run.id, done.error().message);
        spdlog::error("job {}: run {} not started: its `started` record could not be written: {}",
                      spec.name, run.id, why);
        return;
    }
    // The run is a unit of work with its own scope: a timeout stops all of it, setsid
    // descendants included, and "the run is over" means its scope is empty.
    run.scope = host_->new_scope("job-" + spec.name + "." + std::to_string(run.id));
    SpawnSpec sp;
    sp.argv = spec.command;
    sp.env = environment(run, run.staging);
    sp.session = SpawnSpec::Session::NewSession;
    sp.cgroup_procs_fd = run.scope->spawn_cgroup_fd();
    sp.pdeathsig = SIGKILL;      // a job must not outlive a lastcall that was killed
    sp.credentials = spec.user;  // its `user`/`group`, else --user (main.cpp)
    sp.no_new_privs = host_->settings().no_new_privs;
    auto result = host_->spawn(sp);
    if (!result.child) {
        std::string why = result.error ? result.error->message : result.failure->message();
        ticket->rollback();
        auto done = ledger_->finish(run.id, RunState::Failed, {}, "spawn: " + why);
        if (!done) spdlog::error("job {}: {}", spec.name, done.error().message);
        spdlog::error("job {}: run {} failed to start: {}", spec.name, run.id, why);
        return;
    }
    ticket->started();
    run.ticket = std::move(ticket);
    run.pid = result.child->pid;
    run.scope->started(run.pid);
    if (spec.timeout) run.deadline = host_->clock().now() + *spec.timeout;
    if (auto st = ledger_->set_pid(run.id, run.pid); !st)
        spdlog::error("job {}: run {} started as pid {}, the pid not recorded: {}", spec.name,
                      run.id, run.pid, st.error().message);
    spdlog::info("job {}: run {} (scheduled {}) started, pid {}", spec.name, run.id,
                 iso_utc(scheduled_at), run.pid);
    ++job.running;
    runs_.emplace(run.id, std::move(run));
    arm_timeout_timer();
}

void JobScheduler::reaped(const Reaped& r) {
    for (auto& [id, run] : runs_) {
        if (run.phase == Phase::Running && run.pid == r.pid) {
            on_leader_exit(run, r.status);
            break;
        }
        if (run.phase == Phase::Verifying && run.verify_pid == r.pid) {
            on_verify_exit(run, r.status);
            break;
        }
    }
    release_finished_runs();
}

void JobScheduler::on_leader_exit(Run& run, int status) {
    const JobSpec& spec = jobs_[run.job].spec;
    spdlog::info("job {}: run {} pid {} {}", spec.name, run.id, run.pid,
                 describe_wait_status(status));
    if (run.recorded) {
        // Interrupted before the SIGKILL: whatever it did after that is not a result, and it is
        // never completed. An `interrupted` that could not be written is tried again.
        if (run.interrupt_pending)
            interrupt(run, outcome_of(status), run.interrupt_reason);
        else
            spdlog::warn(
                "job {}: run {} {} after it was recorded interrupted: refused, the "
                "record stays interrupted",
                spec.name, run.id, describe_wait_status(status));
        return after_exit(run);
    }
    auto decision =
        decide_run_end(run.first, status, spec.timeout ? format_duration(*spec.timeout) : "",
                       signal_name(host_->stop_signal()));
    if (decision.end == RunEnd::Interrupted) {
        interrupt(run, outcome_of(status), decision.reason);
        return after_exit(run);
    }
    if (decision.end == RunEnd::Failed) {
        fail(run, outcome_of(status), decision.reason);
        return after_exit(run);
    }
    if (spec.output.empty()) {
        complete(run);
        return after_exit(run);
    }
    const std::string& staging = run.staging;
    auto staged = open_staged(spec, staging);
    if (!staged) {
        struct stat lst {};
        bool missing = ::lstat(staging.c_str(), &lst) != 0 && errno == ENOENT;
        fail(run, outcome_of(status),
             missing ? "exited 0 but did not write its output ($LASTCALL_OUTPUT " + staging +
                           "): " + std::strerror(ENOENT)
                     : "exited 0 but its output is not promoted: " + staged.error().message);
        return after_exit(run);
    }
    if (staged->st.st_size == 0) {
        fail(run, outcome_of(status), "exited 0 but its output " + staging + " is empty");
        return after_exit(run);
    }
    if (!spec.verify.empty()) return start_verify(run);
    promote(run);
    after_exit(run);
}

void JobScheduler::start_verify(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    const std::string& staging = run.staging;
    SpawnSpec sp;
    sp.argv = spec.verify;
    sp.argv.push_back(staging);
    sp.env = environment(run, staging);
    // Its own session, which the tree's stop signal does not reach: verify is lastcall's commit
    // step, not the work being stopped (it runs under the run's scope, timeout and the final kill).
    sp.session = SpawnSpec::Session::NewSession;
    sp.cgroup_procs_fd = run.scope->spawn_cgroup_fd();
    sp.pdeathsig = SIGKILL;
    sp.credentials = spec.user;  // verify judges the job's output as the job's own user
    sp.no_new_privs = host_->settings().no_new_privs;
    auto result = host_->spawn(sp);
    if (!result.child) {
        std::string why = result.error ? result.error->message : result.failure->message();
        fail(run, {0, {}}, "verify did not start: " + why);
        return after_exit(run);
    }
    // The verify command runs under the run's ticket and timeout; the loop goes on meanwhile.
    run.phase = Phase::Verifying;
    run.verify_pid = result.child->pid;
    host_->add_helper_session(run.verify_pid);
    spdlog::info("job {}: run {}: verifying {} (pid {})", spec.name, run.id, staging,
                 run.verify_pid);
}

void JobScheduler::on_verify_exit(Run& run, int status) {
    const JobSpec& spec = jobs_[run.job].spec;
    host_->remove_helper_session(run.verify_pid);
    run.phase = Phase::Running;  // after_exit() moves it on
    if (run.recorded) {
        spdlog::warn(
            "job {}: run {}: verify {} after the run was recorded interrupted; the "
            "output is not promoted",
            spec.name, run.id, describe_wait_status(status));
        return after_exit(run);
    }
    if (run.first == Intervention::Timeout) {
        fail(run, {0, {}},
             "timeout: ran past its " + format_duration(*spec.timeout) + " timeout in verify (" +
                 describe_wait_status(status) + ")");
        return after_exit(run);
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fail(run, {0, {}},
             "verify " + describe_wait_status(status) + "; staged output kept at " + run.staging +
                 " until the next run");
        return after_exit(run);
    }
    promote(run);
    after_exit(run);
}

void JobScheduler::promote(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    const std::string& staging = run.staging;
    // Only a run that ended by itself is promoted (on_leader_exit and on_verify_exit decide).
    if (run.first != Intervention::None || run.interrupt_pending)
        return fail(run, {0, {}}, "not promoted: lastcall intervened in the run");
    // Checked again here, after verify: the job's user may have swapped the file meanwhile.
    auto staged = open_staged(spec, staging);
    if (!staged) return fail(run, {0, {}}, "promote: " + staged.error().message);
    // Data, then name, then directory: after a crash the final name holds the previous artifact
    // or this one whole, and `completed` is only written once the rename is durable.
    if (::fsync(staged->file.get()) != 0)
        return fail(run, {0, {}}, "promote: " + sys_error("fsync " + staging, errno).message);
    // Exactly the inode that was checked is promoted: it is linked under a private name through
    // its descriptor and that name is renamed onto the final one. Renaming the staging name
    // itself would promote whatever the job's user put there after the check.
    int dir = staged->dir.get();
    std::string final_name = split_path(spec.output).second;
    std::string promoting = "." + final_name + ".lastcall-promote";
    ::unlinkat(dir, promoting.c_str(), 0);  // a leftover of a crash between link and rename
    if (::linkat(staged->file.get(), "", dir, promoting.c_str(), AT_EMPTY_PATH) != 0) {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc's link to the descriptor does not.
        std::string via = "/proc/self/fd/" + std::to_string(staged->file.get());
        if (::linkat(AT_FDCWD, via.c_str(), dir, promoting.c_str(), AT_SYMLINK_FOLLOW) != 0)
            return fail(run, {0, {}}, "promote: " + sys_error("link " + staging, errno).message);
    }
    if (::renameat(dir, promoting.c_str(), dir, final_name.c_str()) != 0) {
        int err = errno;
        ::unlinkat(dir, promoting.c_str(), 0);
        return fail(
            run, {0, {}},
            "promote: " + sys_error("rename " + staging + " to " + spec.output, err).message);
    }
    // The staging name goes (if it still is the promoted file; anything else there is the
    // job's own business).
    struct stat now {};
    std::string staging_name = split_path(staging).second;
    if (::fstatat(dir, staging_name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_dev == staged->st.st_dev && now.st_ino == staged->st.st_ino)
        ::unlinkat(dir, staging_name.c_str(), 0);
    if (::fsync(dir) != 0)
        return fail(run, {0, {}},
                    "promote: renamed, but " +
                        sys_error("fsync directory of " + spec.output, errno).message);
    complete(run);
}

void JobScheduler::complete(Run& run) {
    const JobSpec& spec = jobs_[run.job].spec;
    // Reached only after the promotion (or without output): the rules' last word.
    if (!may_complete(run.first, run.interrupt_pending, !spec.output.empty(), true)) {
        spdlog::error("job {}: run {}: not completed: lastcall intervened in it", spec.name,
                      run.id);
        return;
    }
    auto done = ledger_->complete(run.id, {0, {}});
    run.recorded = true;
    if (!done) {
        note_unwritten(run, "completed", done.error().message);
        spdlog::error("job {}: run {} completed but not recorded: {}", spec.name, run.id,
                      done.error().message);
    } else if (!*done)
        spdlog::warn("job {}: run {}: `completed` refused, the run already has a final state",
                     spec.name, run.id);
    else
        spdlog::info("job {}: run {} completed{}", spec.name, run.id,
                     spec.output.empty() ? "" : ", output promoted to " + spec.output);
}

void JobScheduler::fail(Run& run, RunOutcome outcome, const std::string& reason) {
    const JobSpec& spec = jobs_[run.job].spec;
    auto done = ledger_->finish(run.id, RunState::Failed, outcome, reason);
    run.recorded = true;
    if (!done) {
        note_unwritten(run, "failed", done.error().message);
        spdlog::error("job {}: run {} failed ({}) but not recorded: {}", spec.name, run.id, reason,
                      done.error().message);
    } else if (!*done)
        spdlog::warn("job {}: run {}: `failed` ({}) refused, the run already has a final state",
                     spec.name, run.id, reason);
    else
        spdlog::warn("job {}: run {} failed: {}", spec.name, run.id, reason);
}

void JobScheduler::after_exit(Run& run) {
    if (run.phase == Phase::Verifying) return;
    run.phase = Phase::Lingering;
    run.deadline.reset();
    auto& job = jobs_[run.job];
    --job.running;
    if (job.running == 0 && job.queued_id) start_queued(run.job);
}

void JobScheduler::start_queued(std::size_t j) {
    auto& job = jobs_[j];
    std::int64_t id = *job.queued_id;
    job.queued_id.reset();
    start_run(j, job.queued_at, id, {}, false);
}

// A run's ticket is released when nothing of it is left: its leader and verify reaped and no
// process of its scope alive (a background child the job left behind keeps it active).
void JobScheduler::release_finished_runs() {
    bool any = false;
    for (const auto& [id, run] : runs_) any = any || run.phase == Phase::Lingering;
    if (!any) return;
    for (auto it = runs_.begin(); it != runs_.end();) {
        Run& run = it->second;
        if (run.phase != Phase::Lingering || !run.scope->members().empty()) {
            ++it;
            continue;
        }
        run.ticket->release();
        if (auto st = run.scope->remove(); !st)
            spdlog::debug("job {}: run {}: {}", jobs_[run.job].spec.name, run.id,
                          st.error().message);
        it = runs_.erase(it);
    }
}

void JobScheduler::arm_timeout_timer() {
    std::optional<MonoTime> next;
    for (const auto& [id, run] : runs_)
        if (run.deadline && (!next || *run.deadline < *next)) next = run.deadline;
    if (auto st = timeout_timer_->arm(next); !st)
        spdlog::error("job timeout timer: {}", st.error().message);
}

void JobScheduler::on_timeout_timer() {
    auto now = host_->clock().now();
    for (auto& [id, run] : runs_) {
        if (!run.deadline || *run.deadline > now) continue;
        if (run.phase == Phase::Lingering) continue;
        const JobSpec& spec = jobs_[run.job].spec;
        // The stop primitive on the run's whole scope (setsid descendants included): the stop
        // signal once to each member, SIGCONT, then after kTimeoutKillAfter the scope is killed.
        if (!run.timed_out) {
            spdlog::warn("job {}: run {} timed out after {}: sending SIGTERM to its processes",
                         spec.name, run.id, format_duration(*spec.timeout));
            // A named reference: clang 14 cannot capture a structured binding in a lambda.
            Run& timed_out = run;
            StopPassIo io{[&] { return timed_out.scope->members(); },
                          [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); },
                          stop_pass_budget([this] { return host_->clock().now(); }),
                          [&] { return one_hold(timed_out.scope->freeze()); }};
            send_stop_signal(io, SIGTERM, [&](const ProcInfo& p) {
                if (!timed_out.stopped.insert(key_of(p)).second) return false;
                host_->note_stop_signal(p, SIGTERM);
                return true;
            });
        } else {
            spdlog::warn("job {}: run {} still running {} after its timeout: SIGKILL", spec.name,
                         run.id, format_duration(kTimeoutKillAfter));
            int n = run.scope->kill([](const ProcInfo&) { return true; });
            host_->record_force(ForceKind::Sigkill, "job " + spec.name + ": timeout", n);
        }
        run.deadline =
            run.timed_out ? std::nullopt : std::optional<MonoTime>(now + kTimeoutKillAfter);
        run.timed_out = true;
        run.first = first_of(run.first, Intervention::Timeout);
    }
    arm_timeout_timer();
}

void JobScheduler::state_changed(State from, State to) {
    if (to == State::Stopping && host_->stop_reaches_tree()) {
        // The stop signal goes to the tree right after this: every run whose leader still runs
        // is reached by lastcall's stop request, and ends `interrupted` however it then exits.
        // A run past its leader (verify, promotion) is in its commit step: that runs to its end.
        for (auto& [id, run] : runs_)
            if (run.phase == Phase::Running && !run.recorded)
                run.first = first_of(run.first, Intervention::StopRequest);
    }
    if (from != State::Running) return;
    drain_started_ = host_->clock().now();
    // Intake is closed (the supervisor closed admission first): a queued run will not start.
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        auto& job = jobs_[j];
        if (!job.queued_id) continue;
        ++skipped_at_shutdown_;
        auto done = ledger_->finish(*job.queued_id, RunState::Skipped, {}, kShuttingDown);
        if (!done) spdlog::error("job {}: {}", job.spec.name, done.error().message);
        job.queued_id.reset();
    }
    std::size_t in_flight = 0;
    for (const auto& [id, run] : runs_) in_flight += run.phase != Phase::Lingering;
    if (in_flight > 0)
        spdlog::info("shutdown: {} job run(s) in flight; they get the stop signal with the tree",
                     in_flight);
}

void JobScheduler::interrupt(Run& run, RunOutcome outcome, const std::string& reason) {
    const JobSpec& spec = jobs_[run.job].spec;
    run.recorded = true;  // from here on nothing completes it, written or not
    auto done = ledger_->finish(run.id, RunState::Interrupted, outcome, reason);
    if (!done) {
        if (!run.interrupt_pending) note_unwritten(run, "interrupted", done.error().message);
        run.interrupt_pending = true;
        run.interrupt_reason = reason;
        spdlog::error(
            "job {}: run {} interrupted ({}) but not recorded: {}; it will never be "
            "recorded completed",
            spec.name, run.id, reason, done.error().message);
        return;
    }
    run.interrupt_pending = false;
    if (!*done) {
        spdlog::warn("job {}: run {}: `interrupted` refused, it already has a final state",
                     spec.name, run.id);
        return;
    }
    spdlog::warn("job {}: run {} (pid {}) interrupted: {}", spec.name, run.id, run.pid, reason);
    interrupted_.push_back({run.id, spec.name, run.pid, run.scheduled_at, reason});
}

void JobScheduler::note_unwritten(const Run& run, std::string_view state,
                                  const std::string& error) {
    unwritten_.push_back({run.id, jobs_[run.job].spec.name, std::string(state), error});
}

void JobScheduler::before_force() {
    // The grace ran out (or the stop was escalated) and SIGKILL goes out next. Every run still
    // in flight is interrupted now, so that nothing after the kill can pass for its result.
    bool grace_over = drain_started_ && host_->clock().now() - *drain_started_ >=
                                            host_->settings().grace - std::chrono::milliseconds(50);
    std::string reason = grace_over ? "grace expired at shutdown"
                                    : "shutdown escalated to SIGKILL before the grace ran out";
    for (auto& [id, run] : runs_) {
        if (run.recorded || run.phase == Phase::Lingering) continue;
        interrupt(run, {}, reason);
    }
}

void JobScheduler::contribute_metrics(MetricsWriter& m) {
    if (!ledger_) return;
    auto counts = ledger_->count_runs();
    if (!counts) return;  // the next write tries again; the ledger's own errors are logged
    std::map<std::string, std::int64_t> last_success;
    for (const auto& c : *counts) {
        m.sample("lastcall_job_runs_total", "counter", "Runs of each job in the ledger, by state",
                 {{"job", c.job}, {"state", c.state}}, static_cast<double>(c.runs));
        last_success[c.job] = std::max(last_success[c.job], c.last_completed_ms);
    }
    for (const auto& job : jobs_) {
        auto it = last_success.find(job.spec.name);
        if (it != last_success.end() && it->second > 0)
            m.sample("lastcall_job_last_success_timestamp_seconds", "gauge",
                     "When each job's last completed run ended (Unix time)",
                     {{"job", job.spec.name}}, static_cast<double>(it->second) / 1000.0);
        m.sample("lastcall_job_running", "gauge", "Runs of each job in progress",
                 {{"job", job.spec.name}}, job.running);
    }
}

void JobScheduler::contribute_report(JsonWriter& j) {
    j.key("jobs").begin_object();
    j.field("ledger", ledger_ ? ledger_->path() : std::string());
    j.key("interrupted_runs").begin_array();
    for (const auto& r : interrupted_) {
        j.begin_object();
        j.field("id", static_cast<long long>(r.id));
        j.field("job", r.job);
        j.field("pid", static_cast<long long>(r.pid));
        j.field("scheduled_at", iso_utc(r.scheduled_at));
        j.field("reason", r.reason);
        j.end_object();
    }
    j.end_array();
    j.field("skipped_at_shutdown", static_cast<long long>(skipped_at_shutdown_));
    // Ledger writes that failed: the run was not started (started), or the record the ledger
    // holds is not the run's ending (the next start turns it interrupted).
    j.key("unrecorded").begin_array();
    for (const auto& u : unwritten_) {
        j.begin_object();
        j.field("id", static_cast<long long>(u.id));
        j.field("job", u.job);
        j.field("state", u.state);
        j.field("error", u.error);
        j.end_object();
    }
    j.end_array();
    j.end_object();
}

void JobScheduler::finished(int /*exit_code*/) {
    // Every process is reaped by now: whatever a ticket still covers is gone.
    for (auto& [id, run] : runs_)
        if (run.ticket) run.ticket->release();
    runs_.clear();
    ledger_.reset();  // the database closes after the last record, before the logs flush
}

}  // namespace lastcall
