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

// After a job's timeout its scope gets SIGTERM; if anything of it is still there this much later,
// SIGKILL.
constexpr Millis kTimeoutKillAfter{5000};
constexpr const char* kShuttingDown = "shutting down";
// A slice of the loop's own work on jobs (spawning claimed runs, judging exited ones): at most
// this many, and no longer than kSlice, so a signal, a reap or a timer waits for one slice at
// most (a spawn under load takes milliseconds: 32 of them held a SIGUSR1 85-340 ms).
constexpr std::size_t kStartsPerSlice = 16;
constexpr std::size_t kExitsPerSlice = 64;
constexpr Millis kSlice{2};

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

Status JobScheduler::attach_host(UnitHost& host) {
    host_ = &host;
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
                         iso_utc(j.next_fire->time_since_epoch().count()));
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

void JobScheduler::arm_fire_timer() {
    std::optional<WallTime> at;
    if (!retries_.empty()) {
        at = WallTime{};  // the past: fires on the loop's first turn
    } else {
        for (const auto& j : jobs_)
            if (j.next_fire && (!at || *j.next_fire < *at)) at = WallTime{*j.next_fire};
    }
    fire_armed_.emplace(host_->clock().now(), host_->wall_now());
    if (auto st = fire_timer_->arm(at); !st)
        spdlog::error("job schedule timer: {}", st.error().message);
}

void JobScheduler::on_fire_timer() {
    auto retries = std::move(retries_);
    retries_.clear();
    std::vector<Due> due;
    for (auto& r : retries) {
        if (!host_->admission().is_open()) {
            host_->admission().refuse(EntryPath::JobFire);
            // A shared ledger's retry stays open for a replica that is not stopping.
            if (!facts().shared()) record_skipped(r.job, r.scheduled_at, kShuttingDown);
            continue;
        }
        due.push_back(Due{r.job, r.scheduled_at, r.of, r.keep_staging, 0});
    }
    auto now = wall_seconds();
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        auto& job = jobs_[j];
        if (!job.next_fire || *job.next_fire > now) continue;
        // After a suspend or a clock jump only the latest missed fire runs: a backlog of
        // identical runs helps nobody.
        cron::sys_seconds at = *job.next_fire;
        int missed = 0;
        auto next = job.spec.schedule->next_after(at);
        while (next && *next <= now) {
            at = *next;
            ++missed;
            next = job.spec.schedule->next_after(at);
        }
        if (missed > 0) note_missed(job, missed);
        job.next_fire = next;
        fire(j, at.time_since_epoch().count(), due);
    }
    claim(std::move(due));
    arm_fire_timer();
}

// Fire times that passed unfired are counted (report, metrics) and said with their cause: the
// wall clock moved further than lastcall's monotonic clock (a suspend, a clock step), or
// lastcall itself ran late (stopped, starved of CPU).
void JobScheduler::note_missed(const JobState& job, int missed) {
    missed_ += missed;
    std::string why = "lastcall ran late";
    if (fire_armed_) {
        auto mono = host_->clock().now() - fire_armed_->first;
        auto wall = host_->wall_now() - fire_armed_->second;
        auto gap = std::chrono::duration_cast<Millis>(wall - mono);
        if (gap > Millis{1000})
            why = "the wall clock moved " + format_duration(gap) +
                  " further than the monotonic clock: a suspend or a clock step";
        else
            why = "lastcall ran " +
                  format_duration(std::chrono::duration_cast<Millis>(host_->wall_now() -
                                                                     WallTime{*job.next_fire})) +
                  " late (stopped or starved of CPU)";
    }
    spdlog::warn("job {}: {} fire time(s) missed ({}); only the latest runs", job.spec.name, missed,
                 why);
}

void JobScheduler::record_skipped(std::size_t job, std::int64_t scheduled_at,
                                  const std::string& reason) {
    const auto& name = jobs_[job].spec.name;
    if (reason == kShuttingDown) ++skipped_at_shutdown_;
    ledger_->record<std::int64_t>(
        "record a skipped run of job " + name, call_budget(),
        [name, scheduled_at, reason](Ledger& l) {
            return l.add(name, scheduled_at, RunState::Skipped, reason);
        },
        [this, name, scheduled_at, reason](Result<std::int64_t> id) {
            if (!id) {
                spdlog::error("job {}: run at {} skipped ({}) but not recorded: {}", name,
                              iso_utc(scheduled_at), reason, id.error().message);
                note_unwritten_row(name, RunState::Skipped, id.error().message);
            } else {
                spdlog::info("job {}: run {} at {} skipped: {}", name, *id, iso_utc(scheduled_at),
                             reason);
            }
        });
}

void JobScheduler::fire(std::size_t j, std::int64_t scheduled_at, std::vector<Due>& due) {
    auto& job = jobs_[j];
    bool shared = facts().shared();
    if (!host_->admission().is_open()) {
        // Refused here, whatever the ledger: the report counts every fire time turned away.
        host_->admission().refuse(EntryPath::JobFire);
        // A replica that is stopping leaves the fire time to the others, and says nothing of it.
        if (shared) return;
        return record_skipped(j, scheduled_at, kShuttingDown);
    }
    // With a shared ledger the claim applies the concurrency rule to every replica's runs. One
    // machine: a run still claiming counts as running (its answer is on its way).
    if ((job.running > 0 || job.claiming > 0) && !shared) {
        switch (job.spec.overlap) {
            case Overlap::Skip:
                return record_skipped(j, scheduled_at,
                                      "the previous run is still running (overlap = skip)");
            case Overlap::Queue:
                if (job.queued_id || job.queueing)
                    return record_skipped(j, scheduled_at,
                                          "a run is already queued behind the running one "
                                          "(overlap = queue)");
                return queue_run(j, scheduled_at);
            case Overlap::Allow:
            case Overlap::Replace:  // the claim interrupts the active run; take_away stops it
                break;
        }
    }
    // A held job's fire time is recorded skipped by the claim itself (ClaimRequest::check_hold).
    // A released run is retried with its own policy for the staging file, and keeps its key.
    due.push_back(Due{j, scheduled_at, {}, job.spec.on_interrupted == OnInterrupted::Retry, 0});
}

// overlap = queue, one machine: the run waits as a `scheduled` row for the running one to end.
void JobScheduler::queue_run(std::size_t j, std::int64_t scheduled_at) {
    auto& job = jobs_[j];
    job.queueing = true;
    std::string name = job.spec.name;
    ledger_->record<std::int64_t>(
        "queue a run of job " + name, call_budget(),
        [name, scheduled_at](Ledger& l) {
            return l.add(name, scheduled_at, RunState::Scheduled, "queued behind the running run");
        },
        [this, j, scheduled_at](Result<std::int64_t> id) {
            auto& job = jobs_[j];
            job.queueing = false;
            if (!id) {
                spdlog::error("job {}: run at {} not queued, its record failed: {}", job.spec.name,
                              iso_utc(scheduled_at), id.error().message);
                note_unwritten_row(job.spec.name, RunState::Scheduled, id.error().message);
                return;
            }
            job.queued_id = *id;
            job.queued_at = scheduled_at;
            spdlog::info("job {}: run {} queued behind the running one", job.spec.name, *id);
            // The shutdown began, or the running one ended, while the row was being written.
            if (!host_->admission().is_open()) {
                host_->admission().refuse(EntryPath::JobFire);
                ++skipped_at_shutdown_;
                finish_record(*id, job.spec.name, RunState::Skipped, {}, kShuttingDown, {});
                job.queued_id.reset();
            } else if (job.running == 0 && job.claiming == 0) {
                start_queued(j);
            }
        });
}

// Every fire time due now (and the retries) in one call: one statement for a PostgreSQL ledger.
// Each is admitted first: a ticket taken before the claim, rolled back if it never starts.
void JobScheduler::claim(std::vector<Due> due) {
    if (due.empty()) return;
    auto asked = std::make_shared<std::vector<Asked>>();
    std::vector<ClaimRequest> requests;
    MonoTime now = host_->clock().now();  // before the claim: its lease starts later
    for (auto& d : due) {
        auto ticket = host_->admission().try_admit(EntryPath::JobFire);
        if (!ticket) {
            if (!facts().shared()) record_skipped(d.job, d.scheduled_at, kShuttingDown);
            continue;
        }
        const JobSpec& spec = jobs_[d.job].spec;
        ++jobs_[d.job].claiming;
        requests.push_back(ClaimRequest{spec.name, d.scheduled_at, d.retry_of,
                                        concurrency_of(spec.overlap), "", d.retry_of.empty()});
        asked->push_back(Asked{std::move(d), std::move(ticket), now});
    }
    if (requests.empty()) return;
    bool one_machine = !facts().shared();
    std::vector<std::string> names;
    for (const auto& r : requests) names.push_back(r.job);
    std::string what = requests.size() == 1
                           ? "claim the run of job " + requests.front().job + " at " +
                                 iso_utc(requests.front().scheduled_at)
                           : "claim " + std::to_string(requests.size()) + " fire times";
    ledger_->call<std::vector<Claimed>>(
        what, call_budget(),
        [requests, one_machine](Ledger& l) mutable -> Result<std::vector<Claimed>> {
            std::vector<Claimed> out(requests.size());
            // One machine: interrupted runs released by `lastcall runs release` while lastcall
            // runs are retried by the job's next fire time, so that the next start does not
            // retry them a second time. (A shared ledger's lease tick claims their retry on its
            // own, like any other recovery.)
            if (one_machine) {
                auto pending = l.awaiting_recovery();
                if (!pending) {
                    for (auto& c : out) c.claim = pending.error();
                    return out;
                }
                for (std::size_t i = 0; i < requests.size(); ++i) {
                    if (!requests[i].retry_of.empty()) continue;
                    for (const auto& r : *pending)
                        if (r.job == requests[i].job && r.recovery == kRecoveryReleased) {
                            requests[i].retry_of.push_back(r.id);
                            out[i].key_at = std::max(out[i].key_at, r.scheduled_at);
                        }
                }
            }
            auto claims = l.claim_all(requests);
            for (std::size_t i = 0; i < requests.size(); ++i) {
                out[i].claim = std::move(claims[i]);
                out[i].retry_of = requests[i].retry_of;
            }
            return out;
        },
        [this, asked](Result<std::vector<Claimed>> answer) { on_claimed(*asked, answer); },
        // The answer came after the loop had called it unknown: a fire time this replica won is
        // recorded as not run (its retry follows the job's policy), never left `started` with
        // nobody running it.
        [this, names](Result<std::vector<Claimed>> late) {
            if (!late) return;
            for (std::size_t i = 0; i < late->size() && i < names.size(); ++i) {
                const auto& c = (*late)[i];
                if (!c.claim || c.claim->outcome != Claim::Outcome::Started) continue;
                spdlog::warn("job {}: run {} was claimed after the claim's deadline: not started",
                             names[i], c.claim->id);
                finish_record(c.claim->id, names[i], RunState::Interrupted, {},
                              "not started: its claim was answered after the claim's deadline", {});
            }
        });
}

void JobScheduler::on_claimed(std::vector<Asked>& asked, Result<std::vector<Claimed>>& answer) {
    for (std::size_t i = 0; i < asked.size(); ++i) {
        Asked& a = asked[i];
        auto& job = jobs_[a.due.job];
        const JobSpec& spec = job.spec;
        --job.claiming;
        Result<Claim> claim = answer ? std::move((*answer)[i].claim) : answer.error();
        const auto& retry_of = answer ? (*answer)[i].retry_of : a.due.retry_of;
        std::int64_t key_at = answer ? (*answer)[i].key_at : 0;
        if (!claim) {
            a.ticket->rollback();
            // Not recorded, so not run: a run the ledger does not know of would be a silent one.
            const std::string& why = claim.error().message;
            spdlog::error(
                "job {}: run at {} not started: its `started` record could not be "
                "written: {}",
                spec.name, iso_utc(a.due.scheduled_at), why);
            // A shared ledger's row would be another replica's claim of the time: it stays
            // theirs to take, and the report counts the fire times this replica could not claim
            // (one entry each would grow without bound in a long outage).
            if (facts().shared()) {
                ++unclaimed_;
                continue;
            }
            // One machine: the fire time's row says why nothing ran.
            std::string name = spec.name;
            std::int64_t at = a.due.scheduled_at;
            ledger_->record<std::int64_t>(
                "record the unstarted run of job " + name, call_budget(),
                [name, at, why](Ledger& l) {
                    return l.add(name, at, RunState::Skipped,
                                 "not started: `started` could not be recorded: " + why);
                },
                [this, name, why](Result<std::int64_t> id) {
                    note_unwritten(id ? *id : 0, name, "started", why);
                });
            continue;
        }
        if (claim->outcome == Claim::Outcome::Lost) {
            a.ticket->rollback();
            spdlog::debug("job {}: run at {}{} claimed by another replica", spec.name,
                          iso_utc(a.due.scheduled_at), retry_of.empty() ? "" : " (a retry)");
            continue;
        }
        if (claim->outcome == Claim::Outcome::Skipped) {
            a.ticket->rollback();
            spdlog::info("job {}: run {} at {} skipped: {}", spec.name, claim->id,
                         iso_utc(a.due.scheduled_at), claim->reason);
            continue;
        }
        if (!retry_of.empty())
            spdlog::info("job {}: run {} retries interrupted run(s) {} (on_interrupted = {})",
                         spec.name, claim->id, join_ids(retry_of), to_string(spec.on_interrupted));
        for (std::int64_t old : claim->replaced) {
            spdlog::warn("job {}: run {} replaces run {} (concurrency = replace)", spec.name,
                         claim->id, old);
            if (auto it = runs_.find(old); it != runs_.end())
                take_away(it->second, "replaced by run " + std::to_string(claim->id));
        }
        ++job.claiming;  // until it is spawned: still on its way for the overlap rules
        starts_.push_back(ToStart{std::move(a), std::move(*claim), retry_of, key_at});
    }
    pump_starts();
}

// The claimed runs are spawned a slice per loop turn: a burst of a thousand fire times does not
// keep a signal, a reap or a timer waiting for more than one slice.
void JobScheduler::pump_starts() {
    pump_posted_ = false;
    MonoTime began = host_->clock().now();
    // (While the records settle at the end nothing is spawned, and no posted task would run:
    // every claim that came back is recorded not started, now.)
    for (std::size_t n = 0;
         !starts_.empty() &&
         (settling_ || (n < kStartsPerSlice && (n == 0 || host_->clock().now() - began < kSlice)));
         ++n) {
        ToStart s = std::move(starts_.front());
        starts_.pop_front();
        auto& job = jobs_[s.asked.due.job];
        --job.claiming;
        // The drain began while the claim was out: the fire time was won, but nothing new starts
        // once intake is closed. Its record says so (and its retry follows the job's policy).
        if (!host_->admission().is_open()) {
            not_started(s, "not started: " + std::string(kShuttingDown));
            continue;
        }
        begin_run(s.asked.due.job, s.claim.id, s.asked.due.scheduled_at, std::move(*s.asked.ticket),
                  s.asked.claimed_at, s.retry_of, s.asked.due.keep_staging,
                  s.key_at ? s.key_at : s.asked.due.key_at, s.claim.watermark);
    }
    if (!starts_.empty() && !pump_posted_) {
        pump_posted_ = true;
        host_->post([this] { pump_starts(); });
    }
}

void JobScheduler::not_started(const ToStart& s, const std::string& why) {
    ++skipped_at_shutdown_;
    const auto& name = jobs_[s.asked.due.job].spec.name;
    spdlog::info("job {}: run {} at {} {}", name, s.claim.id, iso_utc(s.asked.due.scheduled_at),
                 why);
    finish_record(s.claim.id, name, RunState::Interrupted, {}, why, {});
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
    auto result = host_->spawn(sp);
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

void JobScheduler::start_queued(std::size_t j) {
    auto& job = jobs_[j];
    std::int64_t id = *job.queued_id;
    std::int64_t at = job.queued_at;
    job.queued_id.reset();
    std::string name = job.spec.name;
    auto ticket = host_->admission().try_admit(EntryPath::JobFire);
    if (!ticket) {
        ++skipped_at_shutdown_;
        finish_record(id, name, RunState::Skipped, {}, kShuttingDown, {});
        return;
    }
    ++job.claiming;
    struct Started {
        bool started = false;
        std::optional<std::int64_t> watermark;
    };
    auto held = std::make_shared<std::optional<Ticket>>(std::move(ticket));
    // `started` is written before the spawn: a run the ledger cannot call started must not run
    // (the next lastcall would start it again). The pid follows the spawn.
    ledger_->call<Started>(
        "start queued run " + std::to_string(id), call_budget(),
        [id, name](Ledger& l) -> Result<Started> {
            auto started = l.start(id);
            if (!started) return started.error();
            Started out{*started, {}};
            if (*started) {
                auto w = l.watermark(name);
                if (w) out.watermark = *w;
            }
            return out;
        },
        [this, j, id, at, name, held](Result<Started> r) {
            --jobs_[j].claiming;
            if (!r || !r->started) {
                std::string why = r ? "the run is no longer scheduled" : r.error().message;
                (*held)->rollback();
                note_unwritten(id, name, "started", why);
                spdlog::error(
                    "job {}: run {} not started: its `started` record could not be written: {}",
                    name, id, why);
                finish_record(id, name, RunState::Skipped, {},
                              "not started: `started` could not be recorded: " + why,
                              [](Result<bool>) {});
                return;
            }
            if (!host_->admission().is_open()) {
                (*held)->rollback();
                ++skipped_at_shutdown_;
                finish_record(id, name, RunState::Interrupted, {},
                              "not started: " + std::string(kShuttingDown), {});
                return;
            }
            begin_run(j, id, at, std::move(**held), std::nullopt, {}, false, 0, r->watermark);
        });
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
        auto round =
            run.unit && run.unit->round_owed() ? std::optional<MonoTime>(now) : std::nullopt;
        for (const auto& at : {run.deadline, round, lease_stop_at(run)})
            if (at && (!next || *at < *next)) next = at;
    }
    if (auto st = timeout_timer_->arm(next); !st)
        spdlog::error("job timeout timer: {}", st.error().message);
}

// When a shared ledger's run must stop because its lease was not confirmed for 2/3 of it.
std::optional<MonoTime> JobScheduler::lease_stop_at(const Run& run) const {
    if (!facts().shared() || run.recorded || run.phase == Phase::Lingering || !run.lease_renewed)
        return std::nullopt;
    return *run.lease_renewed + Millis{facts().identity().lease_ms} * 2 / 3;
}

// The run's lease was last confirmed 2/3 of it ago (the ledger unreachable, hung, or slower than
// the lease): another replica may soon call it expired and retry it, so this replica stops it
// first, as an interruption that can never be completed (written when the ledger answers again,
// or by that replica), and kills what is left of it lease/6 later: at 5/6 of the lease, before
// the database's lease_until (at least the renewal's start plus the lease) has passed.
void JobScheduler::lease_self_stop(Run& run, MonoTime now) {
    const JobSpec& spec = jobs_[run.job].spec;
    std::string why =
        "lease lost: the ledger was unreachable for " +
        format_duration(std::chrono::duration_cast<Millis>(now - *run.lease_renewed)) + " (" +
        (ledger_error_.empty() ? "no renewal confirmed" : ledger_error_) + ")";
    spdlog::error("job {}: run {}: {}; stopping it", spec.name, run.id, why);
    run.first = first_of(run.first, Intervention::StopRequest);
    interrupt(run, {}, why);
    if (!run.timed_out) stop_scope(run, lease_kill_after(), "lease lost");
}

void JobScheduler::on_timeout_timer() {
    auto now = host_->clock().now();
    for (auto& [id, run] : runs_) {
        if (run.unit && run.unit->round_owed()) stop_round(run);
        if (auto stop = lease_stop_at(run); stop && *stop <= now) lease_self_stop(run, now);
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
            run.unit->kill();  // the kill works on frozen processes; no round is owed
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
    bool more = run.unit->round_owed();
    int n = more ? run.unit->continue_stop() : run.unit->stop(SIGTERM, *run.deadline);
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
    Millis lease{facts().identity().lease_ms};
    if (lease.count() <= 0) return kTimeoutKillAfter;
    return std::min<Millis>(kTimeoutKillAfter, lease / 6);
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
        host_->admission().refuse(EntryPath::JobFire);
        ++skipped_at_shutdown_;
        finish_record(*job.queued_id, job.spec.name, RunState::Skipped, {}, kShuttingDown, {});
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
    run.recorded = true;  // from here on nothing completes it, written or not
    run.interrupt_reason = reason;
    std::int64_t id = run.id;
    std::string name = jobs_[run.job].spec.name;
    pid_t pid = run.pid;
    std::int64_t at = run.scheduled_at;
    finish_record(
        id, name, RunState::Interrupted, outcome, reason,
        [this, id, name, pid, at, outcome, reason](Result<bool> done) {
            auto it = runs_.find(id);
            if (!done) {
                // Written again later; and at the leader's exit with its real status.
                if (it != runs_.end()) it->second.interrupt_pending = true;
                note_unwritten(id, name, RunState::Interrupted, outcome, reason,
                               done.error().message);
                spdlog::error(
                    "job {}: run {} interrupted ({}) but not recorded: {}; it will never be "
                    "recorded completed",
                    name, id, reason, done.error().message);
                return;
            }
            if (it != runs_.end()) it->second.interrupt_pending = false;
            written(id);
            if (!*done) {
                spdlog::warn("job {}: run {}: `interrupted` refused, it already has a final state",
                             name, id);
                return;
            }
            spdlog::warn("job {}: run {} (pid {}) interrupted: {}", name, id, pid, reason);
            interrupted_.push_back({id, name, pid, at, reason});
        });
}

void JobScheduler::before_force(Event why) {
    // The grace ran out (or the stop was escalated) and SIGKILL goes out next. Every run still
    // in flight is interrupted now, so that nothing after the kill can pass for its result.
    std::string reason = why == Event::GraceExpired
                             ? "grace expired at shutdown"
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
    // The count is the ledger's answer to the previous write's request: a slow query delays
    // the numbers, never the loop. (The last write's count was settled with the records.)
    if (!settled_) refresh_counts();
    std::map<std::string, std::int64_t> last_success;
    for (const auto& c : counts_) {
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
    m.sample("lastcall_job_fire_times_missed_total", "counter",
             "Fire times that passed while lastcall could not fire them (suspend, clock step, "
             "lastcall stopped)",
             {}, static_cast<double>(missed_));
    m.sample("lastcall_job_fire_times_unclaimed_total", "counter",
             "Fire times a shared ledger could not be asked to claim (it did not answer)", {},
             static_cast<double>(unclaimed_));
}

void JobScheduler::contribute_report(JsonWriter& j) {
    j.key("jobs").begin_object();
    j.field("ledger", ledger_ ? facts().path() : std::string());
    j.field("ledger_backend", ledger_ ? std::string(facts().backend()) : std::string());
    j.field("replica", ledger_ ? facts().identity().replica : std::string());
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
    // Fire times that passed while lastcall could not fire them (the log says why).
    j.field("missed_fire_times", static_cast<long long>(missed_));
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

// The end: every process is reaped. Records still being written get what is left of the grace
// plus 700 ms (lastcall exits within grace + 1 s of the stop), then the report names what did
// not land.
void JobScheduler::settle_records() {
    if (!ledger_) return;
    auto now = host_->clock().now();
    MonoTime until = std::max(now + Millis{250},
                              drain_started_.value_or(now) + host_->settings().grace + Millis{700});
    settling_ = true;
    // Every process is reaped: the exits not judged yet are judged now, before any record.
    while (!exits_.empty()) judge_exits();
    // Claimed, never spawned: the fire time was won and did not run.
    while (!starts_.empty()) {
        ToStart s = std::move(starts_.front());
        starts_.pop_front();
        --jobs_[s.asked.due.job].claiming;
        s.asked.ticket->rollback();
        not_started(s, "not started: " + std::string(kShuttingDown));
    }
    flush_pids();
    flush_endings();
    ledger_->settle(until);
    retry_unwritten();
    ledger_->settle(until);
    // The metrics file lastcall leaves counts every record written above (a count asked for
    // earlier may predate them: a new one is asked for, answered after them).
    counts_out_ = false;
    refresh_counts();
    ledger_->settle(until);
    settled_ = true;
}

void JobScheduler::finished(int /*exit_code*/) {
    // Every process is reaped by now: whatever a ticket still covers is gone.
    for (auto& [id, run] : runs_)
        if (run.ticket) run.ticket->release();
    runs_.clear();
    // The database closes after the last record, before the logs flush (a thread stuck in the
    // kernel is left behind, see ~LedgerWorker).
    ledger_.reset();
}

}  // namespace lastcall
