// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/json.hpp"

#include <cstdio>

namespace lastcall {

void json_quote(std::string& out, std::string_view s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                // Control bytes and non-ASCII are escaped byte-wise: process names and argv are
                // arbitrary bytes, and the report must stay valid JSON whatever they contain.
                if (c < 0x20 || c >= 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
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
