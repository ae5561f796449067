// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/utf8.hpp"

namespace lastcall {

std::size_t utf8_sequence(std::string_view s, std::size_t i, bool& valid) {
    auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = b(i);
    std::size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        valid = true;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        valid = false;
        return 1;
    }
    std::size_t len = 1;
    for (std::size_t k = 0; k < need; ++k, ++len) {
        if (i + len >= s.size()) {
            valid = false;
            return len;
        }
        unsigned char next = b(i + len);
        unsigned char min = k == 0 ? lo : 0x80, max = k == 0 ? hi : 0xBF;
        if (next < min || next > max) {
            valid = false;
            return len;
        }
    }
    valid = true;
    return len;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        bool valid = false;
        std::size_t len = utf8_sequence(s, i, valid);
        if (!valid) return i;
        i += len;
    }
    return std::nullopt;
}

}  // namespace lastcall
