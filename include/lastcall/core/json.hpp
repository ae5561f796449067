// SPDX-License-Identifier: Apache-2.0
// Just enough JSON writing for the report and the json log format. No parsing here.
#pragma once

#include <string>
#include <string_view>

namespace lastcall {

// Appends s as a quoted JSON string (control characters and invalid bytes escaped).
void json_quote(std::string& out, std::string_view s);

class JsonWriter {
  public:
    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    JsonWriter& key(std::string_view k);
    JsonWriter& value(std::string_view s);
    JsonWriter& value(const char* s) { return value(std::string_view(s)); }
    JsonWriter& value(long long v);
    JsonWriter& value(int v) { return value(static_cast<long long>(v)); }
    JsonWriter& value(bool b);
    JsonWriter& null();
    template <typename T>
    JsonWriter& field(std::string_view k, const T& v) {
        key(k);
        return value(v);
    }
    const std::string& str() const { return out_; }

  private:
    void separate();
    std::string out_;
    bool need_comma_ = false;
};

}  // namespace lastcall
