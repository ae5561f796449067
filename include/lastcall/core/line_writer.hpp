// SPDX-License-Identifier: Apache-2.0
// Lines to a descriptor lastcall shares with its children (stderr for the log, stdout for the
// services' prefixed output and a peer's own lines) that never block the loop: written without
// blocking (a new open file description of the pipe or tty with O_NONBLOCK, or
// send(MSG_DONTWAIT) on a socket), what does not fit waits in a backlog of at most `bound`
// bytes, and whole lines beyond that are dropped and counted. A reader that stops reading
// (`lastcall up | less` scrolled back, a stuck log shipper) then costs lines, never the stop.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lastcall/core/fd.hpp"

namespace lastcall {

class LineWriter {
  public:
    LineWriter(int target_fd, std::size_t bound) : target_(target_fd), bound_(bound) {}
    LineWriter(const LineWriter&) = delete;
    LineWriter& operator=(const LineWriter&) = delete;

    // Once, before the first line: looks at what the target is. Without it the target's own
    // description is written (it may block).
    void open();
    // One whole line (or several), its newline included.
    void write_line(std::string_view line);
    // Writes what it can of the backlog now.
    void flush_some();
    // At exit: tries to write the backlog for at most max_wait; what is left is counted lost.
    void flush(std::chrono::milliseconds max_wait);
    std::uint64_t lost() const { return lost_; }
    // Lines in the backlog, not yet out.
    std::uint64_t waiting() const;

  private:
    int fd() const { return fd_.get() >= 0 ? fd_.get() : target_; }
    std::size_t put(std::string_view data);
    void queue(std::string_view data, bool partial = false);

    int target_;
    std::size_t bound_;
    UniqueFd fd_;
    bool socket_ = false;
    std::string backlog_;
    std::uint64_t lost_ = 0;
};

}  // namespace lastcall
