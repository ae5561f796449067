// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/ledger_worker.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

#include "lastcall/core/duration.hpp"

namespace lastcall {

namespace {

// The close of a worker that close() was not asked for: a call's.
constexpr Millis kCloseBudget{2000};

}  // namespace

Result<std::unique_ptr<LedgerWorker>> LedgerWorker::start(std::unique_ptr<Ledger> ledger,
                                                          UnitHost& host, Mode mode) {
    std::unique_ptr<LedgerWorker> w(new LedgerWorker(std::move(ledger), host, mode));
    auto timer = host.new_timer([raw = w.get()] { raw->on_deadline(); });
    if (!timer) return timer.error();
    w->deadline_timer_ = std::move(*timer);
    if (mode == Mode::OnLoop) return w;
    w->shared_->wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!w->shared_->wake) return sys_error("eventfd (ledger worker)", errno);
    if (auto st = host.watch(w->shared_->wake.get(), EPOLLIN,
                             [raw = w.get()](auto) { raw->on_answers(); });
        !st)
        return st.error();
    // Every signal blocked in the new thread (it inherits the mask at creation): a signal sent to
    // lastcall must stay pending for the loop's signalfd, never be taken by this thread.
    sigset_t all, old;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        w->thread_ = std::thread(thread_main, w->shared_);
    } catch (const std::system_error& e) {
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        host.unwatch(w->shared_->wake.get());
        return Error{std::string("start the ledger worker thread: ") + e.what()};
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return w;
}

// The close of a worker that close() did not end (a start that failed, the unit tests): the
// same, with a call's budget.
LedgerWorker::~LedgerWorker() {
    if (!closed_) close(kCloseBudget);
}

bool LedgerWorker::close(Millis budget) {
    if (closed_) return true;
    closed_ = true;
    // The unit tests' loop, or a start that failed before the thread: the ledger closes with the
    // worker.
    if (mode_ == Mode::OnLoop || !thread_.joinable()) return true;
    // Said after the close began, when the ledger may be gone: read now.
    std::string path = facts().path();
    bool sqlite = facts().backend() == "sqlite";
    host_.unwatch(shared_->wake.get());
    bool stuck;
    {
        std::unique_lock lock(shared_->mu);
        shared_->stopping = true;
        // The calls no one took yet are dropped: their callers heard "unknown" in settle().
        shared_->queue.clear();
        stuck = shared_->busy;
        shared_->cv.notify_all();
        if (!stuck) stuck = !shared_->cv.wait_for(lock, budget, [this] { return shared_->closed; });
    }
    if (!stuck) {
        thread_.join();
        return true;
    }
    // A call or the close itself runs on past its time: the thread is blocked in the kernel or on
    // the network (SQLite's fsync on a stalled disk, a state dir on a server that went away, a
    // database that does not answer). lastcall must not wait for it: the thread is left behind
    // with the shared state it holds, and ends when its call returns or the process exits.
    thread_.detach();
    spdlog::warn(
        "run ledger {}: not closed within {}: lastcall exits without waiting for it ({})", path,
        format_duration(budget),
        sqlite ? "every record that landed is in its WAL, durable; the checkpoint is left to the "
                 "next open"
               : "its connection ends with the process");
    return false;
}

void LedgerWorker::submit(std::shared_ptr<Job> job) {
    job->seq = next_seq_++;
    // A record's deadline is set when it begins (thread_main); until then only settle() ends it.
    job->deadline = job->from_start ? MonoTime::max() : host_.clock().now() + job->budget;
    job->thread_deadline = std::chrono::steady_clock::now() + job->budget;
    pending_[job->seq] = job;
    arm_deadline();
    if (mode_ == Mode::OnLoop) {
        host_.post([this, job] {
            if (!pending_.count(job->seq)) return;  // abandoned meanwhile
            job->ran = true;
            shared_->ledger->set_deadline(job->thread_deadline);
            job->work(*shared_->ledger);
            answer(job);
        });
        return;
    }
    {
        std::lock_guard lock(shared_->mu);
        auto& q = shared_->queue;
        // Behind its own lane, ahead of every later lane.
        auto at = std::find_if(q.begin(), q.end(),
                               [lane = job->lane](const auto& j) { return j->lane > lane; });
        q.insert(at, std::move(job));
    }
    shared_->cv.notify_one();
}

void LedgerWorker::thread_main(std::shared_ptr<Shared> s) {
    std::unique_lock lock(s->mu);
    for (;;) {
        s->cv.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
        if (s->stopping) break;
        auto job = std::move(s->queue.front());
        s->queue.pop_front();
        // A call its caller gave up on before it began is never begun: a claim or a write the
        // loop reported "unknown" must not land long after (and calls must not pile up behind a
        // stuck one).
        // It goes back to the loop all the same: its closures (and what they hold, admission
        // tickets among them) are destroyed on the loop's thread, never on this one.
        if (job->abandoned) {
            s->answers.push_back(std::move(job));
            continue;
        }
        job->ran = true;
        s->busy = true;
        lock.unlock();
        s->ledger->set_deadline(job->from_start ? std::chrono::steady_clock::now() + job->budget
                                                : job->thread_deadline);
        job->work(*s->ledger);
        lock.lock();
        s->busy = false;
        // Nobody listens any more. What the job holds was settled on the loop (settle(): every
        // caller was answered), so dropping it here touches nothing of the loop's.
        if (s->stopping) break;
        s->answers.push_back(std::move(job));
        std::uint64_t one = 1;
        // The eventfd's counter cannot overflow at one per call; EAGAIN would only mean "already
        // readable".
        [[maybe_unused]] auto n = ::write(s->wake.get(), &one, sizeof one);
    }
    // The close, here as every call is (LedgerWorker::close waits for it, at most its budget):
    // SQLite's checkpoint writes and fsyncs, and a thread that is left behind must not hold the
    // loop's exit.
    lock.unlock();
    s->ledger.reset();
    lock.lock();
    s->closed = true;
    s->cv.notify_all();
}

void LedgerWorker::on_answers() {
    std::uint64_t count;
    [[maybe_unused]] auto n = ::read(shared_->wake.get(), &count, sizeof count);
    std::deque<std::shared_ptr<Job>> batch;
    {
        std::lock_guard lock(shared_->mu);
        batch.swap(shared_->answers);
    }
    for (auto& job : batch) answer(job);
    arm_deadline();
}

void LedgerWorker::answer(const std::shared_ptr<Job>& job) {
    if (pending_.erase(job->seq) == 1) {
        job->deliver();
        return;
    }
    // Abandoned: the real answer of a call that did run, for the caller that wants it.
    if (job->ran && job->deliver_late) job->deliver_late();
}

// `why`: what ran out (the call's own budget, or the shutdown's time for records).
void LedgerWorker::abandon(const std::shared_ptr<Job>& job, const std::string& why) {
    bool ran;
    if (mode_ == Mode::Thread) {
        std::lock_guard lock(shared_->mu);
        job->abandoned = true;
        ran = job->ran;
    } else {
        job->abandoned = true;
        ran = false;
    }
    pending_.erase(job->seq);
    job->unknown(job->what + ": " + why +
                 (ran ? " (abandoned: its outcome is unknown)"
                      : " (not attempted: the ledger was still busy with an earlier call)"));
}

void LedgerWorker::on_deadline() {
    auto now = host_.clock().now();
    std::vector<std::shared_ptr<Job>> due;
    for (const auto& [seq, job] : pending_)
        if (job->deadline <= now) due.push_back(job);
    for (const auto& job : due) abandon(job, "no answer within " + format_duration(job->budget));
    arm_deadline();
}

void LedgerWorker::arm_deadline() {
    std::optional<MonoTime> next;
    for (const auto& [seq, job] : pending_)
        if (!next || job->deadline < *next) next = job->deadline;
    (void)deadline_timer_->arm(next);
}

void LedgerWorker::settle(MonoTime until) {
    if (mode_ == Mode::OnLoop) {
        // The unit tests' host: every call answers now, in order.
        while (!pending_.empty()) {
            auto job = pending_.begin()->second;
            shared_->ledger->set_deadline(job->thread_deadline);
            job->work(*shared_->ledger);
            answer(job);
        }
        return;
    }
    while (!pending_.empty()) {
        auto now = host_.clock().now();
        if (now >= until) break;
        MonoTime next = until;
        for (const auto& [seq, job] : pending_) next = std::min(next, job->deadline);
        if (next <= now) {
            on_deadline();
            continue;
        }
        pollfd pfd{shared_->wake.get(), POLLIN, 0};
        auto ms = std::chrono::ceil<Millis>(next - now).count();
        int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(ms, 1000)));
        if (r > 0) on_answers();
    }
    // Past the end: whatever is still unanswered is unknown. A caller that hears it may make the
    // next call of its own (the endings' next batch): that one is never begun either, and its
    // caller hears so too, until nothing is pending. (Only the first layer used to be told: the
    // records of a second batch were neither written nor named in the report.)
    while (!pending_.empty()) {
        std::vector<std::shared_ptr<Job>> left;
        for (const auto& [seq, job] : pending_) left.push_back(job);
        for (const auto& job : left) abandon(job, "not written before lastcall's exit");
    }
}

}  // namespace lastcall
