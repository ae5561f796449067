// SPDX-License-Identifier: Apache-2.0
// A UnitHost and a TeardownHost without processes, for the orchestration's unit tests
// (ServiceManager, JobScheduler) and the supervisor's teardown (Teardown): spawns make fake
// processes, signals are recorded, a fake process ends when the test calls exit(), and time moves
// only when the test advances the FakeClock, firing the timers whose deadline it passes in
// deadline order (the shutdown's own deadline among them, once a Teardown is attached). Nothing
// here sleeps, forks or signals a real process.
#pragma once

#include <poll.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lastcall/supervisor/supervisor.hpp"
#include "lastcall/supervisor/teardown.hpp"
#include "lastcall/supervisor/unit_host.hpp"

namespace lastcall::test {

class FakeHost;

struct FakeProc {
    pid_t pid = 0;
    pid_t ppid = 1;  // its parent (the fake lastcall is 1)
    pid_t pgid = 0;  // its process group: a spawned unit leads its own (setsid)
    std::vector<std::string> argv;
    std::string scope;  // the unit it was spawned into ("" for a helper such as a probe)
    std::vector<std::pair<int, MonoTime>> signals;  // every signal, with the fake time it came
    bool alive = true;
    bool killed = false;  // by its scope's kill (SIGKILL / cgroup.kill)
};

class FakeHost final : public UnitHost, public TeardownHost {
  public:
    FakeHost() { wall_ = WallTime{std::chrono::seconds{1767225600}}; }  // 2026-01-01T00:00Z

    // -- what the test drives
    // The component whose reaped() hears of fake exits (without a Teardown).
    void deliver_to(SupervisorComponent* c) { component_ = c; }
    // The whole shutdown on this host: exits are reaped through the teardown (its record, then
    // every component), the shutdown's deadline fires as the supervisor's timer would, and the
    // calls UnitHost queues for the supervisor (hold and release the drain, request the
    // shutdown, record a force) reach the teardown's state machine.
    void attach(Teardown& t) { teardown_ = &t; }
    // Before the teardown goes: the main unit is in its UnitTree.
    void detach() {
        main_unit_.reset();
        teardown_ = nullptr;
    }
    // The main command: a process in no unit's scope, stopped through its own unit (UnitRole::
    // Main), as the supervisor stops it through its pidfd.
    pid_t start_main(const std::string& argv0) {
        FakeProc p;
        p.pid = next_pid_++;
        p.pgid = p.pid;
        p.argv = {argv0};
        procs_[p.pid] = p;
        main_pid_ = p.pid;
        main_unit_ = std::make_unique<Unit>(
            units(), "main", clock_,
            [this] {
                std::vector<ProcInfo> out;
                if (procs_.at(main_pid_).alive) out.push_back(info(main_pid_));
                return out;
            },
            Unit::Freeze{}, [this](const ProcInfo& i, int sig) { return signal(i, sig); },
            UnitPolicy{UnitRole::Main, {}, 0});
        return p.pid;
    }
    // A termination signal reaches lastcall (the supervisor's on_signal), and the loop's turn
    // ends.
    SignalOutcome deliver(int sig) {
        auto outcome = teardown_->shutdown().on_signal(sig);
        run_posted();
        teardown_->check_tree_gone();
        return outcome;
    }
    lastcall::Scope kill_scope = lastcall::Scope::Tree;
    // Moves the clock (and the wall clock with it) to now + d, firing on the way every timer
    // whose deadline is passed, at its deadline, in order. A timer a callback arms within the
    // span fires too.
    void advance(std::chrono::milliseconds d) {
        MonoTime end = clock_.now() + d;
        for (;;) {
            FakeWake* next = nullptr;
            for (auto* t : wakes_)
                if (t->at && *t->at <= end && (!next || *t->at < *next->at)) next = t;
            auto due = teardown_ ? teardown_->shutdown().next_deadline() : std::nullopt;
            if (due && *due <= end && (!next || *due <= *next->at)) {
                move_to(*due);
                teardown_->shutdown().on_timer();
                run_posted();
                teardown_->check_tree_gone();
                continue;
            }
            if (!next) break;
            if (*next->at > clock_.now()) move_to(*next->at);
            next->at.reset();
            next->fire();
            run_posted();
        }
        move_to(end);
    }
    // The wall clock reaches the next whole minute: a `* * * * *` job fires. Its Unix seconds.
    std::int64_t next_minute() {
        auto minute = std::chrono::floor<std::chrono::minutes>(wall_) + std::chrono::minutes(1);
        set_wall(minute);
        return std::chrono::duration_cast<std::chrono::seconds>(minute.time_since_epoch()).count();
    }
    // Jumps the wall clock to `at` and fires the wall timer if it is due (a job's fire time).
    void set_wall(WallTime at) {
        wall_ = at;
        for (auto* t : walls_)
            if (t->at && *t->at <= wall_) {
                t->at.reset();
                t->fire();
                run_posted();
            }
    }
    // The fake process ends with a wait status; its unit hears of it through reaped().
    void exit(pid_t pid, int status) {
        auto& p = procs_.at(pid);
        p.alive = false;
        for (auto& [other, c] : procs_)
            if (c.ppid == pid) c.ppid = 1;  // orphans are reparented to lastcall, the subreaper
        Reaped r{pid, status, std::nullopt};
        if (!teardown_) {
            if (component_) component_->reaped(r);
            run_posted();
            return;
        }
        // What the supervisor's sweep does with each reaped child.
        teardown_->reaped(r, teardown_->shutdown().state() == State::Forcing);
        if (pid == main_pid_) {
            if (main_unit_) main_unit_->gone();
            teardown_->shutdown().on_main_exit();
        }
        run_posted();
        teardown_->check_tree_gone();
    }
    // Every process its scope's kill reached ends of SIGKILL (the kernel's part of the kill).
    void reap_killed() {
        std::vector<pid_t> dead;
        for (const auto& [pid, p] : procs_)
            if (p.alive && p.killed) dead.push_back(pid);
        for (pid_t pid : dead) exit(pid, SIGKILL);  // a wait status: killed by signal 9
    }
    // A process the unit's leader forked (a worker, a daemon): a member of the same scope.
    pid_t fork_child(pid_t parent) {
        FakeProc child;
        child.pid = next_pid_++;
        child.argv = {"child-of-" + std::to_string(parent)};
        child.ppid = parent;
        child.pgid = procs_.at(parent).pgid;
        child.scope = procs_.at(parent).scope;
        procs_[child.pid] = child;
        return child.pid;
    }
    // The process leaves its parent's group for one of its own (setpgid(0, 0), a daemon's setsid).
    void new_group(pid_t pid) { procs_.at(pid).pgid = pid; }
    // The tasks the loop would run after the current event (request_shutdown, release_drain).
    // Until none is left: a ledger answer may post the next call (the ledger worker runs its
    // calls as posted tasks here, LedgerWorker::Mode::OnLoop).
    void run_posted() {
        while (!posted_.empty()) {
            auto batch = std::move(posted_);
            posted_.clear();
            for (auto& t : batch) t();
        }
    }

    // -- what the test observes
    const FakeProc& proc(pid_t pid) const { return procs_.at(pid); }
    // The process as an enumeration would see it (for the root's UnitTree::claimed()).
    ProcInfo info(pid_t pid) const {
        ProcInfo i;
        i.pid = pid;
        i.ppid = procs_.at(pid).ppid;
        i.pgid = procs_.at(pid).pgid;
        i.start = static_cast<unsigned long long>(pid);
        i.state = 'S';
        return i;
    }
    std::vector<pid_t> spawned_argv0(const std::string& argv0) const {
        std::vector<pid_t> out;
        for (const auto& [pid, p] : procs_)
            if (!p.argv.empty() && p.argv[0] == argv0) out.push_back(pid);
        return out;
    }
    // The live process whose argv[0] is `argv0` (the current instance of a service).
    std::optional<pid_t> live(const std::string& argv0) const {
        for (const auto& [pid, p] : procs_)
            if (p.alive && !p.argv.empty() && p.argv[0] == argv0) return pid;
        return std::nullopt;
    }
    bool got(pid_t pid, int sig) const {
        const auto& s = procs_.at(pid).signals;
        return std::any_of(s.begin(), s.end(), [&](auto& e) { return e.first == sig; });
    }
    int count(pid_t pid, int sig) const {
        const auto& s = procs_.at(pid).signals;
        return static_cast<int>(
            std::count_if(s.begin(), s.end(), [&](auto& e) { return e.first == sig; }));
    }
    std::optional<MonoTime> when(pid_t pid, int sig) const {
        for (const auto& [s, at] : procs_.at(pid).signals)
            if (s == sig) return at;
        return std::nullopt;
    }
    MonoTime now() const { return clock_.now(); }
    int drain_holds = 0;
    int drain_releases = 0;
    std::optional<int> shutdown_requested;
    struct Force {
        ForceKind kind;
        std::string source;
        int count;
    };
    std::vector<Force> forces;
    std::vector<SpawnSpec> spawns;
    // The next spawns fail (exec of a missing command) while positive.
    int fail_spawns = 0;
    HostSettings host_settings;
    int tree_stop_signal = SIGTERM;
    // A SIGKILL marks the process killed, for reap_killed() (the kernel's part of the kill).
    bool signal_kills = true;
    int shutdowns_begun = 0;
    int readiness_offs = 0;
    std::vector<std::pair<int, lastcall::Scope>> forwarded;
    // How long each signal takes on the fake clock: a slow machine, a fork storm (a stop pass
    // over many members then outlasts its budget).
    std::chrono::milliseconds signal_cost{0};

    // -- UnitHost
    const Clock& clock() const override { return clock_; }
    WallTime wall_now() const override { return wall_; }
    Result<std::unique_ptr<WakeTimer>> new_timer(std::function<void()> on_expiry) override {
        auto t = std::make_unique<FakeWake>(wakes_, std::move(on_expiry));
        return std::unique_ptr<WakeTimer>(std::move(t));
    }
    Result<std::unique_ptr<WallTimer>> new_wall_timer(std::function<void()> on_expiry) override {
        auto t = std::make_unique<FakeWall>(walls_, std::move(on_expiry));
        return std::unique_ptr<WallTimer>(std::move(t));
    }
    Status watch(int fd, std::uint32_t, std::function<void(std::uint32_t)> h) override {
        watched_[fd] = std::move(h);
        return Ok{};
    }
    void unwatch(int fd) override { watched_.erase(fd); }
    // What the loop's epoll would do for the descriptors watched (the ledger worker's eventfd):
    // waits up to `timeout_ms` for one to be readable and runs its handlers. false: none was.
    bool pump_watched(int timeout_ms) {
        std::vector<pollfd> fds;
        for (const auto& [fd, h] : watched_) fds.push_back(pollfd{fd, POLLIN, 0});
        if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return false;
        for (const auto& p : fds)
            if (p.revents && watched_.count(p.fd)) watched_[p.fd](EPOLLIN);
        run_posted();
        return true;
    }
    void post(std::function<void()> task) override { posted_.push_back(std::move(task)); }
    std::unique_ptr<UnitScope> new_scope(const std::string& unit) override {
        return std::make_unique<Scope>(this, unit, next_scope_fd_++);
    }
    int helper_cgroup_fd() override { return -1; }
    SpawnResult spawn(const SpawnSpec& spec) override {
        spawns.push_back(spec);
        SpawnResult r;
        if (fail_spawns > 0) {
            --fail_spawns;
            r.failure =
                SpawnFailure{SpawnStage::Exec, ENOENT, spec.argv.empty() ? "" : spec.argv[0], {}};
            return r;
        }
        FakeProc p;
        p.pid = next_pid_++;
        p.pgid = p.pid;
        p.argv = spec.argv;
        for (const auto& [name, fd] : scope_fds_)
            if (fd == spec.cgroup_fd) p.scope = name;
        procs_[p.pid] = p;
        r.child.emplace();
        r.child->pid = p.pid;
        return r;
    }
    bool signal(const ProcInfo& info, int sig) override {
        if (sig == SIGKILL && signal_kills) {
            auto it = procs_.find(info.pid);
            if (it != procs_.end()) it->second.killed = true;
        }
        auto it = procs_.find(info.pid);
        if (it == procs_.end() || !it->second.alive) return false;
        it->second.signals.emplace_back(sig, clock_.now());
        move_to(clock_.now() + signal_cost);  // no timer fires inside a pass
        return true;
    }
    void signal_child_group(pid_t pgid, int sig) override {
        auto it = procs_.find(pgid);
        if (it != procs_.end() && it->second.alive)
            it->second.signals.emplace_back(sig, clock_.now());
    }
    Admission& admission() override { return admission_; }
    const HostSettings& settings() const override { return host_settings; }
    int stop_signal() const override {
        return teardown_ ? teardown_->shutdown().stop_signal() : tree_stop_signal;
    }
    bool stop_reaches_tree() const override { return effective_scope() == lastcall::Scope::Tree; }
    void hold_drain() override {
        ++drain_holds;
        if (teardown_) teardown_->shutdown().hold_drain();
    }
    void release_drain() override {
        posted_.push_back([this] {
            ++drain_releases;
            if (!teardown_) return;
            teardown_->shutdown().release_drain();
            teardown_->check_tree_gone();
        });
    }
    void request_shutdown(int exit_code, std::string /*why*/) override {
        posted_.push_back([this, exit_code] {
            if (!shutdown_requested) shutdown_requested = exit_code;
            if (!teardown_ || teardown_->shutdown().state() != State::Running) return;
            teardown_->shutdown().on_main_exit();
            teardown_->check_tree_gone();
        });
    }
    void record_force(ForceKind kind, std::string source, int count) override {
        forces.push_back({kind, source, count});
        if (teardown_) teardown_->record_force(kind, std::move(source), count);
    }
    UnitTree& units() override { return teardown_ ? teardown_->units() : units_; }

    // -- TeardownHost (clock, admission and post are UnitHost's above)
    Tracker& tracker() override { return tracker_; }
    Children peek_children() const override {
        for (const auto& [pid, p] : procs_)
            if (p.alive) return Children::Running;
        return Children::None;  // a fake exit is its reap: no zombie waits
    }
    bool signal_exact(const ProcInfo& p, int sig) override { return signal(p, sig); }
    bool signal_listed(const ProcInfo& p, int sig, pid_t, int first) override {
        if (first) (void)signal(p, first);
        return signal(p, sig);
    }
    bool kill(pid_t target, int sig) override {
        if (target <= 0 || !procs_.count(target)) return false;  // no whole group here
        return signal(info(target), sig);
    }
    std::optional<pid_t> whole_group_target() const override { return std::nullopt; }
    bool run_queue_crowded() const override { return false; }
    std::string wchan(pid_t) const override { return "fake_wchan"; }
    std::optional<ProcInfo> proc_stat(pid_t pid) const override {
        if (!procs_.count(pid) || !procs_.at(pid).alive) return std::nullopt;
        return info(pid);
    }
    bool is_pid1() const override { return false; }
    std::vector<ProcInfo> descendants_outside(const std::vector<pid_t>&) override { return {}; }
    bool proc_lists_namespace() const override { return false; }
    UniqueFd open_last_pid() override { return {}; }  // no birth line: every process is a member
    void shutdown_begun() override { ++shutdowns_begun; }
    void readiness_off() override { ++readiness_offs; }
    void start_pre_stop() override { teardown_->shutdown().on_pre_stop_done(); }
    void forward(int sig, lastcall::Scope scope) override { forwarded.emplace_back(sig, scope); }
    pid_t main_pid() const override { return main_pid_; }
    lastcall::Scope effective_scope() const override {
        bool main_gone = main_pid_ < 0 || !procs_.at(main_pid_).alive;
        return kill_scope == lastcall::Scope::Child && main_gone ? lastcall::Scope::Tree
                                                                 : kill_scope;
    }
    bool main_alive() const override {
        return main_unit_ && main_unit_->state() == UnitState::Running &&
               procs_.at(main_pid_).alive;
    }
    bool main_signalled() const override { return main_unit_ && main_unit_->signalled_any(); }
    bool stop_main(int sig, MonoTime deadline) override {
        return main_unit_->stop(sig, deadline) > 0;
    }
    std::vector<Unit*> own_units() override { return {main_unit_.get()}; }
    // Nothing is recorded for a report here: every stop signal is the first.
    UnitTree units_{[](const ProcInfo&, int) { return true; }};

  private:
    // A timer the test fires: it registers itself in its host's list while it lives.
    template <typename Base, typename Time>
    class FakeTimer final : public Base {
      public:
        FakeTimer(std::vector<FakeTimer*>& list, std::function<void()> f)
            : fire(std::move(f)), list_(list) {
            list_.push_back(this);
        }
        ~FakeTimer() override { std::erase(list_, this); }
        Status arm(std::optional<Time> t) override {
            at = t;
            return Ok{};
        }
        std::function<void()> fire;
        std::optional<Time> at;

      private:
        std::vector<FakeTimer*>& list_;
    };
    using FakeWake = FakeTimer<WakeTimer, MonoTime>;
    using FakeWall = FakeTimer<WallTimer, WallTime>;
    class Scope final : public UnitScope {
      public:
        Scope(FakeHost* h, std::string n, int fd) : host_(h), name_(std::move(n)), fd_(fd) {
            host_->scope_fds_[name_] = fd_;
        }
        std::string_view kind() const override { return "fake"; }
        std::vector<ProcInfo> members() override {
            std::vector<ProcInfo> out;
            for (const auto& [pid, p] : host_->procs_)
                if (p.alive && p.scope == name_) {
                    ProcInfo info;
                    info.pid = pid;
                    info.ppid = p.ppid;
                    info.pgid = p.pgid;
                    info.start = static_cast<unsigned long long>(pid);
                    info.state = 'S';
                    out.push_back(info);
                }
            return out;
        }
        int spawn_cgroup_fd() const override { return fd_; }
        int kill(const MemberFilter& record) override {
            int n = 0;
            for (auto& p : members()) {
                record(p);
                auto& fp = host_->procs_.at(p.pid);
                fp.signals.emplace_back(SIGKILL, host_->clock_.now());
                fp.killed = true;
                ++n;
            }
            return n;
        }

      private:
        FakeHost* host_;
        std::string name_;
        int fd_;
    };

    // The whole tree as an enumeration would find it: every live fake process.
    class FakeTracker final : public Tracker {
      public:
        explicit FakeTracker(FakeHost* h) : host_(h) {}
        std::string_view name() const override { return "fake"; }
        std::vector<ProcInfo> members() override {
            std::vector<ProcInfo> out;
            for (const auto& [pid, p] : host_->procs_)
                if (p.alive) out.push_back(host_->info(pid));
            return out;
        }
        int signal_all(int sig, const MemberFilter& filter, int /*max_passes*/) override {
            int n = 0;
            for (const auto& p : members())
                if (filter(p) && host_->signal(p, sig)) ++n;
            return n;
        }
        int kill_all(const MemberFilter& filter, int max_passes) override {
            return signal_all(SIGKILL, filter, max_passes);
        }
        Result<std::unique_ptr<UnitScope>> make_scope(const std::string& unit) override {
            return host_->new_scope(unit);
        }

      private:
        FakeHost* host_;
    };

    void move_to(MonoTime t) {
        if (t <= clock_.now()) return;  // a costly signal already took the clock past t
        auto d = t - clock_.now();
        clock_.advance(d);
        wall_ += std::chrono::duration_cast<WallTime::duration>(d);
    }

    FakeClock clock_;
    WallTime wall_;
    Admission admission_;
    SupervisorComponent* component_ = nullptr;
    std::vector<FakeWake*> wakes_;
    std::vector<FakeWall*> walls_;
    std::map<pid_t, FakeProc> procs_;
    std::map<std::string, int> scope_fds_;
    std::vector<std::function<void()>> posted_;
    std::map<int, std::function<void(std::uint32_t)>> watched_;
    pid_t next_pid_ = 1000;
    Teardown* teardown_ = nullptr;
    FakeTracker tracker_{this};
    pid_t main_pid_ = -1;
    std::unique_ptr<Unit> main_unit_;
    int next_scope_fd_ = 5000;
};

}  // namespace lastcall::test
