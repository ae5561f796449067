// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/utf8.hpp"

#include <cstdio>

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

namespace {

bool is_c0(unsigned char c) {
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

// A two-byte sequence C2 80..C2 9F: a C1 control.
bool is_c1(std::string_view s, std::size_t i, std::size_t len) {
    return len == 2 && static_cast<unsigned char>(s[i]) == 0xC2 &&
           static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

}  // namespace

void append_printable(std::string& out, std::string_view s) {
    char buf[8];
    for (std::size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x80 && !is_c0(c)) {  // the common case first
            out += static_cast<char>(c);
            ++i;
            continue;
        }
        bool valid = true;
        std::size_t len = c < 0x80 ? 1 : utf8_sequence(s, i, valid);
        if (c < 0x80) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else if (valid && is_c1(s, i, len)) {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
            out += buf;
        } else if (!valid) {
            for (std::size_t k = 0; k < len; ++k) {
                std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i + k]));
                out += buf;
            }
        } else {
            out.append(s.substr(i, len));
        }
        i += len;
    }
}

std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    append_printable(out, s);
    return out;
}

}  // namespace lastcall
