// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/toml_parse.hpp"

#include <algorithm>
#include <cstdio>

#include "lastcall/core/utf8.hpp"

namespace lastcall {

namespace {

long line_at(std::string_view text, std::size_t offset) {
    return 1 + std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n');
}

// Debian's toml++ 3.3.0 asks is_non_ascii_horizontal_whitespace() about characters in a few
// places, and that function reaches __builtin_unreachable() for U+00A1..U+0499 and
// U+2C8E..U+3087 (é among them): undefined behaviour, found by the config fuzzer under UBSan.
// Those places are: anything outside strings and comments (where TOML 1.0 allows ASCII only),
// the character after a backslash in a multi-line basic string, and the first character after
// a line-ending backslash's whitespace. This pass refuses the first two (they are not valid
// TOML) and writes the third as the \uXXXX escape it is equivalent to.
Result<std::string> guard_toml_text(std::string_view text, const std::string& path) {
    enum class In { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral };
    In in = In::Code;
    std::string out;
    out.reserve(text.size());
    auto at = [&](std::size_t i, std::string_view what) {
        return Error{path + ":" + std::to_string(line_at(text, i)) + ": " + std::string(what)};
    };
    auto starts = [&](std::size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
    for (std::size_t i = 0; i < text.size();) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        switch (in) {
            case In::Code:
                if (c >= 0x80)
                    return at(i,
                              "a character outside ASCII is allowed only in a string or a comment");
                if (c == '#') in = In::Comment;
                if (c == '"' || c == '\'') {
                    bool multi = starts(i, c == '"' ? "\"\"\"" : "'''");
                    in = c == '"' ? (multi ? In::MultiBasic : In::Basic)
                                  : (multi ? In::MultiLiteral : In::Literal);
                    std::size_t n = multi ? 3 : 1;
                    out.append(text.substr(i, n));
                    i += n;
                    continue;
                }
                break;
            case In::Comment:
                if (c == '\n') in = In::Code;
                break;
            case In::Basic:
            case In::Literal:
                if (c == '\\' && in == In::Basic && i + 1 < text.size()) {
                    out.append(text.substr(i, 2));
                    i += 2;
                    continue;
                }
                if (c == (in == In::Basic ? '"' : '\'') || c == '\n') in = In::Code;
                break;
            case In::MultiLiteral:
                if (starts(i, "'''")) {
                    std::size_t n = 3;
                    while (n < 5 && i + n < text.size() && text[i + n] == '\'') ++n;
                    out.append(text.substr(i, n));
                    i += n;
                    in = In::Code;
                    continue;
                }
                break;
            case In::MultiBasic:
                if (starts(i, "\"\"\"")) {
                    std::size_t n = 3;
                    while (n < 5 && i + n < text.size() && text[i + n] == '"') ++n;
                    out.append(text.substr(i, n));
                    i += n;
                    in = In::Code;
                    continue;
                }
                if (c == '\\' && i + 1 < text.size()) {
                    unsigned char next = static_cast<unsigned char>(text[i + 1]);
                    if (next >= 0x80) return at(i, "invalid escape sequence in a string");
                    std::size_t j = i + 1;
                    while (j < text.size() && (text[j] == ' ' || text[j] == '\t' ||
                                               text[j] == '\r' || text[j] == '\n'))
                        ++j;
                    bool line_ending = j > i + 1 && text.substr(i + 1, j - i - 1).find('\n') !=
                                                        std::string_view::npos;
                    out.append(text.substr(i, j - i));
                    i = j;
                    if (line_ending && i < text.size() &&
                        static_cast<unsigned char>(text[i]) >= 0x80) {
                        bool valid = false;
                        std::size_t len = utf8_sequence(text, i, valid);
                        char32_t cp = static_cast<unsigned char>(text[i]) & (0xFF >> (len + 1));
                        for (std::size_t k = 1; k < len; ++k)
                            cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
                        char esc[16];
                        std::snprintf(esc, sizeof esc, "\\U%08X", static_cast<unsigned>(cp));
                        out += esc;
                        i += len;
                    }
                    continue;
                }
                break;
        }
        out += static_cast<char>(c);
        ++i;
    }
    return out;
}

}  // namespace

Result<toml::table> parse_toml_document(std::string_view text, const std::string& path) {
    if (auto bad = first_invalid_utf8(text))
        return Error{path + ":" + std::to_string(line_at(text, *bad)) +
                     ": not valid UTF-8 (a TOML file must be UTF-8)"};
    auto guarded = guard_toml_text(text, path);
    if (!guarded) return guarded.error();
    try {
        return toml::parse(*guarded, path);
    } catch (const toml::parse_error& e) {
        return Error{path + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
    }
}

}  // namespace lastcall
