// SPDX-License-Identifier: Apache-2.0
// A TCP port written in a config, an .env file or the environment: the one reader of it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace lastcall {

// 1-65535 in decimal, the whole text; none otherwise (empty, a sign of trouble, out of range).
inline std::optional<int> parse_port(const std::string& text) {
    if (text.empty()) return std::nullopt;
    char* end = nullptr;
    long port = std::strtol(text.c_str(), &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) return std::nullopt;
    return static_cast<int>(port);
}

}  // namespace lastcall
