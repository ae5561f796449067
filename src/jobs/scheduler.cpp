// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/scheduler.hpp"

#include "lastcall/shutdown/metrics.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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
constexpr Millis kTimeoutKillAfter{5000};
constexpr const char* kShuttingDown = "shutting down";

Concurrency concurrency_of(Overlap o) {
    switch (o) {
        case Overlap::Skip:
            return Concurrency::Forbid;
        case Overlap::Replace:
            return Concurrency::Replace;
        case Overlap::Queue:  // one machine: the scheduler queues before it claims
        case Overlap::Allow:
            return Concurrency::Allow;
    }
    return Concurrency::Allow;
}

// Filesystems that other machines can mount too (statfs(2) magic numbers): NFS, SMB/CIFS, Ceph,
// GlusterFS and other FUSE mounts, Lustre, GPFS, 9p, AFS.
bool is_network_filesystem(long type) {
    switch (static_cast<unsigned long>(type)) {
        case 0x6969:      // NFS
        case 0xFF534D42:  // CIFS
        case 0xFE534D42:  // SMB2
        case 0x517B:      // SMB
        case 0x00C36400:  // Ceph
        case 0x65735546:  // FUSE (GlusterFS, s3fs, ...)
        case 0x0BD00BD0:  // Lustre
        case 0x47504653:  // GPFS
        case 0x01021997:  // 9p
        case 0x5346414F:  // AFS
            return true;
        default:
            return false;
    }
}

std::string join_ids(const std::vector<std::int64_t>& ids) {
    std::string out;
    for (auto id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
    return out;
}

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

JobScheduler::JobScheduler(std::vector<JobSpec> jobs, std::unique_ptr<Ledger> ledger)
    : ledger_(std::move(ledger)) {
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
    if (ledger_->shared()) {
        auto lease = host.new_timer([this] { on_lease_timer(); });
        if (!lease) return lease.error();
        lease_timer_ = std::move(*lease);
        spdlog::info("run ledger {} is shared: replica {}, lease {}", ledger_->path(),
                     ledger_->identity().replica,
                     format_duration(Millis{ledger_->identity().lease_ms}));
        warn_local_outputs();
    }
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
    if (lease_timer_) (void)lease_timer_->arm(host_->clock().now());
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
    plan_recovery();
}

// Each job's interrupted runs awaiting recovery are held, or queued for a retry claim (at start,
// and with a shared ledger on every lease tick: another replica's runs may have been interrupted).
void JobScheduler::plan_recovery() {
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
                // Each replica may see it first: the hold is one row's state, said once each.
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
        if (spec.on_interrupted == OnInterrupted::None && !released) {
            for (auto id : ids) {
                if (auto st = ledger_->set_recovery(id, kRecoveryNone); !st)
                    spdlog::error("run {}: {}", id, st.error().message);
                spdlog::warn("job {}: run {} was interrupted; not retried (on_interrupted = none)",
                             spec.name, id);
            }
            continue;
        }
        // cleanup-retry: the retry's start removes every earlier staging file of the job.
        bool keep = spec.on_interrupted == OnInterrupted::Retry;
        if (!ledger_->shared())
            spdlog::info("job {}: retrying interrupted run(s) now (on_interrupted = {})", spec.name,
                         released ? "released" : to_string(spec.on_interrupted));
        retries_.push_back(Retry{j, slot, ids, keep});
    }
    if (!retries_.empty() && fire_timer_) arm_fire_timer();
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
            // A shared ledger's retry stays open for a replica that is not stopping.
            if (!ledger_->shared()) record_skipped(r.job, r.scheduled_at, kShuttingDown);
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
    if (!id) {
        spdlog::error("job {}: run at {} skipped ({}) but not recorded: {}", name,
                      iso_utc(scheduled_at), reason, id.error().message);
        note_unwritten_row(name, RunState::Skipped, id.error().message);
    } else
        spdlog::info("job {}: run {} at {} skipped: {}", name, *id, iso_utc(scheduled_at), reason);
}

void JobScheduler::fire(std::size_t j, std::int64_t scheduled_at) {
    auto& job = jobs_[j];
    bool shared = ledger_->shared();
    if (!host_->admission().is_open()) {
        // A replica that is stopping leaves the fire time to the others, and says nothing of it.
        if (shared) return;
        return record_skipped(j, scheduled_at, kShuttingDown);
    }
    auto held = ledger_->held_run(job.spec.name);
    if (!held) {
        spdlog::error("job {}: {}", job.spec.name, held.error().message);
    } else if (*held) {
        std::string why = "held: run " + std::to_string((*held)->id) +
                          " was interrupted; `lastcall runs release " +
                          std::to_string((*held)->id) + "` lets the job run again";
        if (!shared) return record_skipped(j, scheduled_at, why);
        // One replica records it, as one replica would have run it.
        auto claim = ledger_->claim({job.spec.name, scheduled_at, {}, Concurrency::Allow, why});
        if (!claim)
            spdlog::error("job {}: run at {} skipped ({}) but not recorded: {}", job.spec.name,
                          iso_utc(scheduled_at), why, claim.error().message);
        else if (claim->outcome == Claim::Outcome::Skipped)
            spdlog::info("job {}: run {} at {} skipped: {}", job.spec.name, claim->id,
                         iso_utc(scheduled_at), why);
        return;
    }
    // With a shared ledger the claim applies the concurrency rule to every replica's runs.
    if (job.running > 0 && !shared) {
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
                    spdlog::error("job {}: run at {} not queued, its record failed: {}",
                                  job.spec.name, iso_utc(scheduled_at), id.error().message);
                    note_unwritten_row(job.spec.name, RunState::Scheduled, id.error().message);
                    return;
                }
                job.queued_id = *id;
                job.queued_at = scheduled_at;
                spdlog::info("job {}: run {} queued behind the running one", job.spec.name, *id);
                return;
            }
            case Overlap::Allow:
            case Overlap::Replace:  // the claim interrupts the active run; take_away stops it
                break;
        }
    }
    // Interrupted runs released by `lastcall runs release` while lastcall runs: this run is
    // their retry, so that the next start does not retry them a second time. (A shared
    // ledger's lease tick claims their retry on its own, like any other recovery.)
    std::vector<std::int64_t> released;
    std::int64_t key_at = 0;
    if (shared) return start_run(j, scheduled_at, std::nullopt, {}, false);
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
    return std::move(env).entries();
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
    MonoTime claimed_at = host_->clock().now();  // before the claim: its lease starts later
    // A fire time (or a retry) is claimed: the row is `started` the moment this lastcall won it,
    // before anything runs. A queued run (one machine) already has its `scheduled` row.
    std::int64_t id = 0;
    if (existing_id) {
        id = *existing_id;
    } else {
        auto claim =
            ledger_->claim({spec.name, scheduled_at, retry_of, concurrency_of(spec.overlap), ""});
        if (!claim) {
            // Not recorded, so not run: a run the ledger does not know of would be a silent one.
            const std::string& why = claim.error().message;
            spdlog::error(
                "job {}: run at {} not started: its `started` record could not be "
                "written: {}",
                spec.name, iso_utc(scheduled_at), why);
            // A shared ledger's row would be another replica's claim of the time: it stays
            // theirs to take, and the report counts the fire times this replica could not claim
            // (one entry each would grow without bound in a long outage).
            if (ledger_->shared()) {
                ++unclaimed_;
                return;  // the ticket rolls back
            }
            // One machine: the fire time's row says why nothing ran.
            Unwritten u;
            u.job = spec.name;
            u.state = "started";
            u.error = why;
            auto skipped = ledger_->add(spec.name, scheduled_at, RunState::Skipped,
                                        "not started: `started` could not be recorded: " + why);
            if (skipped) u.id = *skipped;
            unwritten_.push_back(std::move(u));
            return;  // the ticket rolls back
        }
        if (claim->outcome == Claim::Outcome::Lost) {
            spdlog::debug("job {}: run at {}{} claimed by another replica", spec.name,
                          iso_utc(scheduled_at), retry_of.empty() ? "" : " (a retry)");
            return;
        }
        if (claim->outcome == Claim::Outcome::Skipped) {
            spdlog::info("job {}: run {} at {} skipped: {}", spec.name, claim->id,
                         iso_utc(scheduled_at), claim->reason);
            return;
        }
        id = claim->id;
        if (!retry_of.empty())
            spdlog::info("job {}: run {} retries interrupted run(s) {} (on_interrupted = {})",
                         spec.name, id, join_ids(retry_of), to_string(spec.on_interrupted));
        for (std::int64_t old : claim->replaced) {
            spdlog::warn("job {}: run {} replaces run {} (concurrency = replace)", spec.name, id,
                         old);
            if (auto it = runs_.find(old); it != runs_.end())
                take_away(it->second, "replaced by run " + std::to_string(id));
        }
    }
    Run run;
    run.id = id;
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
    if (auto started = existing_id ? ledger_->start(run.id) : Result<bool>(true);
        !started || !*started) {
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
    sp.cgroup_fd = run.scope->spawn_cgroup_fd();
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
    if (ledger_->shared()) run.lease_renewed = claimed_at;
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
    run.leader_status = status;
    // The run is over when its scope is empty, not when its leader is: a background writer
    // (bash's process substitution, `cmd &`) may still be filling the output, which was then
    // promoted and recorded completed and changed afterwards; and a daemon the run left had
    // escaped its timeout. Judged at the last member's reap (release_finished_runs).
    if (!run.recorded) {
        if (auto left = run.scope->members(); !left.empty()) {
            run.phase = Phase::Finishing;
            run.left_behind = run.first == Intervention::None;
            spdlog::info(
                "job {}: run {}: waiting for {} process(es) it left behind; the run "
                "ends with them{}",
                spec.name, run.id, left.size(), spec.timeout ? " or at its timeout" : "");
            return;
        }
    }
    judge(run, false);
}

// The run's ending, from its leader's status and lastcall's interventions, once nothing of it
// runs (verify aside, which comes after).
void JobScheduler::judge(Run& run, bool after_leftovers) {
    const JobSpec& spec = jobs_[run.job].spec;
    int status = run.leader_status;
    run.phase = Phase::Running;
    if (run.recorded) {
        // Interrupted before the SIGKILL: whatever it did after that is not a result, and it is
        // never completed. An `interrupted` that could not be written is tried again.
        if (run.interrupt_pending)
            interrupt(run, outcome_of(status), run.interrupt_reason);
        else
            spdlog::warn(
                "job {}: run {} {} after it was recorded interrupted: refused, the "
                "record stays interrupted",
                spec.name, run.id, after_leftovers ? "ended" : describe_wait_status(status));
        return after_exit(run);
    }
    auto decision =
        decide_run_end(run.first, status, spec.timeout ? format_duration(*spec.timeout) : "",
                       signal_name(host_->stop_signal()), after_leftovers && run.left_behind);
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
    sp.cgroup_fd = run.scope->spawn_cgroup_fd();
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
        note_unwritten(run, RunState::Completed, {0, {}}, "", done.error().message);
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
        note_unwritten(run, RunState::Failed, outcome, reason, done.error().message);
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
    // The timeout was the leader's; the kill after a stop is the whole scope's: a process that
    // ignored the stop signal outlives the leader, and nothing else would ever kill it.
    if (!run.timed_out) run.deadline.reset();
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
// process of its scope alive (a background child the job left behind keeps it active). A
// Finishing run whose last process is gone is judged first.
void JobScheduler::release_finished_runs() {
    std::vector<std::int64_t> finished;
    for (auto& [id, run] : runs_)
        if (run.phase == Phase::Finishing && run.scope->members().empty()) finished.push_back(id);
    // Judging may start a queued run (a new entry in runs_): the ids were collected first.
    for (std::int64_t id : finished) {
        auto it = runs_.find(id);
        if (it == runs_.end() || it->second.phase != Phase::Finishing) continue;
        spdlog::info("job {}: run {}: what it left behind has exited",
                     jobs_[it->second.job].spec.name, id);
        judge(it->second, true);
    }
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
    auto now = host_->clock().now();
    for (const auto& [id, run] : runs_) {
        // A stop round cut by its budget goes on in the timer's next turn.
        auto round = run.stop_rounds.pending ? std::optional<MonoTime>(now) : std::nullopt;
        for (const auto& at : {run.deadline, round})
            if (at && (!next || *at < *next)) next = at;
    }
    if (auto st = timeout_timer_->arm(next); !st)
        spdlog::error("job timeout timer: {}", st.error().message);
}

void JobScheduler::on_timeout_timer() {
    auto now = host_->clock().now();
    for (auto& [id, run] : runs_) {
        if (run.stop_rounds.pending) stop_round(run);
        if (!run.deadline || *run.deadline > now) continue;
        if (run.phase == Phase::Lingering && !run.timed_out) continue;
        const JobSpec& spec = jobs_[run.job].spec;
        // The stop primitive on the run's whole scope (setsid descendants included): the stop
        // signal once to each member, SIGCONT, then after kTimeoutKillAfter the scope is killed.
        if (!run.timed_out) {
            spdlog::warn("job {}: run {} timed out after {}: sending SIGTERM to its processes",
                         spec.name, run.id, format_duration(*spec.timeout));
            stop_scope(run, kTimeoutKillAfter, "timeout");
        } else {
            spdlog::warn("job {}: run {} still running {} after it was stopped: SIGKILL", spec.name,
                         run.id, format_duration(run.kill_after));
            run.stop_rounds.end();  // the kill works on frozen processes; no round is owed
            int n = run.scope->kill([](const ProcInfo&) { return true; });
            host_->record_force(ForceKind::Sigkill, "job " + spec.name + ": " + run.stop_cause, n);
            run.deadline.reset();
            continue;
        }
        run.first = first_of(run.first, Intervention::Timeout);
    }
    arm_timeout_timer();
}

// The stop signal once to each member of the run's scope, SIGCONT, and the SIGKILL of the
// whole scope kTimeoutKillAfter later (on_timeout_timer).
void JobScheduler::stop_scope(Run& run, Millis kill_after, const char* cause) {
    run.timed_out = true;
    run.stop_cause = cause;
    run.kill_after = kill_after;
    // Before the round, which ends there at the latest.
    run.deadline = host_->clock().now() + kill_after;
    stop_round(run);
    arm_timeout_timer();
}

// A round of the stop passes over the run's scope. One cut by its budget (a fork storm in the
// run) goes on in the timer's next turn, after the loop's other work: the members it had not
// reached get the stop signal too, not only the kill after it.
void JobScheduler::stop_round(Run& run) {
    StopPassIo io{[&] { return run.scope->members(); },
                  [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); },
                  run.stop_rounds.budget([this] { return host_->clock().now(); }, run.deadline),
                  [&] { return one_hold(run.scope->freeze()); }};
    bool more = run.stop_rounds.pending;
    int n = send_stop_round(
                io, SIGTERM,
                [&](const ProcInfo& p) {
                    if (!run.stopped.insert(key_of(p)).second) return false;
                    return host_->note_stop_signal(p, SIGTERM);
                },
                run.stop_rounds)
                .signalled;
    if (more) {
        spdlog::debug("job {}: run {}: sent SIGTERM to {} more process(es)",
                      jobs_[run.job].spec.name, run.id, n);
    }
}

// The ledger no longer holds this run as this replica's (another replica recorded it
// interrupted after its lease expired, or a `replace` claim did): it is stopped, and nothing
// it does after this is recorded.
void JobScheduler::take_away(Run& run, const std::string& why) {
    const JobSpec& spec = jobs_[run.job].spec;
    if (run.recorded || run.phase == Phase::Lingering) return;
    run.recorded = true;
    run.first = first_of(run.first, Intervention::StopRequest);
    spdlog::warn("job {}: run {} (pid {}) is no longer this replica's: {}; stopping it", spec.name,
                 run.id, run.pid, why);
    interrupted_.push_back({run.id, spec.name, run.pid, run.scheduled_at, why});
    if (!run.timed_out) stop_scope(run, lease_kill_after(), "taken over");
}

// A run that is no longer (or soon no longer) this replica's is killed this long after its stop
// signal: within the lease, so that it is gone before another replica may retry it.
Millis JobScheduler::lease_kill_after() const {
    Millis lease{ledger_->identity().lease_ms};
    if (lease.count() <= 0) return kTimeoutKillAfter;
    return std::min<Millis>(kTimeoutKillAfter, lease / 6);
}

// A shared ledger's tick: leases, expired runs, recovery, and records still to write.
void JobScheduler::on_lease_timer() {
    renew_leases();
    auto expired = ledger_->expire_leases();
    // Said once when the ledger stops answering and once when it answers again, not every tick.
    if (!expired) {
        if (!ledger_down_since_) {
            ledger_down_since_ = host_->clock().now();
            spdlog::error("run ledger unreachable: {}; no run starts until it answers",
                          expired.error().message);
        }
    } else {
        if (ledger_down_since_) {
            spdlog::warn("run ledger {} answers again after {}", ledger_->path(),
                         format_duration(std::chrono::duration_cast<Millis>(host_->clock().now() -
                                                                            *ledger_down_since_)));
            ledger_down_since_.reset();
        }
        for (const auto& r : *expired)
            spdlog::warn("job {}: run {} (scheduled {}) of replica {} is interrupted: {}", r.job,
                         r.id, iso_utc(r.scheduled_at), r.replica, r.reason);
        if (host_->admission().is_open()) plan_recovery();
    }
    retry_unwritten();
    auto lease = Millis{ledger_->identity().lease_ms};
    Millis tick = std::min<Millis>(Millis{1000}, lease / 3);
    if (auto st = lease_timer_->arm(host_->clock().now() + tick); !st)
        spdlog::error("run ledger lease timer: {}", st.error().message);
}

void JobScheduler::renew_leases() {
    std::vector<std::int64_t> ids;
    for (const auto& [id, run] : runs_)
        if (!run.recorded && run.phase != Phase::Lingering) ids.push_back(id);
    if (ids.empty()) return;
    MonoTime sent = host_->clock().now();
    auto held = ledger_->renew(ids);
    if (held) {
        for (std::int64_t id : ids) {
            Run& run = runs_.at(id);
            if (std::find(held->begin(), held->end(), id) != held->end()) {
                run.lease_renewed = sent;
                continue;
            }
            auto rec = ledger_->get(id);
            std::string why = rec && *rec ? "the ledger records it " +
                                                std::string(to_string((*rec)->state)) + " (" +
                                                (*rec)->reason + ")"
                                          : "its lease was taken over";
            take_away(run, why);
        }
        return;
    }
    // The ledger cannot be reached. Past 2/3 of the lease another replica may soon call the run
    // expired and retry it: this replica stops it first, as an interruption that can never be
    // completed (the record is written when the ledger answers again, or by that replica).
    Millis lease{ledger_->identity().lease_ms};
    for (std::int64_t id : ids) {
        Run& run = runs_.at(id);
        if (!run.lease_renewed || sent - *run.lease_renewed < lease * 2 / 3) continue;
        const JobSpec& spec = jobs_[run.job].spec;
        std::string why =
            "lease lost: the ledger was unreachable for " +
            format_duration(std::chrono::duration_cast<Millis>(sent - *run.lease_renewed)) + " (" +
            held.error().message + ")";
        spdlog::error("job {}: run {}: {}; stopping it", spec.name, run.id, why);
        run.first = first_of(run.first, Intervention::StopRequest);
        interrupt(run, {}, why);
        if (!run.timed_out) stop_scope(run, lease_kill_after(), "lease lost");
    }
}

// Records a shared ledger could not take are written again, each tick until the grace ends.
// A refusal means the ledger already holds a final state: the one this replica meant (its
// earlier commit landed after all) or another (a replica recorded the run interrupted when its
// lease expired), which the report then shows as uncertain.
void JobScheduler::retry_unwritten() {
    for (auto& u : unwritten_) {
        if (!u.retry) continue;
        auto done = u.to == RunState::Completed ? ledger_->complete(u.id, u.outcome)
                                                : ledger_->finish(u.id, u.to, u.outcome, u.reason);
        if (!done) {
            u.error = done.error().message;
            continue;
        }
        u.retry = false;
        auto rec = ledger_->get(u.id);
        if (*done || (rec && *rec && (*rec)->state == u.to)) {
            spdlog::info("job {}: run {} recorded {} (late: the ledger was unreachable)", u.job,
                         u.id, to_string(u.to));
            u.state.clear();  // written: dropped below
            continue;
        }
        std::string held = rec && *rec
                               ? std::string(to_string((*rec)->state)) + " (" + (*rec)->reason + ")"
                               : "no such run";
        u.error = "uncertain: the run ended " + std::string(to_string(u.to)) +
                  " while the ledger was unreachable, and the ledger recorded it " + held +
                  " meanwhile";
        spdlog::error("job {}: run {}: {}", u.job, u.id, u.error);
    }
    std::erase_if(unwritten_, [](const Unwritten& u) { return u.state.empty(); });
}

// A shared ledger's artifacts are promoted by rename(2) into the output's directory: replicas on
// other machines see them only on a filesystem they all mount.
void JobScheduler::warn_local_outputs() {
    for (const auto& job : jobs_) {
        if (job.spec.output.empty()) continue;
        std::string dir = dir_of(job.spec.output);
        struct statfs fs {};
        if (::statfs(dir.c_str(), &fs) != 0) {
            spdlog::warn("job {}: output directory {}: {}", job.spec.name, dir,
                         std::strerror(errno));
            continue;
        }
        if (is_network_filesystem(fs.f_type)) continue;
        spdlog::warn(
            "job {}: output {} is on a local filesystem: with a shared ledger each replica "
            "promotes into its own copy (mount one shared volume there, or write elsewhere and "
            "use $LASTCALL_RUN_KEY)",
            job.spec.name, job.spec.output);
    }
}

void JobScheduler::state_changed(State from, State to) {
    if (to == State::Stopping && host_->stop_reaches_tree()) {
        // The stop signal goes to the tree right after this: every run whose leader, or what
        // its leader left behind (a background writer), still runs is reached by lastcall's
        // stop request, and ends `interrupted` however it then exits. A run in its commit step
        // (verify, promotion: nothing of it left running) runs that step to its end.
        for (auto& [id, run] : runs_)
            if ((run.phase == Phase::Running || run.phase == Phase::Finishing) && !run.recorded)
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
    if (in_flight > 0 && host_->stop_reaches_tree())
        spdlog::info("shutdown: {} job run(s) in flight; they get the stop signal with the tree",
                     in_flight);
    else if (in_flight > 0)
        spdlog::info(
            "shutdown: {} job run(s) in flight; the stop signal does not reach them "
            "(--kill-scope group or child): they run until they end or the grace does",
            in_flight);
}

void JobScheduler::interrupt(Run& run, RunOutcome outcome, const std::string& reason) {
    const JobSpec& spec = jobs_[run.job].spec;
    run.recorded = true;  // from here on nothing completes it, written or not
    auto done = ledger_->finish(run.id, RunState::Interrupted, outcome, reason);
    if (!done) {
        if (!run.interrupt_pending)
            note_unwritten(run, RunState::Interrupted, outcome, reason, done.error().message);
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
    Unwritten u;
    u.id = run.id;
    u.job = jobs_[run.job].spec.name;
    u.state = std::string(state);
    u.error = error;
    if (auto to = parse_run_state(state); to && is_terminal(*to) && ledger_->shared()) {
        u.to = *to;
        u.retry = true;
    }
    unwritten_.push_back(std::move(u));
}

// A fire time whose first record failed: it has no row (id 0 in the report).
void JobScheduler::note_unwritten_row(const std::string& job, RunState state,
                                      const std::string& error) {
    Unwritten u;
    u.job = job;
    u.state = std::string(to_string(state));
    u.error = error;
    unwritten_.push_back(std::move(u));
}

void JobScheduler::note_unwritten(const Run& run, RunState to, RunOutcome outcome,
                                  const std::string& reason, const std::string& error) {
    note_unwritten(run, to_string(to), error);
    unwritten_.back().outcome = outcome;
    unwritten_.back().reason = reason;
}

bool JobScheduler::sent_stop_signal(const ProcInfo& p) const {
    for (const auto& [id, run] : runs_)
        if (run.stopped.count(key_of(p))) return true;
    return false;
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
        // Its timeout reached it first: its ending is decided (failed, reason timeout, when its
        // leader is reaped), and the shutdown's kill changes nothing about it.
        if (run.first == Intervention::Timeout) continue;
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
    j.field("ledger_backend", ledger_ ? std::string(ledger_->backend()) : std::string());
    j.field("replica", ledger_ ? ledger_->identity().replica : std::string());
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
    // A shared ledger: fire times this replica could not claim (the ledger did not answer).
    j.field("unclaimed", static_cast<long long>(unclaimed_));
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
    if (ledger_ && ledger_->shared()) retry_unwritten();  // a last try before the report
    ledger_.reset();  // the database closes after the last record, before the logs flush
}

}  // namespace lastcall
