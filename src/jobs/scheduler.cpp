// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/scheduler.hpp"
#include "scheduler_internal.hpp"

#include "lastcall/metrics/metrics.hpp"

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
#include <map>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/process_tree.hpp"
#include "lastcall/process/stop.hpp"

namespace lastcall {

namespace {

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

}  // namespace

JobScheduler::JobScheduler(std::vector<JobSpec> jobs, std::unique_ptr<Ledger> ledger,
                           LedgerWorker::Mode mode)
    : opening_(std::move(ledger)), mode_(mode) {
    for (auto& spec : jobs) jobs_.push_back(JobState{std::move(spec), {}, {}, 0, false, 0, 0});
}

Status JobScheduler::attach(Supervisor& sup) {
    return attach_host(sup.unit_host());
}

void JobScheduler::set_output(std::shared_ptr<UnitOutput> output) {
    out_ = std::move(output);
    for (const auto& job : jobs_) out_->add_name(job.spec.name);
}

Status JobScheduler::attach_host(UnitHost& host) {
    host_ = &host;
    if (!out_) set_output(std::make_shared<UnitOutput>(STDOUT_FILENO, false));
    attach_output(*out_, host);
    // The previous owner's unfinished runs become interrupted here, before the loop's first turn
    // and before the worker owns the ledger: one statement, bounded by the ledger's own deadline,
    // as the start's write in Ledger::open is. A stop that comes at once must not leave them
    // `started` (the rest of the recovery, the kill of their leftovers and the retries, is the
    // worker's first call).
    auto fixed =
        opening_->interrupt_unfinished("lastcall stopped before the run ended (killed or crashed)");
    auto worker = LedgerWorker::start(std::move(opening_), host, mode_);
    if (!worker) return worker.error();
    ledger_ = std::move(*worker);
    auto fire = host.new_wall_timer([this] { on_fire_timer(); });
    if (!fire) return fire.error();
    fire_timer_ = std::move(*fire);
    auto timeout = host.new_timer([this] { on_timeout_timer(); });
    if (!timeout) return timeout.error();
    timeout_timer_ = std::move(*timeout);
    if (facts().shared()) {
        auto lease = host.new_timer([this] { on_lease_timer(); });
        if (!lease) return lease.error();
        lease_timer_ = std::move(*lease);
        spdlog::info("run ledger {} is shared: replica {}, cluster {}, lease {}", facts().path(),
                     facts().identity().replica, facts().identity().cluster,
                     format_duration(Millis{facts().identity().lease_ms}));
        warn_local_outputs();
    }
    if (retention_) {
        auto prune = host.new_timer([this] { on_prune_timer(); });
        if (!prune) return prune.error();
        prune_timer_ = std::move(*prune);
        (void)prune_timer_->arm(host_->clock().now());
    }
    if (!fixed)
        spdlog::error("run ledger recovery: {}", fixed.error().message);
    else
        for (const auto& rec : *fixed)
            spdlog::warn(
                "run {} of job {} (scheduled {}) was left {} by a previous lastcall: now "
                "interrupted",
                rec.id, rec.job, iso_utc(rec.scheduled_at),
                rec.started_ms ? "started" : "scheduled");
    recover(fixed ? std::move(*fixed) : std::vector<RunRecord>{});
    auto now = wall_seconds();
    for (auto& j : jobs_) {
        j.next_fire = j.spec.schedule->next_after(now);
        if (j.next_fire)
            spdlog::info("job {}: schedule '{}', next run at {}", j.spec.name,
                         j.spec.schedule->expression(),
                         cron::fire_time_text(*j.spec.schedule, *j.next_fire));
        else
            spdlog::warn("job {}: schedule '{}' never fires again", j.spec.name,
                         j.spec.schedule->expression());
    }
    arm_fire_timer();
    if (lease_timer_) (void)lease_timer_->arm(host_->clock().now());
    return Ok{};
}

cron::sys_seconds JobScheduler::wall_seconds() const {
    return std::chrono::floor<std::chrono::seconds>(host_->wall_now());
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
    env.set("LASTCALL_LEDGER", facts().path());
    // Fencing (`lastcall runs check`, lastcall.run_is_current()): who holds the run; and, with
    // the ledger, what a restarted replica finds its predecessor's leftovers by.
    env.set("LASTCALL_RUN_OWNER", facts().identity().owner);
    if (auto url = facts().connect_url(); !url.empty()) env.set("LASTCALL_LEDGER_URL", url);
    env.set("LASTCALL_REPLICA", facts().identity().replica);
    env.set("LASTCALL_SCHEDULED_TIME", iso_utc(run.scheduled_at));
    // One key for a fire time and all its retries (also after `runs release`): what a job uses
    // to make its side effects idempotent.
    env.set("LASTCALL_RUN_KEY",
            spec.name + "@" + iso_utc(run.key_at ? run.key_at : run.scheduled_at));
    if (run.retry_of) env.set("LASTCALL_RETRY_OF", std::to_string(*run.retry_of));
    if (!run.resume_from.empty()) env.set("LASTCALL_RESUME_FROM", run.resume_from);
    // Read with the claim (or the queued run's start), in the same call.
    env.set("LASTCALL_WATERMARK", run.watermark ? iso_utc(*run.watermark) : "");
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

void JobScheduler::begin_run(std::size_t j, std::int64_t id, std::int64_t scheduled_at,
                             Ticket ticket, std::optional<MonoTime> claimed_at,
                             const std::vector<std::int64_t>& retry_of, bool keep_staging,
                             std::int64_t key_at, std::optional<std::int64_t> watermark) {
    auto& job = jobs_[j];
    const JobSpec& spec = job.spec;
    Run run;
    run.id = id;
    run.job = j;
    run.scheduled_at = scheduled_at;
    run.key_at = key_at ? key_at : scheduled_at;
    run.watermark = watermark;
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
    // The run is a unit of work with its own scope: a timeout stops all of it, setsid
    // descendants included, and "the run is over" means its scope is empty.
    run.scope = host_->new_scope("job-" + spec.name + "." + std::to_string(run.id));
    // The scope outlives moves of the Run (a unique_ptr): the unit's callbacks hold it.
    UnitScope* scope = run.scope.get();
    run.unit = std::make_unique<Unit>(
        host_->units(), "job " + spec.name + " run " + std::to_string(run.id), host_->clock(),
        [scope] { return scope->members(); }, [scope] { return one_hold(scope->freeze()); },
        [this](const ProcInfo& p, int sig) { return host_->signal(p, sig); });
    SpawnSpec sp;
    sp.argv = spec.command;
    sp.env = environment(run, run.staging);
    sp.session = SpawnSpec::Session::NewSession;
    sp.cgroup_fd = run.scope->spawn_cgroup_fd();
    sp.pdeathsig = SIGKILL;      // a job must not outlive a lastcall that was killed
    sp.credentials = spec.user;  // its `user`/`group`, else --user (main.cpp)
    sp.no_new_privs = host_->settings().no_new_privs;
    UniqueFd out_write = capture_output(spec.name, sp);
    auto result = host_->spawn(sp);
    out_write.reset();  // the run's processes hold it now: EOF means they are all gone
    if (!result.child) {
        std::string why = result.error ? result.error->message : result.failure->message();
        ticket.rollback();
        spdlog::error("job {}: run {} failed to start: {}", spec.name, run.id, why);
        finish_record(run.id, spec.name, RunState::Failed, {}, "spawn: " + why, {});
        return;
    }
    ticket.started();
    run.ticket = std::move(ticket);
    run.pid = result.child->pid;
    run.unit->set_session(run.pid);  // spawned with setsid: the report names its processes
    if (facts().shared()) run.lease_renewed = claimed_at;
    run.scope->started(run.pid);
    if (spec.timeout) run.deadline = host_->clock().now() + *spec.timeout;
    queue_pid(id, run.pid);
    spdlog::info("job {}: run {} (scheduled {}) started, pid {}", spec.name, run.id,
                 iso_utc(scheduled_at), run.pid);
    ++job.running;
    runs_.emplace(run.id, std::move(run));
    arm_timeout_timer();
}

// A terminal record (failed, interrupted, skipped) through the worker; `then` hears the answer
// (none: an error is logged and the record is kept as unwritten, to be written again).
void JobScheduler::finish_record(std::int64_t id, const std::string& job, RunState to,
                                 RunOutcome outcome, const std::string& reason,
                                 std::function<void(Result<bool>)> then) {
    queue_ending(Ledger::Ending{id, to, outcome, reason, std::nullopt},
                 [this, id, job, to, outcome, reason, then = std::move(then)](Result<bool> done) {
                     if (then) return then(std::move(done));
                     if (!done) {
                         spdlog::error("job {}: run {}: {}", job, id, done.error().message);
                         if (is_terminal(to))
                             note_unwritten(id, job, to, outcome, reason, done.error().message);
                     }
                 });
}

// Exits are judged in slices after the sweep that reaped them: a burst of a thousand runs
// ending together (each judged, recorded, its scope checked) does not hold the loop.
void JobScheduler::reaped(const Reaped& r) {
    exits_.push_back({r.pid, r.status});
    if (exits_posted_) return;
    exits_posted_ = true;
    host_->post([this] { judge_exits(); });
}

void JobScheduler::judge_exits() {
    exits_posted_ = false;
    MonoTime began = host_->clock().now();
    for (std::size_t n = 0;
         n < kExitsPerSlice && !exits_.empty() && (n == 0 || host_->clock().now() - began < kSlice);
         ++n) {
        auto [pid, status] = exits_.front();
        exits_.pop_front();
        for (auto& [id, run] : runs_) {
            if (run.phase == Phase::Running && run.pid == pid) {
                on_leader_exit(run, status);
                break;
            }
            if (run.phase == Phase::Verifying && run.verify_pid == pid) {
                on_verify_exit(run, status);
                break;
            }
        }
    }
    release_finished_runs();
    if (!exits_.empty() && !exits_posted_) {
        exits_posted_ = true;
        host_->post([this] { judge_exits(); });
    }
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
        if (job.queued_id) refuse_at_shutdown(j, job.queued_at, /*queued=*/true);
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

// Its stdout and stderr come out prefixed with the job's name, as supercronic tags each line
// with its job (process/unit_output.hpp). Returns the write end for the spawn.
UniqueFd JobScheduler::capture_output(const std::string& job, SpawnSpec& sp) {
    auto c = out_->capture(job);
    if (!c) {
        spdlog::warn("job {}: {}; its output is not prefixed", job, c.error().message);
        return {};
    }
    sp.stdout_fd = c->write_end.get();
    return std::move(c->write_end);
}

void JobScheduler::finished(int /*exit_code*/) {
    if (out_) finish_output(*out_);
    // Every process is reaped by now: whatever a ticket still covers is gone.
    for (auto& [id, run] : runs_)
        if (run.ticket) run.ticket->release();
    runs_.clear();
    // The database closes after the last record, before the logs flush, on the worker and within
    // what is left of the records' time (at least 250 ms): its close (SQLite's checkpoint, a
    // connection's end) on a stalled disk or a server that went away held lastcall's exit after
    // the grace and the report (LedgerWorker::close).
    if (ledger_) {
        auto now = host_->clock().now();
        Millis budget = call_budget();
        if (records_until_)
            budget =
                std::max<Millis>(std::chrono::ceil<Millis>(*records_until_ - now), kCloseAtLeast);
        ledger_->close(budget);
    }
    ledger_.reset();
}

}  // namespace lastcall
