// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/event_loop.hpp"
#include "lastcall/core/loop_turn.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <string>

namespace lastcall {

Result<EventLoop> EventLoop::create() {
    UniqueFd fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!fd) return sys_error("epoll_create1", errno);
    return EventLoop(std::move(fd));
}

Status EventLoop::watch(int fd, std::uint32_t events, Handler handler) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
        return sys_error("epoll_ctl ADD fd " + std::to_string(fd), errno);
    handlers_[fd] = std::move(handler);
    return Ok{};
}

void EventLoop::unwatch(int fd) {
    // Removal cannot usefully fail: the fd is either registered or already closed.
    ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
    handlers_.erase(fd);
}

namespace {
std::uint64_t turns = 0;  // the loop's thread only
}  // namespace

std::uint64_t loop_turn() {
    return turns;
}

Status EventLoop::run_once() {
    epoll_event events[16];
    int n = ::epoll_wait(epfd_.get(), events, 16, posted_.empty() ? -1 : 0);
    ++turns;
    if (n < 0) {
        if (errno != EINTR) return sys_error("epoll_wait", errno);
        n = 0;  // SIGSTOP/SIGCONT of lastcall itself interrupts the wait
    }
    for (int i = 0; i < n; ++i) {
        auto it = handlers_.find(events[i].data.fd);
        // A handler earlier in this batch may have unwatched this fd.
        if (it == handlers_.end()) continue;
        auto handler = it->second;  // copy: the handler may unwatch itself
        handler(events[i].events);
    }
    run_posted();
    return Ok{};
}

void EventLoop::run_posted() {
    // Only what was posted before this turn's tasks ran: a task that posts again (a chain of
    // re-entries) yields to the next epoll_wait, so it cannot starve the descriptors.
    auto batch = std::move(posted_);
    posted_.clear();
    for (auto& task : batch) task();
}

Result<DeadlineTimer> DeadlineTimer::create() {
    UniqueFd fd(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!fd) return sys_error("timerfd_create", errno);
    return DeadlineTimer(std::move(fd));
}

Status DeadlineTimer::arm(std::optional<MonoTime> deadline) {
    itimerspec spec{};
    if (deadline) {
        // steady_clock is CLOCK_MONOTONIC on Linux, so its epoch is the timerfd's.
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline->time_since_epoch())
                      .count();
        if (ns <= 0) ns = 1;  // an all-zero it_value would disarm instead of firing now
        spec.it_value.tv_sec = ns / 1000000000;
        spec.it_value.tv_nsec = ns % 1000000000;
    }
    if (::timerfd_settime(fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0)
        return sys_error("timerfd_settime", errno);
    return Ok{};
}

void DeadlineTimer::consume() {
    std::uint64_t expirations;
    // EAGAIN just means it was already consumed.
    [[maybe_unused]] auto r = ::read(fd_.get(), &expirations, sizeof expirations);
}

Status watch_new_timer(EventLoop& loop, std::optional<DeadlineTimer>& slot,
                       std::function<void()> on_expiry) {
    auto timer = DeadlineTimer::create();
    if (!timer) return timer.error();
    slot.emplace(std::move(*timer));
    auto st = loop.watch(slot->fd(), EPOLLIN, [f = std::move(on_expiry)](auto) { f(); });
    // An empty slot says "no timer": a caller that tries again must not arm one nobody watches.
    if (!st) slot.reset();
    return st;
}

}  // namespace lastcall
