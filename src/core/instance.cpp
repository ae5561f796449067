// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/instance.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

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
        char buf[64];
        std::snprintf(buf, sizeof buf, "%d-%016llx", static_cast<int>(::getpid()),
                      static_cast<unsigned long long>(r));
        return std::string(buf);
    }();
    return id;
}

}  // namespace lastcall
