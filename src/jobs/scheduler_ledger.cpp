// SPDX-License-Identifier: Apache-2.0
// The scheduler's side of the run ledger (scheduler.hpp): recovery at start, the lease tick,
// records written in batches and written again, pruning and the metrics' count. Every call goes
// through the ledger worker (ledger_worker.hpp); nothing here waits on the ledger. The runs
// themselves (fire times, spawns, exits, stops) are scheduler.cpp's.
#include <poll.h>
#include <signal.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>

#include "lastcall/core/duration.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/process_tree.hpp"
#include "scheduler_internal.hpp"

namespace lastcall {

namespace {

// A ledger call's budget (LedgerWorker): a healthy database answers a burst's one claim
// statement or an fsync'd commit well within it; a hung one is abandoned at it.
constexpr Millis kCallBudget{2000};
// Recovery at start: the previous owner's runs, the kill of their leftovers (up to 2 s), the plan.
constexpr Millis kRecoveryBudget{8000};
// Final runs removed per prune call (`retention`).
constexpr std::size_t kPruneBatch = 1000;
// Final records per ledger call at most (flush_endings).
constexpr std::size_t kEndingsPerBatch = 500;

// The pid in an owner token ("replica/<pid>-<random>", core/instance.hpp), or -1.
pid_t owner_pid(const std::string& owner) {
    auto slash = owner.rfind('/');
    if (slash == std::string::npos) return -1;
    return static_cast<pid_t>(std::strtol(owner.c_str() + slash + 1, nullptr, 10));
}

// Waits, until `deadline`, for every process SIGKILLed through these pidfds to end (a pidfd is
// readable once its process has exited, a zombie included). The pid of the first that did not.
std::optional<pid_t> not_ended_by(const std::vector<ProcessRef>& killed,
                                  std::chrono::steady_clock::time_point deadline) {
    for (const auto& ref : killed) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd pfd{ref.pidfd(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0)
            return ref.pid();
    }
    return std::nullopt;
}

// Is the lastcall that owned a run still alive on this machine? Its pid, if it is a lastcall
// (a pid can be reused, by anything: only another lastcall counts as the owner).
bool owner_alive(const std::string& owner) {
    pid_t pid = owner_pid(owner);
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    auto comm = read_file("/proc/" + std::to_string(pid) + "/comm");
    return comm && comm->rfind("lastcall", 0) == 0;
}

// A replica restarted on the same machine (lastcall not PID 1: under systemd, `docker run
// --init`, a VM): the runs of its previous instance may have left processes that outlived it
// (pdeathsig reaches only a run's leader). They are found by the variables every run's processes
// get (this ledger, this replica's name, the run's owner) and killed unless their owner is a
// live lastcall (two replicas of one name on one machine), before this replica claims anything:
// the retry of such a run must not run beside it. Runs on the ledger worker's thread.
std::vector<std::string> kill_predecessors_leftovers(const std::string& ledger_path,
                                                     const LedgerIdentity& me) {
    std::vector<std::string> said;
    auto found = processes_with_environment(
        {"LASTCALL_LEDGER=" + ledger_path, "LASTCALL_REPLICA=" + me.replica},
        {"LASTCALL_RUN_ID", "LASTCALL_RUN_OWNER"});
    std::map<std::string, std::pair<std::string, std::vector<ProcessRef>>> killed;  // by run
    for (const auto& f : found) {
        const std::string& run = f.values[0];
        const std::string& owner = f.values[1];
        if (owner == me.owner || owner_alive(owner)) continue;
        auto ref = ProcessRef::open(f.info);
        if (!ref || !ref->signal(SIGKILL)) continue;
        auto& entry = killed[run];
        entry.first += (entry.first.empty() ? "" : ", ") + std::to_string(f.info.pid);
        entry.second.push_back(std::move(*ref));
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (auto& [run, entry] : killed) {
        said.push_back("run " + run + ": killed " + std::to_string(entry.second.size()) +
                       " process(es) a previous lastcall of replica " + me.replica +
                       " left running (" + entry.first + ")");
        if (auto pid = not_ended_by(entry.second, deadline))
            said.push_back("run " + run + ": pid " + std::to_string(*pid) +
                           " did not end within 2s of SIGKILL");
    }
    return said;
}

// A run that a killed lastcall left `started` may still have processes: a background writer that
// left the run's session, with no cgroup to hold it (the /proc tracker) and no pdeathsig (fork
// clears it). It would go on writing into what a retry is about to produce, so it is found by the
// variables the run's processes were given (this ledger's path and the run id), killed through
// a pidfd, and waited for (at most 2 s) before any retry starts. Runs on the ledger worker's
// thread (it waits): returns what to log.
std::vector<std::string> kill_leftovers(const std::string& ledger_path, const RunRecord& run) {
    std::vector<std::string> said;
    auto found = processes_with_environment(
        {"LASTCALL_LEDGER=" + ledger_path, "LASTCALL_RUN_ID=" + std::to_string(run.id)});
    std::vector<ProcessRef> killed;
    std::string pids;
    for (const auto& p : found) {
        auto ref = ProcessRef::open(p);
        if (!ref || !ref->signal(SIGKILL)) continue;
        pids += (pids.empty() ? "" : ", ") + std::to_string(p.pid);
        killed.push_back(std::move(*ref));
    }
    if (killed.empty()) return said;
    said.push_back("run " + std::to_string(run.id) + " of job " + run.job + ": killed " +
                   std::to_string(killed.size()) +
                   " process(es) the previous lastcall left running (" + pids + ")");
    if (auto pid = not_ended_by(killed, std::chrono::steady_clock::now() + std::chrono::seconds(2)))
        said.push_back("run " + std::to_string(run.id) + " of job " + run.job + ": pid " +
                       std::to_string(*pid) + " did not end within 2s of SIGKILL");
    return said;
}

// A record retry_unwritten writes again, and what the ledger answered.
struct RewriteItem {
    std::int64_t id;
    RunState to;
    RunOutcome outcome;
    std::string reason;
};
struct RewriteAnswer {
    std::optional<std::string> error;  // the write failed again
    bool written = false;              // it landed (now, or earlier after all)
    bool accepted = false;             // ... by this write
    std::string held;                  // else: what the ledger holds instead
};

// On the ledger's thread: each record written again, and read back where the ledger refused it.
Result<std::vector<RewriteAnswer>> write_again(Ledger& l, const std::vector<RewriteItem>& items) {
    std::vector<RewriteAnswer> out;
    for (const auto& it : items) {
        RewriteAnswer a;
        auto done = it.to == RunState::Completed ? l.complete(it.id, it.outcome)
                                                 : l.finish(it.id, it.to, it.outcome, it.reason);
        if (!done) {
            a.error = done.error().message;
            out.push_back(std::move(a));
            continue;
        }
        auto rec = l.get(it.id);
        a.accepted = *done;
        a.written = *done || (rec && *rec && (*rec)->state == it.to);
        if (!a.written)
            a.held = rec && *rec
                         ? std::string(to_string((*rec)->state)) + " (" + (*rec)->reason + ")"
                         : "no such run";
        out.push_back(std::move(a));
    }
    return out;
}

}  // namespace

// A ledger call's budget. With a shared ledger never more than a third of the lease: a renewal
// that takes longer cannot keep a lease anyway.
Millis JobScheduler::call_budget() const {
    Millis lease{facts().identity().lease_ms};
    if (lease.count() <= 0) return kCallBudget;
    return std::min<Millis>(kCallBudget, lease / 3);
}

std::vector<JobScheduler::JobPolicy> JobScheduler::policies() const {
    std::vector<JobPolicy> out;
    for (const auto& j : jobs_) out.push_back({j.spec.name, j.spec.on_interrupted, j.spec.output});
    return out;
}

// The previous owner's unfinished runs become interrupted; then each job's interrupted runs are
// retried, cleaned up and retried, or held, as the job says.
void JobScheduler::recover(std::vector<RunRecord> fixed) {
    struct Recovered {
        std::vector<std::string> leftovers;
        RecoveryPlan plan;
    };
    std::string path = facts().path();
    bool shared = facts().shared();
    LedgerIdentity me = facts().identity();
    // On the worker: the leftovers' kill waits for them (at most 2 s), the loop does not. The
    // calls after it (the first claims) begin only once it returned.
    ledger_->call<Recovered>(
        "run ledger recovery", kRecoveryBudget,
        [path, shared, me, fixed = std::move(fixed),
         jobs = policies()](Ledger& l) -> Result<Recovered> {
            Recovered out;
            if (shared) out.leftovers = kill_predecessors_leftovers(path, me);
            for (const auto& r : fixed)
                if (r.started_ms)
                    for (auto& line : kill_leftovers(path, r)) out.leftovers.push_back(line);
            auto plan = plan_recovery(l, jobs);
            if (!plan) return plan.error();
            out.plan = std::move(*plan);
            return out;
        },
        [this](Result<Recovered> r) {
            if (!r) {
                spdlog::error("run ledger recovery: {}", r.error().message);
                return;
            }
            for (const auto& line : r->leftovers) spdlog::warn("{}", line);
            apply_plan(r->plan);
        });
}

// Each job's interrupted runs awaiting recovery are held, or queued for a retry claim (at start,
// and with a shared ledger on every lease tick: another replica's runs may have been interrupted).
Result<JobScheduler::RecoveryPlan> JobScheduler::plan_recovery(Ledger& l,
                                                               const std::vector<JobPolicy>& jobs) {
    auto pending = l.awaiting_recovery();
    if (!pending) return pending.error();
    RecoveryPlan plan;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
        const JobPolicy& spec = jobs[j];
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
        bool hold = spec.on_interrupted == OnInterrupted::Hold && !released;
        bool none = spec.on_interrupted == OnInterrupted::None && !released;
        if (hold || none) {
            for (auto id : ids) {
                // Each replica may see it first: the mark is one row's state, said once each.
                Hold h{j, id, staging, none, ""};
                if (auto st = l.set_recovery(id, none ? kRecoveryNone : kRecoveryHeld); !st)
                    h.error = st.error().message;
                plan.holds.push_back(std::move(h));
            }
            continue;
        }
        // cleanup-retry: the retry's start removes every earlier staging file of the job.
        plan.retries.push_back(
            Retry{j, slot, ids, spec.on_interrupted == OnInterrupted::Retry, released});
    }
    return plan;
}

void JobScheduler::apply_plan(const RecoveryPlan& plan) {
    for (const auto& h : plan.holds) {
        const JobSpec& spec = jobs_[h.job].spec;
        if (!h.error.empty()) spdlog::error("run {}: {}", h.id, h.error);
        if (h.none)
            spdlog::warn("job {}: run {} was interrupted; not retried (on_interrupted = none)",
                         spec.name, h.id);
        else
            spdlog::warn(
                "job {} is held: run {} was interrupted; `lastcall runs release {}` "
                "lets it run again{}",
                spec.name, h.id, h.id,
                h.staging.empty() ? "" : " (staging file " + h.staging + " kept)");
    }
    for (const auto& r : plan.retries) {
        if (!facts().shared())
            spdlog::info("job {}: retrying interrupted run(s) now (on_interrupted = {})",
                         jobs_[r.job].spec.name,
                         r.released ? "released" : to_string(jobs_[r.job].spec.on_interrupted));
        retries_.push_back(r);
    }
    if (!retries_.empty() && fire_timer_) arm_fire_timer();
}

// A shared ledger's tick: leases, expired runs, recovery, and records still to write.
void JobScheduler::on_lease_timer() {
    auto lease = Millis{facts().identity().lease_ms};
    Millis tick = std::min<Millis>(Millis{1000}, lease / 3);
    if (auto st = lease_timer_->arm(host_->clock().now() + tick); !st)
        spdlog::error("run ledger lease timer: {}", st.error().message);
    retry_unwritten();
    // Never a second tick's call behind the first: a slow ledger would pile them up. The runs'
    // self-stop does not wait for either (lease_stop_at, on the timeout timer).
    if (tick_out_) return;
    // Its running runs, and those whose final record is not confirmed yet (in flight, or to be
    // written again): nobody may call them expired while their record is on its way.
    std::set<std::int64_t> renew = unconfirmed_;
    for (const auto& [id, run] : runs_)
        if (!run.recorded && run.phase != Phase::Lingering) renew.insert(id);
    for (const auto& u : unwritten_)
        if (u.retry) renew.insert(u.id);
    std::vector<std::int64_t> ids(renew.begin(), renew.end());
    MonoTime sent = host_->clock().now();
    bool plan = host_->admission().is_open();
    struct Tick {
        std::vector<std::int64_t> held;
        std::map<std::int64_t, std::string> taken;  // a run no longer this replica's: why
        std::vector<RunRecord> expired;
        std::optional<RecoveryPlan> plan;
    };
    tick_out_ = true;
    ledger_->call<Tick>(
        "renew leases", call_budget(),
        [ids, plan, jobs = policies()](Ledger& l) -> Result<Tick> {
            Tick t;
            if (!ids.empty()) {
                auto held = l.renew(ids);
                if (!held) return held.error();
                t.held = std::move(*held);
                for (auto id : ids) {
                    if (std::find(t.held.begin(), t.held.end(), id) != t.held.end()) continue;
                    auto rec = l.get(id);
                    t.taken[id] = rec && *rec ? "the ledger records it " +
                                                    std::string(to_string((*rec)->state)) + " (" +
                                                    (*rec)->reason + ")"
                                              : "its lease was taken over";
                }
            }
            auto expired = l.expire_leases();
            if (!expired) return expired.error();
            t.expired = std::move(*expired);
            // After the expiry: it reads the heartbeats from before this tick.
            if (auto st = l.heartbeat(); !st) return st.error();
            if (plan) {
                auto p = plan_recovery(l, jobs);
                if (!p) return p.error();
                t.plan = std::move(*p);
            }
            return t;
        },
        [this, ids, sent](Result<Tick> t) {
            tick_out_ = false;
            if (!t) return on_tick_answer(ids, sent, false, t.error().message);
            on_tick_answer(ids, sent, true, "");
            for (auto id : t->held)
                if (auto it = runs_.find(id);
                    it != runs_.end() && !it->second.recorded &&
                    (!it->second.lease_renewed || *it->second.lease_renewed < sent)) {
                    it->second.lease_renewed = sent;
                }
            for (const auto& [id, why] : t->taken)
                if (auto it = runs_.find(id); it != runs_.end()) take_away(it->second, why);
            for (const auto& r : t->expired)
                spdlog::warn("job {}: run {} (scheduled {}) of replica {} is interrupted: {}",
                             r.job, r.id, iso_utc(r.scheduled_at), r.replica, r.reason);
            if (t->plan && host_->admission().is_open()) apply_plan(*t->plan);
            arm_timeout_timer();  // the renewed leases moved their self-stops
        });
}

// Said once when the ledger stops answering and once when it answers again, not every tick.
void JobScheduler::on_tick_answer(const std::vector<std::int64_t>& /*ids*/, MonoTime /*sent*/,
                                  bool ok, const std::string& error) {
    if (!ok) {
        ledger_error_ = error;
        if (!ledger_down_since_) {
            ledger_down_since_ = host_->clock().now();
            spdlog::error("run ledger unreachable: {}; no run starts until it answers", error);
        }
        return;
    }
    if (ledger_down_since_) {
        spdlog::warn("run ledger {} answers again after {}", facts().path(),
                     format_duration(std::chrono::duration_cast<Millis>(host_->clock().now() -
                                                                        *ledger_down_since_)));
        ledger_down_since_.reset();
    }
    ledger_error_.clear();
}

// Records a shared ledger could not take are written again, each tick until the grace ends.
// A refusal means the ledger already holds a final state: the one this replica meant (its
// earlier commit landed after all) or another (a replica recorded the run interrupted when its
// lease expired), which the report then shows as uncertain.
void JobScheduler::retry_unwritten() {
    if (rewrite_out_) return;
    std::vector<RewriteItem> items;
    for (const auto& u : unwritten_)
        if (u.retry) items.push_back({u.id, u.to, u.outcome, u.reason});
    if (items.empty()) return;
    rewrite_out_ = true;
    ledger_->call<std::vector<RewriteAnswer>>(
        "write " + std::to_string(items.size()) + " record(s) again", call_budget(),
        [items](Ledger& l) { return write_again(l, items); },
        [this, items](Result<std::vector<RewriteAnswer>> r) {
            rewrite_out_ = false;
            for (std::size_t i = 0; i < items.size(); ++i) {
                auto u =
                    std::find_if(unwritten_.begin(), unwritten_.end(), [&](const Unwritten& x) {
                        return x.retry && x.id == items[i].id && x.to == items[i].to;
                    });
                if (u == unwritten_.end()) continue;
                if (!r) {
                    u->error = r.error().message;
                    continue;
                }
                const RewriteAnswer& a = (*r)[i];
                if (a.error) {
                    u->error = *a.error;
                    continue;
                }
                u->retry = false;
                if (a.written) {
                    // Exactly what the ledger accepted: this write, or an earlier one whose
                    // answer was lost (the refusal then finds the state this replica meant).
                    if (a.accepted)
                        spdlog::info(
                            "job {}: run {} recorded {} (late: the ledger was unreachable)", u->job,
                            u->id, to_string(u->to));
                    else
                        spdlog::info(
                            "job {}: run {}: the late `{}` was refused: the ledger already "
                            "records it {} (an earlier write landed after all)",
                            u->job, u->id, to_string(u->to), to_string(u->to));
                    u->state.clear();  // written: dropped below
                    continue;
                }
                // A refusal: the ledger already holds another final state (a replica recorded
                // the run interrupted when its lease expired).
                u->error = "uncertain: the run ended " + std::string(to_string(u->to)) +
                           " while the ledger was unreachable, and the ledger recorded it " +
                           a.held + " meanwhile (the late write was refused)";
                spdlog::error("job {}: run {}: {}", u->job, u->id, u->error);
            }
            std::erase_if(unwritten_, [](const Unwritten& u) { return u.state.empty(); });
        });
}

void JobScheduler::note_unwritten(std::int64_t id, const std::string& job, std::string_view state,
                                  const std::string& error, std::int64_t scheduled_at) {
    // One entry per run and state: a write that fails again updates it.
    for (auto& u : unwritten_)
        if (id != 0 && u.id == id && u.state == state) {
            u.error = error;
            return;
        }
    Unwritten u;
    u.id = id;
    u.job = job;
    u.scheduled_at = scheduled_at;
    u.state = std::string(state);
    u.error = error;
    if (auto to = parse_run_state(state); to && is_terminal(*to) && id != 0) {
        u.to = *to;
        u.retry = true;
    }
    unwritten_.push_back(std::move(u));
}

void JobScheduler::note_unwritten(std::int64_t id, const std::string& job, RunState to,
                                  RunOutcome outcome, const std::string& reason,
                                  const std::string& error) {
    note_unwritten(id, job, to_string(to), error);
    for (auto& u : unwritten_)
        if (u.id == id && u.state == to_string(to)) {
            u.outcome = outcome;
            u.reason = reason;
        }
}

// A fire time whose first record failed: it has no row (id 0 in the report).
void JobScheduler::note_unwritten_row(const std::string& job, RunState state,
                                      const std::string& error, std::int64_t scheduled_at) {
    Unwritten u;
    u.job = job;
    u.scheduled_at = scheduled_at;
    u.state = std::string(to_string(state));
    u.error = error;
    unwritten_.push_back(std::move(u));
}

// A record of the run landed after all: it is no longer owed.
void JobScheduler::written(std::int64_t id) {
    std::erase_if(unwritten_, [id](const Unwritten& u) { return u.retry && u.id == id; });
}

// Final records go to the ledger in batches: the ones made while a batch is with the ledger wait
// and go together as the next, one call (one statement, one commit) for all. A slow ledger makes
// the batches larger, not the backlog longer.
// The pids of the runs a turn spawned go together too (one statement, one commit), batched as
// the endings are; a run that ends first records its pid with its ending.
void JobScheduler::queue_pid(std::int64_t id, std::int64_t pid) {
    pids_.emplace_back(id, pid);
    schedule_flush(pids_out_, pids_posted_, &JobScheduler::flush_pids);
}

// A record of a batched kind was queued: its batch goes after this turn's others (one post), or
// with the answer to the batch of its kind that is with the ledger; while the records settle at
// the end the loop runs no posted task, and it goes now.
void JobScheduler::schedule_flush(bool out, bool& posted, void (JobScheduler::*flush)()) {
    if (settling_) return (this->*flush)();
    if (out || posted) return;
    posted = true;
    host_->post([this, flush] { (this->*flush)(); });
}

void JobScheduler::flush_pids() {
    pids_posted_ = false;
    if (pids_out_ || pids_.empty() || !ledger_) return;
    auto batch = std::move(pids_);
    pids_.clear();
    pids_out_ = true;
    ledger_->final_record<Ok>(
        "record " + std::to_string(batch.size()) + " pid(s)", call_budget(),
        [batch](Ledger& l) { return l.set_pids(batch); },
        [this, n = batch.size()](Status st) {
            pids_out_ = false;
            if (!st)
                spdlog::error("run ledger: {} run pid(s) not recorded: {}", n, st.error().message);
            flush_pids();
        });
}

void JobScheduler::queue_ending(Ledger::Ending ending, std::function<void(Result<bool>)> answer) {
    unconfirmed_.insert(ending.id);
    if (auto it = runs_.find(ending.id); it != runs_.end() && it->second.pid > 0)
        ending.pid = it->second.pid;
    endings_.push_back({std::move(ending), std::move(answer)});
    schedule_flush(endings_out_, endings_posted_, &JobScheduler::flush_endings);
}

void JobScheduler::flush_endings() {
    endings_posted_ = false;
    if (endings_out_ || endings_.empty() || !ledger_) return;
    auto batch = take_batch(endings_, kEndingsPerBatch);
    std::vector<Ledger::Ending> list;
    for (const auto& p : *batch) list.push_back(p.ending);
    endings_out_ = true;
    ledger_->final_record<std::vector<bool>>(
        list.size() == 1
            ? "record run " + std::to_string(list[0].id) + " " + std::string(to_string(list[0].to))
            : "record " + std::to_string(list.size()) + " run endings",
        call_budget(), [list](Ledger& l) { return l.finish_all(list); },
        [this, batch](Result<std::vector<bool>> r) {
            endings_out_ = false;
            for (std::size_t i = 0; i < batch->size(); ++i) {
                auto& p = (*batch)[i];
                // Confirmed, refused, or owed (unwritten_ renews it from here).
                unconfirmed_.erase(p.ending.id);
                p.answer(r ? Result<bool>(i < r->size() && (*r)[i]) : Result<bool>(r.error()));
            }
            flush_endings();  // what came meanwhile
        });
}

// `retention`: final runs that ended longer ago are removed, kPruneBatch at a time, so no call
// holds the ledger long however large the history; a full batch is followed by the next one a
// second later, else the next pass comes after half the retention (at most a minute).
void JobScheduler::on_prune_timer() {
    if (prune_out_ || settled_) return;
    prune_out_ = true;
    std::int64_t before = unix_ms_now() - retention_->count();
    ledger_->record<std::int64_t>(
        "prune runs", call_budget(), [before](Ledger& l) { return l.prune(before, kPruneBatch); },
        [this](Result<std::int64_t> r) {
            prune_out_ = false;
            if (!r)
                spdlog::warn("run ledger: prune: {}", r.error().message);
            else if (*r > 0)
                spdlog::debug("run ledger: pruned {} run(s) older than {}", *r,
                              format_duration(*retention_));
            bool more = r && *r >= static_cast<std::int64_t>(kPruneBatch);
            Millis next = more ? Millis{1000}
                               : std::clamp<Millis>(*retention_ / 2, Millis{1000}, Millis{60000});
            (void)prune_timer_->arm(host_->clock().now() + next);
        });
}

void JobScheduler::refresh_counts() {
    if (counts_out_) return;
    counts_out_ = true;
    ledger_->record<std::vector<Ledger::JobCount>>(
        "count runs", call_budget(), [](Ledger& l) { return l.count_runs(); },
        [this](Result<std::vector<Ledger::JobCount>> r) {
            counts_out_ = false;
            if (r) counts_ = std::move(*r);  // else the next write asks again
        });
}

}  // namespace lastcall
