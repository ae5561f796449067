// SPDX-License-Identifier: Apache-2.0
// RAII for kernel descriptors: every fd lastcall opens (signalfd, timerfd, epoll, pidfd, inotify,
// pipes, sockets, files) lives in a UniqueFd, so no early return can leak one into a child.
#pragma once

#include <unistd.h>

#include <utility>

#include "lastcall/core/fd_reserve.hpp"

namespace lastcall {

class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
    UniqueFd& operator=(UniqueFd&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    ~UniqueFd() { reset(); }

    int get() const noexcept { return fd_; }
    bool valid() const noexcept { return fd_ >= 0; }
    explicit operator bool() const noexcept { return valid(); }
    int release() noexcept { return std::exchange(fd_, -1); }
    void reset(int fd = -1) noexcept {
        // close() errors are not actionable here: the descriptor is gone either way (close(2)).
        // The slot freed goes back to the stop path's reserve first, if it lent one.
        if (fd_ >= 0) {
            ::close(fd_);
            fd_reserve_refill();
        }
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

}  // namespace lastcall
