// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/instance.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>

namespace lastcall {

const std::string& instance_id() {
    static const std::string id = [] {
        std::uint64_t r = 0;
        // GRND_NONBLOCK: at early boot the pool may not be initialised, and an init must not
        // block on it; the clock and pid then still make a collision between two instances
        // that also collide on mkdir (which is exclusive) vanishingly unlikely.
        if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
            r = static_cast<std::uint64_t>(
                    std::chrono::steady_clock::now().time_since_epoch().count()) ^
                (static_cast<std::uint64_t>(::getpid()) << 32);
        // "<pid>-<16 hex digits>", without printf: the only printf of a plain start would map
        // glibc's vfprintf and its digit tables (two page faults) for this one line.
        char buf[32];
        char* end = std::to_chars(buf, buf + 12, static_cast<int>(::getpid())).ptr;
        *end++ = '-';
        for (int shift = 60; shift >= 0; shift -= 4)
            *end++ = "0123456789abcdef"[(r >> shift) & 0xf];
        return std::string(buf, end);
    }();
    return id;
}

}  // namespace lastcall
