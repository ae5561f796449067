// SPDX-License-Identifier: Apache-2.0
// What a cron schedule's time zone costs (issue 19.18): lastcall's TZif reader against Howard
// Hinnant's date/tz (Debian's libhowardhinnant-date-dev, built with USE_OS_TZDB=1, which reads
// the system's /usr/share/zoneinfo). One process per measurement: the first lookup of a zone
// and the UTC offset at a fixed instant, its wall time and the process's peak RSS after it.
//
//   tz_cost lastcall|date ZONE   ->  "<microseconds> <VmHWM kB> <offset seconds>"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#ifdef WITH_DATE
#include <date/tz.h>
#else
#include "lastcall/jobs/cron.hpp"
#endif

static long vm_hwm_kb() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: tz_cost ZONE\n");
        return 2;
    }
    using namespace std::chrono;
    const sys_seconds instant{seconds{1764754516}};  // 2025-12-03T09:35:16Z
    auto t0 = steady_clock::now();
    long offset = 0;
#ifdef WITH_DATE
    const date::time_zone* zone = date::locate_zone(argv[1]);
    offset = static_cast<long>(zone->get_info(instant).offset.count());
#else
    auto zone = lastcall::cron::TimeZone::load(argv[1]);
    if (!zone) {
        std::fprintf(stderr, "%s\n", zone.error().message.c_str());
        return 1;
    }
    offset = static_cast<long>(zone->offset_at(instant).count());
#endif
    auto us = duration_cast<microseconds>(steady_clock::now() - t0).count();
    std::printf("%lld %ld %ld\n", static_cast<long long>(us), vm_hwm_kb(), offset);
    return 0;
}
