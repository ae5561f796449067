// SPDX-License-Identifier: Apache-2.0
// A single-threaded epoll loop over descriptors (signalfd, timerfd, inotify, pipes, sockets).
// There is no tick: when nothing happens, lastcall sleeps in epoll_wait(-1).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "lastcall/core/clock.hpp"
#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

class EventLoop {
  public:
    using Handler = std::function<void(std::uint32_t events)>;

    static Result<EventLoop> create();

    Status watch(int fd, std::uint32_t events, Handler handler);
    void unwatch(int fd);
    // Runs `task` after the current batch of events, in the order posted: a handler that must
    // not re-enter another part mid-update (a service asking for the shutdown from inside its
    // reap) posts the call instead of making it.
    void post(std::function<void()> task) { posted_.push_back(std::move(task)); }
    // Waits for one batch of events (not at all while tasks are posted), dispatches them, then
    // runs the posted tasks. Returns an error on a fatal epoll error.
    Status run_once();
    // Runs the tasks posted so far. run_once calls it after each batch of events; a task posted
    // outside any event (while lastcall sets up, before the first wait) is run by the caller
    // before the first wait, where "after the current event" is the end of the set-up.
    void run_posted();

  private:
    explicit EventLoop(UniqueFd epfd) : epfd_(std::move(epfd)) {}
    UniqueFd epfd_;
    std::map<int, Handler> handlers_;
    std::deque<std::function<void()>> posted_;
};

// One timerfd holding the nearest deadline (CLOCK_MONOTONIC, absolute), disarmed when none.
class DeadlineTimer {
  public:
    static Result<DeadlineTimer> create();
    Status arm(std::optional<MonoTime> deadline);
    // Reads the expiration count so the fd stops being readable.
    void consume();
    int fd() const { return fd_.get(); }

  private:
    explicit DeadlineTimer(UniqueFd fd) : fd_(std::move(fd)) {}
    UniqueFd fd_;
};

// Creates a DeadlineTimer in `slot` and watches it on `loop`: on_expiry runs when it fires (and
// reads the expiration with slot->consume()). The slot must outlive the watch.
Status watch_new_timer(EventLoop& loop, std::optional<DeadlineTimer>& slot,
                       std::function<void()> on_expiry);

}  // namespace lastcall
