// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/toml_parse.hpp"

#include <algorithm>

#include "lastcall/core/utf8.hpp"

namespace lastcall {

Result<toml::table> parse_toml_document(std::string_view text, const std::string& path) {
    if (auto bad = first_invalid_utf8(text)) {
        auto line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(*bad), '\n');
        return Error{path + ":" + std::to_string(line) +
                     ": not valid UTF-8 (a TOML file must be UTF-8)"};
    }
    try {
        return toml::parse(text, path);
    } catch (const toml::parse_error& e) {
        return Error{path + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
    }
}

}  // namespace lastcall
