// SPDX-License-Identifier: Apache-2.0
// The run ledger off the event loop (issue 38). An init's real-time duties (forward a signal,
// reap, enforce the grace) must never wait on I/O lastcall does not control: a PostgreSQL server
// that hangs, a network that drops packets, a state dir on a stalled disk. So the scheduler never
// calls the Ledger itself: it hands each call to this worker, which runs it on a thread of its
// own that owns the ledger (its connection, its SQLite handle), and hears the answer on the loop
// through an eventfd.
//
// Every call has a deadline, enforced twice:
//   - by the ledger itself where it can be (PostgreSQL: libpq's non-blocking API and poll(2)
//     with the call's deadline; at the deadline the connection is abandoned and reopened with
//     back-off on a later call), so the thread is free again;
//   - by the loop in every case: at the deadline the caller hears "outcome unknown" whether or not
//     the thread answered (SQLite's write stuck in fsync on a stalled disk cannot be interrupted).
//     A call still queued behind a stuck one when its deadline passes is never started; one that
//     was running when its caller gave up delivers its real answer to `late` (when given), so a
//     claim that did land is not left unowned.
//
// Calls run one at a time: claims and lease ticks (call()) in the order given, ahead of records,
// which run in the order given after them: first the runs' final records (final_record(): the
// endings and the pids that go with them), then the other records (record(): skipped fire times,
// counts, prunes). A claim or a renewal is worth something only on time, so its deadline runs
// from the call; a record is worth writing however late, so its deadline runs from when it
// begins: a burst of a thousand runs' records over a far database is a backlog, not a thousand
// failures, and it never holds a renewal behind it. A run's final record goes before any other
// record because a `started` row left without one is the costlier loss (the next start calls the
// run interrupted and may run it again): a backlog of skipped fire times at the SIGTERM had held
// 723 runs' endings behind it until lastcall exited (issue 42). A follow-up (follow_up(): what
// the ledger must hold after a call whose caller heard "unknown") runs in the calls' lane with a
// record's budget. At the end, settle() bounds whatever is left, and every caller whose record
// did not land hears so; close() bounds the ledger's close after the report.
//
//   Queued --worker takes it--> Running --answer--> Answered (done(result) on the loop)
//      |                          |
//      +--deadline--> Abandoned   +--deadline--> Abandoned: done(unknown) now; late(result)
//         (never runs)                              when the thread answers
//
// Threads: the ledger object is touched only by the worker thread once the worker started (its
// immutable facts - path, backend, identity, shared - are set before and only read after). The
// closures given to call() run on the worker thread and must touch nothing but the Ledger and
// what they captured by value; done/late run on the loop. Nothing else in lastcall is shared.
// The thread blocks every signal: signals are the loop's (signalfd).
//
// In the unit tests (Mode::OnLoop) the call runs on the host's loop as a posted task: the same
// order and the same "answer after the caller returned" as with the thread, without one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/supervisor/unit_host.hpp"

namespace lastcall {

class LedgerWorker {
  public:
    enum class Mode { Thread, OnLoop };

    // Takes the ledger. Thread: starts the thread (its signals blocked) and watches its eventfd
    // on the host's loop.
    static Result<std::unique_ptr<LedgerWorker>> start(std::unique_ptr<Ledger> ledger,
                                                       UnitHost& host, Mode mode);
    ~LedgerWorker();
    LedgerWorker(const LedgerWorker&) = delete;
    LedgerWorker& operator=(const LedgerWorker&) = delete;

    // The ledger's immutable facts (path, backend, shared, identity): safe from the loop.
    const Ledger& facts() const { return *shared_->ledger; }

    // Runs `work` on the ledger within `budget`; `done` hears its result on the loop, or an error
    // "no answer within ..." (the outcome unknown) at the deadline. `late`, if given, hears the
    // real result of a call whose caller had already been told "unknown".
    template <typename T>
    void call(std::string what, Millis budget, std::function<Result<T>(Ledger&)> work,
              std::function<void(Result<T>)> done, std::function<void(Result<T>)> late = {}) {
        enqueue<T>(std::move(what), budget, Lane::Call, std::move(work), std::move(done),
                   std::move(late));
    }
    // What the ledger must hold after a call whose caller heard "unknown" (a claim that may have
    // landed after its deadline): in the calls' lane, so it runs right behind the call it follows
    // (it sees what that call did) and ahead of every later call (a later claim must not find that
    // call's row as a run still running), with a record's budget, counted from when it begins: it
    // waits for the call it follows, however long that one is stuck.
    template <typename T>
    void follow_up(std::string what, Millis budget, std::function<Result<T>(Ledger&)> work,
                   std::function<void(Result<T>)> done) {
        enqueue<T>(std::move(what), budget, Lane::Call, std::move(work), std::move(done), {},
                   /*from_start=*/true);
    }
    // Runs' final records (a batch of endings, the pids of runs spawned): behind the calls, ahead
    // of the other records, in order, its budget counted from when it begins.
    template <typename T>
    void final_record(std::string what, Millis budget, std::function<Result<T>(Ledger&)> work,
                      std::function<void(Result<T>)> done) {
        enqueue<T>(std::move(what), budget, Lane::FinalRecord, std::move(work), std::move(done),
                   {});
    }
    // A record (skipped fire times, a count, a prune, a promotion): behind the calls and the final
    // records, in order, its budget counted from when it begins.
    template <typename T>
    void record(std::string what, Millis budget, std::function<Result<T>(Ledger&)> work,
                std::function<void(Result<T>)> done) {
        enqueue<T>(std::move(what), budget, Lane::Record, std::move(work), std::move(done), {});
    }

    // Calls not yet answered (queued or running).
    std::size_t in_flight() const { return pending_.size(); }
    // At the end of lastcall's life: waits for every pending call's answer, each at most until
    // its own deadline and all at most until `until`; those still unanswered then are told
    // "unknown", and so is every call their callers make on hearing it (a batch's next batch):
    // nothing is left pending. Runs done() (and their follow-up calls) as the answers come.
    void settle(MonoTime until);
    // The very end, after the report: the ledger's close (SQLite: its WAL checkpoint and fsyncs;
    // PostgreSQL: the end of its connection) runs on the thread, as every call does, and is
    // waited for at most `budget`. Past it, or with a call still holding the thread, lastcall goes
    // on without it (one log line says so): the thread is left behind with the ledger, and the
    // process's exit ends it. A commit that returned is durable in the WAL whether or not the
    // checkpoint ran; the next open does it. False: not closed. After it, facts() is gone.
    bool close(Millis budget);

  private:
    // The order calls run in (see the top of this file): a lower lane first.
    enum class Lane { Call, FinalRecord, Record };

    template <typename T>
    void enqueue(std::string what, Millis budget, Lane lane, std::function<Result<T>(Ledger&)> work,
                 std::function<void(Result<T>)> done, std::function<void(Result<T>)> late,
                 bool from_start = false) {
        // The thread fills the slot, then hands the job back under the mutex: the loop reads it
        // only after that hand-over.
        auto slot = std::make_shared<std::optional<Result<T>>>();
        auto on_done = std::make_shared<std::function<void(Result<T>)>>(std::move(done));
        auto job = std::make_shared<Job>();
        job->what = std::move(what);
        job->budget = budget;
        job->lane = lane;
        job->from_start = from_start || lane != Lane::Call;
        job->work = [slot, w = std::move(work)](Ledger& l) { slot->emplace(w(l)); };
        job->deliver = [slot, on_done] { (*on_done)(std::move(**slot)); };
        job->unknown = [on_done](const std::string& why) { (*on_done)(Result<T>(Error{why})); };
        if (late) job->deliver_late = [slot, l = std::move(late)] { l(std::move(**slot)); };
        submit(std::move(job));
    }

    struct Job {
        std::uint64_t seq = 0;
        std::string what;
        Millis budget{0};
        Lane lane = Lane::Call;
        bool from_start = false;  // its deadline runs from its start (a record's), not the call
        MonoTime deadline{};
        std::chrono::steady_clock::time_point thread_deadline{};
        std::function<void(Ledger&)> work;
        std::function<void()> deliver;
        std::function<void(const std::string&)> unknown;
        std::function<void()> deliver_late;
        bool abandoned = false;  // guarded by Shared::mu: the caller was told "unknown"
        bool ran = false;        // guarded by Shared::mu: the thread took it
    };

    // What the thread and the loop share. The thread holds it too: a thread left behind, stuck
    // in the kernel past every deadline (~LedgerWorker), finds it intact when it returns.
    struct Shared {
        std::unique_ptr<Ledger> ledger;
        UniqueFd wake;  // eventfd: answers are waiting
        std::mutex mu;
        std::condition_variable cv;
        std::deque<std::shared_ptr<Job>> queue;    // guarded by mu
        std::deque<std::shared_ptr<Job>> answers;  // guarded by mu
        bool stopping = false;                     // guarded by mu
        bool busy = false;                         // guarded by mu: a call is running
        bool closed = false;                       // guarded by mu: the thread closed the ledger
    };

    LedgerWorker(std::unique_ptr<Ledger> ledger, UnitHost& host, Mode mode)
        : shared_(std::make_shared<Shared>()), host_(host), mode_(mode) {
        shared_->ledger = std::move(ledger);
    }
    void submit(std::shared_ptr<Job> job);
    static void thread_main(std::shared_ptr<Shared> s);
    void on_answers();
    void on_deadline();
    void arm_deadline();
    void abandon(const std::shared_ptr<Job>& job, const std::string& why);
    void answer(const std::shared_ptr<Job>& job);

    std::shared_ptr<Shared> shared_;
    UnitHost& host_;
    Mode mode_;
    std::uint64_t next_seq_ = 1;
    std::map<std::uint64_t, std::shared_ptr<Job>> pending_;  // the loop's view: unanswered calls
    std::unique_ptr<WakeTimer> deadline_timer_;
    bool closed_ = false;  // close() ran

    std::thread thread_;  // Mode::Thread
};

}  // namespace lastcall
