// SPDX-License-Identifier: Apache-2.0
// Time zones reach lastcall as a POSIX TZ string (the TZ variable, CRON_TZ=) and as TZif bytes
// (/usr/share/zoneinfo, $TZDIR: a directory the user may point anywhere). Properties: neither
// parser crashes on any bytes; an accepted zone answers offset_at() and resolve() for instants
// across the supported range without overflow, and offsets stay within +-26 h.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lastcall/jobs/cron.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    using std::chrono::seconds;
    if (size == 0) return 0;
    // First byte: which parser. The rest: its input.
    bool tzif = data[0] & 1;
    std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
    auto zone = tzif ? cron::TimeZone::from_tzif("fuzz", bytes) : cron::TimeZone::from_posix(bytes);
    if (!zone) return 0;
    for (std::int64_t at :
         {-62135596800LL, -1LL, 0LL, 1700000000LL, 4102444800LL, 253402300799LL}) {
        cron::sys_seconds t{seconds{at}};
        auto off = zone->offset_at(t);
        if (off < seconds{-26 * 3600} || off > seconds{26 * 3600}) __builtin_trap();
        (void)zone->resolve(zone->to_local(t));
    }
    return 0;
}
