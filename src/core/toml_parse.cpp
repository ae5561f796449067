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

enum class In { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral };

// What a state made of the character at i: left for the loop to copy as it is, or handled (i has
// moved past it).
enum class Step { Copy, Handled };

// ascii_toml_text's pass over the text: where it is (i, in) and what it has written (out).
struct AsciiPass {
    AsciiPass(std::string_view t, const std::string& p) : text(t), path(p) {}

    std::string_view text;
    const std::string& path;
    In in = In::Code;
    std::string out;
    std::size_t i = 0;

    bool starts(std::size_t at, std::string_view s) const { return text.substr(at, s.size()) == s; }
    // The code point at i (well-formed: checked before), written as \UXXXXXXXX; returns its length.
    std::size_t escape() {
        bool valid = false;
        std::size_t len = utf8_sequence(text, i, valid);
        char32_t cp = static_cast<unsigned char>(text[i]) & (0xFF >> (len + 1));
        for (std::size_t k = 1; k < len; ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        char esc[16];
        std::snprintf(esc, sizeof esc, "\\U%08X", static_cast<unsigned>(cp));
        out += esc;
        return len;
    }

    Result<Step> code(char c, bool ascii) {
        if (!ascii)
            return Error{path + ":" + std::to_string(line_at(text, i)) +
                         ": a character outside ASCII is allowed only in a string or a "
                         "comment"};
        if (c == '#') {
            in = In::Comment;
        } else if (c == '"' || c == '\'') {
            bool multi = starts(i, c == '"' ? "\"\"\"" : "'''");
            in = c == '"' ? (multi ? In::MultiBasic : In::Basic)
                          : (multi ? In::MultiLiteral : In::Literal);
            out += multi ? "\"\"\"" : "\"";
            i += multi ? 3 : 1;
            return Step::Handled;
        }
        return Step::Copy;
    }

    Step comment(char c, bool ascii) {
        if (c == '\n') in = In::Code;
        if (!ascii) {
            ++i;  // dropped, byte by byte: a comment means nothing to the parser
            return Step::Handled;
        }
        return Step::Copy;
    }

    Result<Step> basic(char c, bool ascii) {
        bool multi = in == In::MultiBasic;
        if (multi && starts(i, "\"\"\"")) {
            std::size_t n = 3;  // up to two more quotes belong to the content
            while (n < 5 && i + n < text.size() && text[i + n] == '"') ++n;
            out.append(text.substr(i, n));
            i += n;
            in = In::Code;
            return Step::Handled;
        }
        if (c == '\\' && i + 1 < text.size()) {
            if (static_cast<unsigned char>(text[i + 1]) >= 0x80)
                return Error{path + ":" + std::to_string(line_at(text, i)) +
                             ": invalid escape sequence in a string"};
            out.append(text.substr(i, 2));  // an escape: copied as it is
            i += 2;
            return Step::Handled;
        }
        if (!multi && (c == '"' || c == '\n')) in = In::Code;
        if (!ascii) {
            i += escape();
            return Step::Handled;
        }
        return Step::Copy;
    }

    Step literal(char c, bool ascii) {
        bool multi = in == In::MultiLiteral;
        if (multi ? starts(i, "'''") : c == '\'') {
            std::size_t n = multi ? 3 : 1;
            if (multi)
                while (n < 5 && i + n < text.size() && text[i + n] == '\'') ++n;
            out.append(n - (multi ? 3 : 1), '\'');  // content quotes before the end
            out += multi ? "\"\"\"" : "\"";
            i += n;
            in = In::Code;
            return Step::Handled;
        }
        if (!multi && c == '\n') in = In::Code;  // unterminated: the parser says so
        if (c == '\\' || c == '"') {
            out += '\\';
            out += c;
            ++i;
            return Step::Handled;
        }
        if (!ascii) {
            i += escape();
            return Step::Handled;
        }
        return Step::Copy;
    }
};

// Debian's toml++ 3.3.0 asks is_non_ascii_horizontal_whitespace() about characters in several
// places, and that function reaches __builtin_unreachable() for U+00A1..U+0499 and
// U+2C8E..U+3087 (é among them): undefined behaviour, found by the config fuzzer under UBSan.
// So toml++ gets the document in pure ASCII, with the same meaning and the same line numbers:
// non-ASCII characters in basic strings become \U escapes; literal strings become basic strings
// (backslashes and quotes escaped); comments lose their non-ASCII characters. Outside strings and
// comments TOML 1.0 allows ASCII only: a non-ASCII character there is an error with its line.
Result<std::string> ascii_toml_text(std::string_view text, const std::string& path) {
    AsciiPass pass(text, path);
    pass.out.reserve(text.size() + text.size() / 8);
    while (pass.i < text.size()) {
        char c = text[pass.i];
        bool ascii = static_cast<unsigned char>(c) < 0x80;
        Result<Step> step = Step::Copy;
        switch (pass.in) {
            case In::Code:
                step = pass.code(c, ascii);
                break;
            case In::Comment:
                step = pass.comment(c, ascii);
                break;
            case In::Basic:
            case In::MultiBasic:
                step = pass.basic(c, ascii);
                break;
            case In::Literal:
            case In::MultiLiteral:
                step = pass.literal(c, ascii);
                break;
        }
        if (!step) return step.error();
        if (*step == Step::Handled) continue;
        pass.out += c;
        ++pass.i;
    }
    return std::move(pass.out);
}

}  // namespace

Result<toml::table> parse_toml_document(std::string_view text, const std::string& path) {
    if (auto bad = first_invalid_utf8(text))
        return Error{path + ":" + std::to_string(line_at(text, *bad)) +
                     ": not valid UTF-8 (a TOML file must be UTF-8)"};
    auto guarded = ascii_toml_text(text, path);
    if (!guarded) return guarded.error();
    try {
        return toml::parse(*guarded, path);
    } catch (const toml::parse_error& e) {
        return Error{path + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description())};
    }
}

}  // namespace lastcall
