// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/json.hpp"

#include "lastcall/core/utf8.hpp"

#include <cstdio>

namespace lastcall {

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
