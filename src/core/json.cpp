// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/json.hpp"

#include <cstdio>

namespace lastcall {

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or of its maximal ill-formed subpart (the
// bytes that one U+FFFD replaces, as Unicode 15 section 3.9 recommends and Python's
// errors="replace" does): `valid` says which. Table 3-7 of the standard: the second byte's
// range depends on the first (no overlong forms, no surrogates, nothing above U+10FFFF).
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

}  // namespace

void json_quote(std::string& out, std::string_view s) {
    out += '"';
    for (std::size_t i = 0; i < s.size();) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"':
                out += "\\\"";
                ++i;
                continue;
            case '\\':
                out += "\\\\";
                ++i;
                continue;
            case '\n':
                out += "\\n";
                ++i;
                continue;
            case '\r':
                out += "\\r";
                ++i;
                continue;
            case '\t':
                out += "\\t";
                ++i;
                continue;
            default:
                break;
        }
        if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
            ++i;
            continue;
        }
        // UTF-8 (a name like "déjà") goes through as it is; bytes that are not UTF-8 (process
        // names and argv are arbitrary bytes) become U+FFFD, so the report stays valid JSON.
        bool valid = false;
        std::size_t len = utf8_sequence(s, i, valid);
        if (valid)
            out.append(s.substr(i, len));
        else
            out += "\\ufffd";
        i += len;
    }
    out += '"';
}

void JsonWriter::separate() {
    if (need_comma_) out_ += ',';
    need_comma_ = true;
}

JsonWriter& JsonWriter::begin_object() {
    separate();
    out_ += '{';
    need_comma_ = false;
    return *this;
}
JsonWriter& JsonWriter::end_object() {
    out_ += '}';
    need_comma_ = true;
    return *this;
}
JsonWriter& JsonWriter::begin_array() {
    separate();
    out_ += '[';
    need_comma_ = false;
    return *this;
}
JsonWriter& JsonWriter::end_array() {
    out_ += ']';
    need_comma_ = true;
    return *this;
}
JsonWriter& JsonWriter::key(std::string_view k) {
    separate();
    json_quote(out_, k);
    out_ += ':';
    need_comma_ = false;
    return *this;
}
JsonWriter& JsonWriter::value(std::string_view s) {
    separate();
    json_quote(out_, s);
    return *this;
}
JsonWriter& JsonWriter::value(long long v) {
    separate();
    out_ += std::to_string(v);
    return *this;
}
JsonWriter& JsonWriter::value(bool b) {
    separate();
    out_ += b ? "true" : "false";
    return *this;
}
JsonWriter& JsonWriter::null() {
    separate();
    out_ += "null";
    return *this;
}

}  // namespace lastcall
