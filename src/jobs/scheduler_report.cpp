// SPDX-License-Identifier: Apache-2.0
// What the scheduler tells the report and the metrics, and the records settled before them.
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
    // Ledger writes that failed. A run that started, one entry each: the record the ledger holds
    // is not its ending (the next start turns it interrupted, and its policy may run it again).
    j.key("unrecorded").begin_array();
    for (const auto& u : unwritten_) {
        if (never_ran(u)) continue;
        j.begin_object();
        j.field("id", static_cast<long long>(u.id));
        j.field("job", u.job);
        j.field("state", u.state);
        j.field("error", u.error);
        j.end_object();
    }
    j.end_array();
    // Fire times that never ran, counted per job and record: their rows (skipped, scheduled) or
    // their start (started: not run) did not land. One entry each had made a burst's report
    // thousands of lines long when the ledger could not take them at the end.
    j.key("unrecorded_fire_times").begin_array();
    for (const auto& f : unwritten_fire_times()) {
        j.begin_object();
        j.field("job", f.job);
        j.field("state", f.state);
        j.field("count", static_cast<long long>(f.count));
        j.field("first_fire_time", f.first ? iso_utc(f.first) : std::string());
        j.field("last_fire_time", f.last ? iso_utc(f.last) : std::string());
        j.field("error", f.error);
        j.end_object();
    }
    j.end_array();
    j.end_object();
}

bool JobScheduler::never_ran(const Unwritten& u) {
    return u.state == to_string(RunState::Started) || u.state == to_string(RunState::Scheduled) ||
           u.state == to_string(RunState::Skipped);
}

// The fire times that never ran and whose record did not land, by job and record, in the order
// of the jobs' names: how many, the first and last fire time, and the first error (a batch's
// rows fail together, with one error).
std::vector<JobScheduler::UnwrittenFireTimes> JobScheduler::unwritten_fire_times() const {
    std::map<std::pair<std::string, std::string>, UnwrittenFireTimes> by;
    for (const auto& u : unwritten_) {
        if (!never_ran(u)) continue;
        auto& f = by[{u.job, u.state}];
        if (f.count++ == 0) {
            f.job = u.job;
            f.state = u.state;
            f.error = u.error;
        }
        if (u.scheduled_at == 0) continue;
        if (f.first == 0 || u.scheduled_at < f.first) f.first = u.scheduled_at;
        f.last = std::max(f.last, u.scheduled_at);
    }
    std::vector<UnwrittenFireTimes> out;
    for (auto& [key, f] : by) out.push_back(std::move(f));
    return out;
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
    records_until_ = until;
    MonoTime began = now;
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
    flush_skips();
    ledger_->settle(until);
    retry_unwritten();
    ledger_->settle(until);
    // The metrics file lastcall leaves counts every record written above (a count asked for
    // earlier may predate them: a new one is asked for, answered after them).
    counts_out_ = false;
    refresh_counts();
    ledger_->settle(until);
    settled_ = true;
    spdlog::debug("run ledger: records settled in {} ({} not written)",
                  format_duration(std::chrono::duration_cast<Millis>(host_->clock().now() - began)),
                  unwritten_.size());
    say_unwritten();
}

// The last word on the records that did not land: which runs (each was also said when its write
// failed, and the report's jobs.unrecorded lists them), so that an operator reading the log's end
// knows which `started` rows the next start will call interrupted.
void JobScheduler::say_unwritten() const {
    std::map<std::int64_t, std::string> runs;  // by id: the record(s) that did not land
    for (const auto& u : unwritten_) {
        if (never_ran(u)) continue;
        auto& states = runs[u.id];
        states += (states.empty() ? "" : ", ") + u.state;
    }
    if (!runs.empty()) {
        std::string named;
        std::size_t n = 0;
        for (const auto& [id, states] : runs) {
            if (++n > kNamedInLog) break;
            named += (named.empty() ? "" : ", ") + std::to_string(id) + " (" + states + ")";
        }
        if (runs.size() > kNamedInLog)
            named += ", and " + std::to_string(runs.size() - kNamedInLog) + " more";
        spdlog::error(
            "run ledger: the records of {} run(s) did not land before lastcall exits: run {}; "
            "each is listed in the report's jobs.unrecorded",
            runs.size(), named);
    }
    auto fire_times = unwritten_fire_times();
    if (!fire_times.empty()) {
        std::string jobs;
        std::size_t n = 0, total = 0;
        for (const auto& f : fire_times) {
            total += f.count;
            if (++n > kNamedInLog) continue;
            jobs += (jobs.empty() ? "" : ", ") + f.job + " " + std::to_string(f.count) + " (" +
                    f.state + ")";
        }
        if (fire_times.size() > kNamedInLog)
            jobs += ", and " + std::to_string(fire_times.size() - kNamedInLog) + " more";
        spdlog::error(
            "run ledger: the records of {} fire time(s) that never ran did not land, by job: {}; "
            "counted per job in the report's jobs.unrecorded_fire_times",
            total, jobs);
    }
}

}  // namespace lastcall
