// SPDX-License-Identifier: Apache-2.0
// A real ledger (SQLite) that a unit test can cut off or stall: what a PostgreSQL server that is
// unreachable, or hangs, does to lastcall, without one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "lastcall/jobs/ledger.hpp"

namespace lastcall {

// A ledger whose database can be cut off or stalled: the SQLite ledger underneath, every call
// failing as an unreachable server fails while `down` is set, and blocking, as a call to a hung
// server or a write on a stalled disk blocks, while `stall()` holds (until `unstall()`).
// `shared`: it says it is a PostgreSQL ledger shared by replicas (claims compete, leases).
class StallableLedger final : public Ledger {
  public:
    StallableLedger(std::unique_ptr<Ledger> real, bool shared)
        : real_(std::move(real)), shared_(shared) {
        set_identity(real_->identity());
    }
    // The close of the database (SQLite's checkpoint on a stalled disk, a server that went away)
    // blocks while `stall_close()` holds: until unstall().
    ~StallableLedger() override {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !close_stalled_; });
    }
    void stall_close() {
        std::lock_guard lock(mu_);
        close_stalled_ = true;
    }
    std::atomic<bool> down{false};
    void stall() {
        std::lock_guard lock(mu_);
        stalled_ = true;
    }
    // Only the runs' starts block (Ledger::start), every other call goes through: the start of a
    // queued run stuck while the ending of the run before it lands.
    void stall_starts() {
        std::lock_guard lock(mu_);
        starts_stalled_ = true;
    }
    // Starts that have begun (stalled ones included).
    int starts() const { return starts_; }
    // Also lets a stalled close go on. Notified under the lock: the closing thread cannot finish
    // the destruction (of mu_ and cv_ too) before this returns.
    void unstall() {
        std::lock_guard lock(mu_);
        stalled_ = false;
        starts_stalled_ = false;
        close_stalled_ = false;
        cv_.notify_all();
    }
    // Calls that have begun (stalled ones included).
    int calls() const { return calls_; }

    std::string_view backend() const override { return shared_ ? "postgresql" : "sqlite"; }
    const std::string& path() const override { return real_->path(); }
    bool shared() const override { return shared_; }
    Result<std::int64_t> add(std::string_view job, std::int64_t at, RunState state,
                             std::string_view reason,
                             std::optional<std::int64_t> retry_of) override {
        return cut<std::int64_t>([&] { return real_->add(job, at, state, reason, retry_of); });
    }
    Result<Claim> claim(const ClaimRequest& r) override {
        return cut<Claim>([&] { return real_->claim(r); });
    }
    Result<bool> start(std::int64_t id) override {
        ++starts_;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return !starts_stalled_; });
        }
        return cut<bool>([&] { return real_->start(id); });
    }
    Status set_pid(std::int64_t id, std::int64_t pid) override {
        return cut<Ok>([&] { return real_->set_pid(id, pid); });
    }
    Result<bool> finish(std::int64_t id, RunState to, RunOutcome o,
                        std::string_view reason) override {
        return cut<bool>([&] { return real_->finish(id, to, o, reason); });
    }
    Result<bool> complete(std::int64_t id, RunOutcome o) override {
        return cut<bool>([&] { return real_->complete(id, o); });
    }
    Result<std::vector<std::int64_t>> renew(const std::vector<std::int64_t>& ids) override {
        return cut<std::vector<std::int64_t>>([&] { return real_->renew(ids); });
    }
    Result<std::vector<RunRecord>> expire_leases() override {
        return cut<std::vector<RunRecord>>([&] { return real_->expire_leases(); });
    }
    Result<std::optional<std::int64_t>> watermark(std::string_view job) override {
        return cut<std::optional<std::int64_t>>([&] { return real_->watermark(job); });
    }
    Result<std::vector<RunRecord>> list(const RunFilter& f) override {
        return cut<std::vector<RunRecord>>([&] { return real_->list(f); });
    }
    Result<std::vector<JobCount>> count_runs() override {
        return cut<std::vector<JobCount>>([&] { return real_->count_runs(); });
    }
    Result<std::optional<RunRecord>> get(std::int64_t id) override {
        return cut<std::optional<RunRecord>>([&] { return real_->get(id); });
    }
    Result<std::vector<RunRecord>> interrupt_unfinished(std::string_view reason) override {
        return cut<std::vector<RunRecord>>([&] { return real_->interrupt_unfinished(reason); });
    }
    Result<std::vector<RunRecord>> awaiting_recovery() override {
        return cut<std::vector<RunRecord>>([&] { return real_->awaiting_recovery(); });
    }
    Result<std::optional<RunRecord>> held_run(std::string_view job) override {
        return cut<std::optional<RunRecord>>([&] { return real_->held_run(job); });
    }
    Status set_recovery(std::int64_t id, std::string_view recovery) override {
        return cut<Ok>([&] { return real_->set_recovery(id, recovery); });
    }
    Result<std::int64_t> add_retry(std::string_view job, std::int64_t at,
                                   const std::vector<std::int64_t>& ids) override {
        return cut<std::int64_t>([&] { return real_->add_retry(job, at, ids); });
    }
    Result<std::int64_t> prune(std::int64_t before_ms, std::size_t batch) override {
        return cut<std::int64_t>([&] { return real_->prune(before_ms, batch); });
    }
    Result<bool> is_current(std::int64_t id, std::string_view owner) override {
        return cut<bool>([&] { return real_->is_current(id, owner); });
    }
    Result<bool> release(std::int64_t id) override {
        return cut<bool>([&] { return real_->release(id); });
    }

  private:
    template <typename T, typename F>
    Result<T> cut(F&& call) {
        ++calls_;
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [this] { return !stalled_; });
        }
        if (down) return Error{"postgresql://db/jobs: connect: Connection refused"};
        return call();
    }
    std::unique_ptr<Ledger> real_;
    bool shared_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stalled_ = false;
    bool starts_stalled_ = false;
    std::atomic<int> starts_{0};
    bool close_stalled_ = false;
    std::atomic<int> calls_{0};
};

}  // namespace lastcall
