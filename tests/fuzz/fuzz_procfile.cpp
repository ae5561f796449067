// SPDX-License-Identifier: Apache-2.0
// Procfile and .env files of `lastcall up`, written by people. Properties: no crash or exception
// on any bytes; accepted Procfile entries have a valid service name, a command and a line number
// within the file; accepted .env entries are "K=V".
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lastcall/services/services.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace lastcall;
    if (size == 0) return 0;
    std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    auto lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    if (data[0] & 1) {
        if (auto env = parse_dotenv(text, ".env"))
            for (const auto& kv : *env)
                if (kv.find('=') == std::string::npos || kv.front() == '=') __builtin_trap();
        return 0;
    }
    if (auto entries = parse_procfile(text, "Procfile"))
        for (const auto& e : *entries)
            if (!valid_service_name(e.name) || e.line < 1 || e.line > lines) __builtin_trap();
    return 0;
}
