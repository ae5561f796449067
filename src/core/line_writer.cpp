// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/line_writer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace lastcall {

void LineWriter::open() {
    struct stat st {};
    if (::fstat(target_, &st) != 0) return;
    if (S_ISSOCK(st.st_mode)) {
        socket_ = true;
        return;
    }
    // O_NONBLOCK on the shared descriptor itself would change the description the children
    // share: their own writes would fail with EAGAIN. A new description of the same pipe or tty
    // does not. A regular file does not block (and a new description would lose O_APPEND's
    // offset).
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))
        fd_.reset(::open(("/proc/self/fd/" + std::to_string(target_)).c_str(),
                         O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
}

void LineWriter::write_line(std::string_view line) {
    flush_some();
    if (!backlog_.empty()) return queue(line);
    std::size_t n = put(line);
    if (n < line.size()) queue(line.substr(n), true);
}

void LineWriter::flush_some() {
    while (!backlog_.empty()) {
        std::size_t n = put(backlog_);
        backlog_.erase(0, n);
        if (n == 0) return;
    }
}

void LineWriter::flush(std::chrono::milliseconds max_wait) {
    auto deadline = std::chrono::steady_clock::now() + max_wait;
    flush_some();
    while (!backlog_.empty() && std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd(), POLLOUT, 0};
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) <= 0) break;
        flush_some();
    }
    if (!backlog_.empty()) {
        // Count what never made it out, whole lines and the tail of a partial one.
        lost_ += waiting();
        backlog_.clear();
    }
}

std::uint64_t LineWriter::waiting() const {
    return static_cast<std::uint64_t>(std::count(backlog_.begin(), backlog_.end(), '\n'));
}

std::size_t LineWriter::put(std::string_view data) {
    ssize_t n;
    do {
        n = socket_ ? ::send(target_, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                    : ::write(fd(), data.data(), data.size());
    } while (n < 0 && errno == EINTR);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
}

// `partial`: the rest of a line already begun, which must follow it whole (dropping it would
// glue two lines together), so it may overshoot the bound by one line.
void LineWriter::queue(std::string_view data, bool partial) {
    if (!partial && backlog_.size() + data.size() > bound_) {
        ++lost_;
        return;
    }
    backlog_.append(data);
}

}  // namespace lastcall
