// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/ledger_worker.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <cerrno>

#include "lastcall/core/duration.hpp"

namespace lastcall {

Result<std::unique_ptr<LedgerWorker>> LedgerWorker::start(std::unique_ptr<Ledger> ledger,
                                                          UnitHost& host, Mode mode) {
    std::unique_ptr<LedgerWorker> w(new LedgerWorker(std::move(ledger), host, mode));
    auto timer = host.new_timer([raw = w.get()] { raw->on_deadline(); });
    if (!timer) return timer.error();
    w->deadline_timer_ = std::move(*timer);
    if (mode == Mode::OnLoop) return w;
    w->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!w->wake_) return sys_error("eventfd (ledger worker)", errno);
    if (auto st = host.watch(w->wake_.get(), EPOLLIN, [raw = w.get()](auto) { raw->on_answers(); });
        !st)
        return st.error();
    // Every signal blocked in the new thread (it inherits the mask at creation): a signal sent to
    // lastcall must stay pending for the loop's signalfd, never be taken by this thread.
    sigset_t all, old;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        w->thread_ = std::thread([raw = w.get()] { raw->thread_main(); });
    } catch (const std::system_error& e) {
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        host.unwatch(w->wake_.get());
        return Error{std::string("start the ledger worker thread: ") + e.what()};
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return w;
}

LedgerWorker::~LedgerWorker() {
    if (mode_ == Mode::OnLoop) return;
    host_.unwatch(wake_.get());
    bool stuck;
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
        // The calls no one took yet are dropped: their callers heard "unknown" in settle().
        queue_.clear();
        stuck = busy_;
    }
    cv_.notify_all();
    if (!stuck) {
        thread_.join();
        return;
    }
    // A call still runs past every deadline: the thread is blocked in the kernel (SQLite's write
    // on a stalled disk). lastcall must not wait for it: the thread and the ledger it holds are
    // left behind, and the process's exit ends them.
    thread_.detach();
    (void)ledger_.release();
}

void LedgerWorker::submit(std::shared_ptr<Job> job) {
    job->seq = next_seq_++;
    job->deadline = host_.clock().now() + job->budget;
    job->thread_deadline = std::chrono::steady_clock::now() + job->budget;
    pending_[job->seq] = job;
    arm_deadline();
    if (mode_ == Mode::OnLoop) {
        host_.post([this, job] {
            if (!pending_.count(job->seq)) return;  // abandoned meanwhile
            ledger_->set_deadline(job->thread_deadline);
            job->work(*ledger_);
            answer(job);
        });
        return;
    }
    {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void LedgerWorker::thread_main() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        auto job = std::move(queue_.front());
        queue_.pop_front();
        // A call its caller gave up on before it began is never begun: a claim or a write the
        // loop reported "unknown" must not land long after (and calls must not pile up behind a
        // stuck one).
        if (job->abandoned) continue;
        job->ran = true;
        busy_ = true;
        lock.unlock();
        ledger_->set_deadline(job->thread_deadline);
        job->work(*ledger_);
        lock.lock();
        busy_ = false;
        answers_.push_back(std::move(job));
        std::uint64_t one = 1;
        // The eventfd's counter cannot overflow at one per call; EAGAIN would only mean "already
        // readable".
        [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
    }
}

void LedgerWorker::on_answers() {
    std::uint64_t count;
    [[maybe_unused]] auto n = ::read(wake_.get(), &count, sizeof count);
    std::deque<std::shared_ptr<Job>> batch;
    {
        std::lock_guard lock(mu_);
        batch.swap(answers_);
    }
    for (auto& job : batch) answer(job);
    arm_deadline();
}

void LedgerWorker::answer(const std::shared_ptr<Job>& job) {
    if (pending_.erase(job->seq) == 1) {
        job->deliver();
        return;
    }
    if (job->deliver_late) job->deliver_late();
}

void LedgerWorker::abandon(const std::shared_ptr<Job>& job) {
    bool ran;
    if (mode_ == Mode::Thread) {
        std::lock_guard lock(mu_);
        job->abandoned = true;
        ran = job->ran;
    } else {
        job->abandoned = true;
        ran = false;
    }
    pending_.erase(job->seq);
    job->unknown(job->what + ": no answer within " + format_duration(job->budget) +
                 (ran ? " (abandoned: its outcome is unknown)"
                      : " (not attempted: the ledger was still busy with an earlier call)"));
}

void LedgerWorker::on_deadline() {
    auto now = host_.clock().now();
    std::vector<std::shared_ptr<Job>> due;
    for (const auto& [seq, job] : pending_)
        if (job->deadline <= now) due.push_back(job);
    for (const auto& job : due) abandon(job);
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
            ledger_->set_deadline(job->thread_deadline);
            job->work(*ledger_);
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
        pollfd pfd{wake_.get(), POLLIN, 0};
        auto ms = std::chrono::ceil<Millis>(next - now).count();
        int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(ms, 1000)));
        if (r > 0) on_answers();
    }
    // Past the end: whatever is still unanswered is unknown.
    std::vector<std::shared_ptr<Job>> left;
    for (const auto& [seq, job] : pending_) left.push_back(job);
    for (const auto& job : left) abandon(job);
}

}  // namespace lastcall
