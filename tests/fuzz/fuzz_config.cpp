// SPDX-License-Identifier: Apache-2.0
// The TOML config (--config): [services.*] and [jobs.*] tables, and plain crontabs (--crontab).
// Properties: no crash and no escaping exception (toml++ throws on syntax errors unless caught)
// on any bytes; accepted services can be ordered or refused cleanly; accepted jobs carry a
// schedule.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lastcall/jobs/config.hpp"
#include "lastcall/services/services.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    if (size == 0) return 0;
    std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    switch (data[0] % 3) {
        case 0:
            if (auto services = parse_services_toml(text, "fuzz.toml"))
                (void)order_by_dependencies(*services);
            break;
        case 1:
            if (auto jobs = parse_jobs_toml(text, "fuzz.toml"))
                for (const auto& j : jobs->jobs)
                    if (!j.schedule) __builtin_trap();
            break;
        case 2:
            if (auto jobs = parse_crontab(text, "crontab"))
                for (const auto& j : *jobs)
                    if (!j.schedule) __builtin_trap();
            break;
    }
    return 0;
}
