// SPDX-License-Identifier: Apache-2.0
// Fire times: the wall-clock timer, missed and skipped fire times, claims (one call for every
// fire time due at one instant), the queue, and the starts of claimed runs in slices.
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

std::string join_ids(const std::vector<std::int64_t>& ids) {
    std::string out;
    for (auto id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
    return out;
}

}  // namespace

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
            refuse_at_shutdown(r.job, r.scheduled_at, /*queued=*/false);
            continue;
        }
        due.push_back(Due{r.job, r.scheduled_at, r.of, r.keep_staging, 0});
    }
    auto now = wall_seconds();
    std::vector<Ledger::Skip> missed_rows;
    for (std::size_t j = 0; j < jobs_.size(); ++j) {
        auto& job = jobs_[j];
        if (!job.next_fire || *job.next_fire > now) continue;
        // After a suspend, a clock jump or a loop that fell behind, only the latest missed fire
        // runs: a backlog of identical runs helps nobody. The others are recorded skipped.
        cron::sys_seconds at = *job.next_fire;
        std::vector<std::int64_t> missed;
        auto next = job.spec.schedule->next_after(at);
        while (next && *next <= now) {
            if (missed.size() < kMissedRowsPerJob) missed.push_back(at.time_since_epoch().count());
            at = *next;
            next = job.spec.schedule->next_after(at);
        }
        if (!missed.empty()) note_missed(job, missed, missed_rows);
        job.next_fire = next;
        fire(j, at.time_since_epoch().count(), due);
    }
    record_missed(std::move(missed_rows));
    claim(std::move(due));
    arm_fire_timer();
}

// Fire times that passed unfired are counted (report, metrics), said with their cause, and each
// recorded skipped with it: the wall clock moved further than lastcall's monotonic clock (a
// suspend, a clock step), or lastcall itself ran late: its loop busy with more work than it can
// do in time (a thousand jobs a second), stopped, or starved of CPU. Before, they were only
// counted: at 1,000 jobs every second most fire times were neither run nor recorded, and the
// log blamed the clock.
void JobScheduler::note_missed(const JobState& job, const std::vector<std::int64_t>& missed,
                               std::vector<Ledger::Skip>& rows) {
    missed_ += static_cast<long>(missed.size());
    auto late = std::chrono::duration_cast<Millis>(host_->wall_now() - WallTime{*job.next_fire});
    std::string why =
        "lastcall ran " + format_duration(late) +
        " late (overloaded, stopped or starved of CPU): " + std::to_string(missed.size()) +
        " fire time(s) behind";
    if (fire_armed_) {
        auto mono = host_->clock().now() - fire_armed_->first;
        auto wall = host_->wall_now() - fire_armed_->second;
        auto gap = std::chrono::duration_cast<Millis>(wall - mono);
        if (gap > Millis{1000})
            why = "the wall clock moved " + format_duration(gap) +
                  " further than the monotonic clock: a suspend or a clock step";
    }
    spdlog::warn("job {}: {} fire time(s) missed ({}); only the latest runs", job.spec.name,
                 missed.size(), why);
    // A shared ledger's fire time this replica missed may be another replica's to run.
    if (facts().shared()) return;
    for (std::int64_t at : missed) rows.push_back({job.spec.name, at, "missed: " + why});
}

void JobScheduler::record_missed(std::vector<Ledger::Skip> rows) {
    if (rows.empty()) return;
    std::size_t count = rows.size();
    auto batch = std::make_shared<const std::vector<Ledger::Skip>>(std::move(rows));
    ledger_->record<std::size_t>(
        "record " + std::to_string(count) + " missed fire time(s)", call_budget(),
        [batch](Ledger& l) { return l.add_skipped_all(*batch); },
        [this, count, batch](Result<std::size_t> n) {
            if (!n) {
                spdlog::error("{} missed fire time(s) not recorded: {}", count, n.error().message);
                for (const auto& s : *batch)
                    note_unwritten_row(s.job, RunState::Skipped, n.error().message, s.scheduled_at);
            } else {
                spdlog::info("{} missed fire time(s) recorded skipped", *n);
            }
        });
}

// Skipped fire times go to the ledger in batches, as the endings do (scheduler_ledger.cpp):
// the ones skipped while a batch is with the ledger go together as the next, one call and one
// commit. A row and a commit each had made 1,000 jobs skipping every second a thousand fsyncs a
// second: the worker fell 18 s behind, and the runs' endings waited behind that backlog.
void JobScheduler::record_skipped(std::size_t job, std::int64_t scheduled_at,
                                  const std::string& reason) {
    if (reason == kShuttingDown) ++skipped_at_shutdown_;
    skips_.push_back({jobs_[job].spec.name, scheduled_at, reason});
    schedule_flush(skips_out_, skips_posted_, &JobScheduler::flush_skips);
}

void JobScheduler::flush_skips() {
    skips_posted_ = false;
    if (skips_out_ || skips_.empty() || !ledger_) return;
    auto batch = take_batch(skips_, kSkipsPerBatch);
    skips_out_ = true;
    ledger_->record<std::size_t>(
        "record " + std::to_string(batch->size()) + " skipped fire time(s)", call_budget(),
        [batch](Ledger& l) { return l.add_skipped_all(*batch); },
        [this, batch](Result<std::size_t> n) {
            skips_out_ = false;
            // All or none (one transaction). A failed batch is one line (a thousand error lines
            // at the end held the exit for a second), and each row is in the report.
            if (!n) {
                const auto& first = batch->front();
                spdlog::error("{} skipped fire time(s) but not recorded (job {} at {} ({}){}): {}",
                              batch->size(), first.job, iso_utc(first.scheduled_at), first.reason,
                              batch->size() > 1 ? ", and others" : "", n.error().message);
            }
            for (const auto& s : *batch) {
                if (!n)
                    note_unwritten_row(s.job, RunState::Skipped, n.error().message, s.scheduled_at);
                else
                    spdlog::info("job {}: run at {} skipped: {}", s.job, iso_utc(s.scheduled_at),
                                 s.reason);
            }
            flush_skips();  // what came meanwhile
        });
}

void JobScheduler::refuse_at_shutdown(std::size_t j, std::int64_t scheduled_at, bool queued) {
    // Refused here, whatever the ledger: the report counts every fire time turned away.
    host_->admission().refuse(EntryPath::JobFire);
    auto& job = jobs_[j];
    if (queued) {
        ++skipped_at_shutdown_;
        finish_record(*job.queued_id, job.spec.name, RunState::Skipped, {}, kShuttingDown, {});
        job.queued_id.reset();
    } else if (!facts().shared()) {
        // A replica that is stopping leaves a fire time (or a retry) with no row of its own to
        // the others, and says nothing of it.
        record_skipped(j, scheduled_at, kShuttingDown);
    }
}

void JobScheduler::fire(std::size_t j, std::int64_t scheduled_at, std::vector<Due>& due) {
    auto& job = jobs_[j];
    bool shared = facts().shared();
    if (!host_->admission().is_open()) return refuse_at_shutdown(j, scheduled_at, /*queued=*/false);
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
                note_unwritten_row(job.spec.name, RunState::Scheduled, id.error().message,
                                   scheduled_at);
                return;
            }
            job.queued_id = *id;
            job.queued_at = scheduled_at;
            spdlog::info("job {}: run {} queued behind the running one", job.spec.name, *id);
            // The shutdown began, or the running one ended, while the row was being written.
            if (!host_->admission().is_open()) {
                refuse_at_shutdown(j, scheduled_at, /*queued=*/true);
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
    // What the claim did, one entry per request once it ran: written by the claim and read by the
    // record that follows an unknown answer (on_claimed), both on the worker's thread, one after
    // the other; the loop never reads it.
    auto did = std::make_shared<std::vector<Result<Claim>>>();
    std::string what = requests.size() == 1
                           ? "claim the run of job " + requests.front().job + " at " +
                                 iso_utc(requests.front().scheduled_at)
                           : "claim " + std::to_string(requests.size()) + " fire times";
    ledger_->call<std::vector<Claimed>>(
        what, call_budget(),
        [requests, one_machine, did](Ledger& l) mutable -> Result<std::vector<Claimed>> {
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
            *did = claims;
            for (std::size_t i = 0; i < requests.size(); ++i) {
                out[i].claim = std::move(claims[i]);
                out[i].retry_of = requests[i].retry_of;
            }
            return out;
        },
        [this, asked, did](Result<std::vector<Claimed>> answer) {
            on_claimed(*asked, answer, did);
        },
        // One machine: nothing. The record that followed the unknown answer ran after the claim,
        // on the worker, and wrote what became of each fire time (record_unstarted); a second
        // record here gave a fire time two rows (`skipped`, then `interrupted`). A shared
        // ledger: on_claimed_late.
        one_machine
            ? std::function<void(Result<std::vector<Claimed>>)>()
            : [this, names](Result<std::vector<Claimed>> late) { on_claimed_late(names, late); });
}

// A shared ledger's claim answered after its deadline: a fire time this replica won after all is
// recorded as not run (its retry follows the job's policy), never left `started` with nobody
// running it; and it is not counted as one the ledger could not be asked to claim.
void JobScheduler::on_claimed_late(const std::vector<std::string>& names,
                                   Result<std::vector<Claimed>>& late) {
    if (!late) return;
    for (std::size_t i = 0; i < late->size() && i < names.size(); ++i) {
        const auto& c = (*late)[i];
        if (!c.claim) continue;
        if (unclaimed_ > 0) --unclaimed_;
        if (c.claim->outcome != Claim::Outcome::Started) continue;
        spdlog::warn("job {}: run {} was claimed after the claim's deadline: not started", names[i],
                     c.claim->id);
        finish_record(c.claim->id, names[i], RunState::Interrupted, {}, kClaimedLate, {});
    }
}

void JobScheduler::on_claimed(std::vector<Asked>& asked, Result<std::vector<Claimed>>& answer,
                              const std::shared_ptr<std::vector<Result<Claim>>>& did) {
    std::vector<Unstarted> unstarted;
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
            // One machine: the fire time's row says why nothing ran. The claim may have landed
            // after all (its answer only came too late): what the ledger holds is decided on
            // the worker, behind the claim (record_unstarted), so the fire time has one row.
            Unstarted u;
            u.index = i;
            u.job = spec.name;
            u.scheduled_at = a.due.scheduled_at;
            u.why = why;
            unstarted.push_back(std::move(u));
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
    // One call (two commits at most) for a burst's fire times, not one each: a thousand of them
    // ahead of the runs' endings on a slow disk would be the backlog issue 42 removed.
    if (!unstarted.empty()) {
        std::string what = unstarted.size() == 1
                               ? "record the unstarted run of job " + unstarted[0].job + " at " +
                                     iso_utc(unstarted[0].scheduled_at)
                               : "record " + std::to_string(unstarted.size()) + " unstarted runs";
        auto batch = std::make_shared<const std::vector<Unstarted>>(std::move(unstarted));
        ledger_->follow_up<std::vector<Unstarted>>(
            what, call_budget(),
            [did, batch](Ledger& l) -> Result<std::vector<Unstarted>> {
                return record_unstarted(l, *did, *batch);
            },
            [this, batch](Result<std::vector<Unstarted>> r) { on_unstarted(*batch, r); });
    }
    pump_starts();
}

// On the worker, right behind a claim whose caller heard "unknown" (or an error): each of its fire
// times that did not start gets exactly one row and one terminal state, by what the claim did for
// it (`did`; empty: the claim was never begun, or failed before its claims). Landed (`started`,
// and nobody runs it): interrupted, with why. Recorded skipped by the claim itself (a forbidden
// overlap, a held job), or taken by another row: that row stands. Nothing written (the claim's
// transaction rolled back): one `skipped` row says why nothing ran. Two commits at most.
std::vector<JobScheduler::Unstarted> JobScheduler::record_unstarted(
    Ledger& l, const std::vector<Result<Claim>>& did, std::vector<Unstarted> fire_times) {
    std::vector<Ledger::Ending> endings;
    std::vector<std::size_t> ended;
    std::vector<Ledger::Skip> skips;
    std::vector<std::size_t> skipped;
    for (std::size_t k = 0; k < fire_times.size(); ++k) {
        Unstarted& u = fire_times[k];
        if (u.index < did.size() && did[u.index]) {
            const Claim& c = did[u.index].value();
            u.id = c.id;
            if (c.outcome != Claim::Outcome::Started) continue;
            u.state = RunState::Interrupted;
            endings.push_back({c.id, RunState::Interrupted, {}, kClaimedLate, std::nullopt});
            ended.push_back(k);
            continue;
        }
        skips.push_back({u.job, u.scheduled_at, not_started_unrecorded(u.why)});
        skipped.push_back(k);
    }
    if (!endings.empty()) {
        auto done = l.finish_all(endings);
        for (std::size_t j = 0; j < ended.size(); ++j) {
            Unstarted& u = fire_times[ended[j]];
            if (!done)
                u.error = done.error().message;
            else
                u.written = j < done->size() && (*done)[j];
        }
    }
    if (!skips.empty()) {
        auto n = l.add_skipped_all(skips);
        for (std::size_t k : skipped) {
            if (!n)
                fire_times[k].error = n.error().message;
            else
                fire_times[k].written = true;
        }
    }
    return fire_times;
}

void JobScheduler::on_unstarted(const std::vector<Unstarted>& asked,
                                Result<std::vector<Unstarted>>& r) {
    // Not written at all (lastcall's exit came first): each fire time is in the report.
    const std::vector<Unstarted>& got = r ? *r : asked;
    std::string late;
    const Unstarted* first_failed = nullptr;
    std::size_t failed = 0;
    for (const auto& u : got) {
        const std::string& error = r ? u.error : r.error().message;
        if (!error.empty()) {
            if (failed++ == 0) first_failed = &u;
            note_unwritten(0, u.job, "started", error, u.scheduled_at);
        } else if (u.state == RunState::Interrupted) {
            if (u.written) late += (late.empty() ? "" : ", ") + std::to_string(u.id);
        } else if (u.written) {
            // Not run because its `started` could not be recorded: the report says so, beside
            // the row that does.
            note_unwritten(0, u.job, "started", u.why, u.scheduled_at);
        }
    }
    if (!late.empty())
        spdlog::warn(
            "run(s) {} were claimed after the claim's deadline: not started, recorded interrupted",
            late);
    if (first_failed)
        spdlog::error(
            "{} fire time(s) not started, and their records failed too (job {} at {}{}): {}",
            failed, first_failed->job, iso_utc(first_failed->scheduled_at),
            failed > 1 ? ", and others" : "", r ? first_failed->error : r.error().message);
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
                (*held)->rollback();
                record_unstarted_queued(id, at, name,
                                        r ? "the run is no longer scheduled" : r.error().message);
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

// A queued run whose `started` could not be written is not run. The start may have landed after
// all (its answer only came too late): what the row becomes is decided on the worker, behind the
// start. Still scheduled -> skipped; started, with nobody running it -> interrupted. (A `skipped`
// sent as a final record was refused by a row the late start had made `started`, which then
// stayed so until the next lastcall called it interrupted.)
void JobScheduler::record_unstarted_queued(std::int64_t id, std::int64_t at,
                                           const std::string& name, const std::string& why) {
    note_unwritten(id, name, "started", why, at);
    spdlog::error("job {}: run {} not started: its `started` record could not be written: {}", name,
                  id, why);
    ledger_->follow_up<std::optional<RunState>>(
        "record the unstarted queued run " + std::to_string(id), call_budget(),
        [id, why](Ledger& l) -> Result<std::optional<RunState>> {
            auto skipped = l.finish(id, RunState::Skipped, {}, not_started_unrecorded(why));
            if (!skipped) return skipped.error();
            if (*skipped) return std::optional<RunState>(RunState::Skipped);
            auto late = l.finish(id, RunState::Interrupted, {}, kStartedLate);
            if (!late) return late.error();
            if (*late) return std::optional<RunState>(RunState::Interrupted);
            return std::optional<RunState>();  // it already had a final state
        },
        [id, name](Result<std::optional<RunState>> r) {
            if (!r)
                spdlog::error(
                    "job {}: run {}: the record of its start that did not happen failed: {}", name,
                    id, r.error().message);
            else if (*r == RunState::Interrupted)
                spdlog::warn(
                    "job {}: run {} was started after its call's deadline: not started, "
                    "recorded interrupted",
                    name, id);
        });
}

}  // namespace lastcall
