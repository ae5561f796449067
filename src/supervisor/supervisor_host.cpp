// SPDX-License-Identifier: Apache-2.0
// UnitHost over the running supervisor: its loop, tracker, admission and shutdown.
#include "lastcall/supervisor/supervisor_host.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cerrno>

#include "lastcall/process/process_ref.hpp"
#include "lastcall/supervisor/supervisor.hpp"

namespace lastcall {

namespace {

class LoopTimer final : public WakeTimer {
  public:
    Status arm(std::optional<MonoTime> deadline) override { return timer->arm(deadline); }
    std::optional<DeadlineTimer> timer;
};

class RealtimeTimer final : public WallTimer {
  public:
    explicit RealtimeTimer(UniqueFd fd) : fd_(std::move(fd)) {}
    int fd() const { return fd_.get(); }
    void consume() {
        std::uint64_t expirations;
        [[maybe_unused]] auto n = ::read(fd_.get(), &expirations, sizeof expirations);
    }
    Status arm(std::optional<WallTime> at) override {
        itimerspec spec{};
        if (at) {
            auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at->time_since_epoch())
                          .count();
            if (ns <= 0) ns = 1;  // all zero would disarm instead of firing now
            spec.it_value.tv_sec = ns / 1000000000;
            spec.it_value.tv_nsec = ns % 1000000000;
        }
        // Absolute on CLOCK_REALTIME: a clock step moves the fire with it, as cron expects.
        if (::timerfd_settime(fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0)
            return sys_error("timerfd_settime CLOCK_REALTIME", errno);
        return Ok{};
    }

  private:
    UniqueFd fd_;
};

class SupervisorHost final : public UnitHost {
  public:
    explicit SupervisorHost(Supervisor& sup)
        : sup_(sup),
          settings_{sup.options().grace, sup.options().drain_delay, sup.options().no_new_privs} {}

    const Clock& clock() const override { return sup_.clock(); }
    WallTime wall_now() const override { return std::chrono::system_clock::now(); }

    Result<std::unique_ptr<WakeTimer>> new_timer(std::function<void()> on_expiry) override {
        auto t = std::make_unique<LoopTimer>();
        auto* raw = t.get();
        if (auto st = watch_new_timer(sup_.loop(), t->timer,
                                      [raw, f = std::move(on_expiry)] {
                                          raw->timer->consume();
                                          f();
                                      });
            !st)
            return st.error();
        return std::unique_ptr<WakeTimer>(std::move(t));
    }

    Result<std::unique_ptr<WallTimer>> new_wall_timer(std::function<void()> on_expiry) override {
        UniqueFd fd(::timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK));
        if (!fd) return sys_error("timerfd_create CLOCK_REALTIME", errno);
        auto t = std::make_unique<RealtimeTimer>(std::move(fd));
        auto* raw = t.get();
        if (auto st = sup_.loop().watch(raw->fd(), EPOLLIN,
                                        [raw, f = std::move(on_expiry)](auto) {
                                            raw->consume();
                                            f();
                                        });
            !st)
            return st.error();
        return std::unique_ptr<WallTimer>(std::move(t));
    }

    Status watch(int fd, std::uint32_t events, std::function<void(std::uint32_t)> h) override {
        return sup_.loop().watch(fd, events, std::move(h));
    }
    void unwatch(int fd) override { sup_.loop().unwatch(fd); }
    void post(std::function<void()> task) override { sup_.loop().post(std::move(task)); }

    std::unique_ptr<UnitScope> new_scope(const std::string& unit) override {
        return make_unit_scope(sup_.tracker(), unit);
    }
    int helper_cgroup_fd() override { return sup_.tracker().spawn_cgroup_fd(); }
    SpawnResult spawn(const SpawnSpec& spec) override { return lastcall::spawn(spec); }
    bool signal(const ProcInfo& p, int sig) override { return signal_exact(p, sig); }
    void signal_child_group(pid_t pgid, int sig) override {
        if (pgid > 0) ::kill(-pgid, sig);
    }

    Admission& admission() override { return sup_.admission(); }
    const HostSettings& settings() const override { return settings_; }
    int stop_signal() const override { return sup_.stop_signal(); }
    bool stop_reaches_tree() const override { return sup_.stop_reaches_tree(); }
    void hold_drain() override { sup_.hold_drain(); }
    void release_drain() override {
        sup_.loop().post([&sup = sup_] { sup.release_drain(); });
    }
    void request_shutdown(int exit_code, std::string why) override {
        sup_.request_shutdown_soon(exit_code, std::move(why));
    }
    void record_force(ForceKind kind, std::string source, int count) override {
        sup_.record_force(kind, std::move(source), count);
    }
    UnitTree& units() override { return sup_.units(); }

  private:
    Supervisor& sup_;
    HostSettings settings_;
};

}  // namespace

std::unique_ptr<UnitHost> make_supervisor_host(Supervisor& sup) {
    return std::make_unique<SupervisorHost>(sup);
}

void attach_output(UnitOutput& output, UnitHost& host) {
    output.attach(
        [&host](int fd, std::function<void()> readable) {
            return host.watch(fd, EPOLLIN, [readable = std::move(readable)](auto) { readable(); });
        },
        [&host](int fd) { host.unwatch(fd); });
}

void finish_output(UnitOutput& output) {
    // Shared by the services and the jobs: the first to finish prints the rest, and the count of
    // what was dropped is said once.
    if (auto lost = output.finish(std::chrono::milliseconds(500)))
        spdlog::warn(
            "{} line(s) of the services' and jobs' output dropped: nothing read them in "
            "time",
            lost);
}

}  // namespace lastcall
