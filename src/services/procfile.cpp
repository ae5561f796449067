// SPDX-License-Identifier: Apache-2.0
// Procfile and .env parsing for `lastcall up` (the foreman/honcho formats).
#include <string>

#include "lastcall/core/utf8.hpp"
#include "lastcall/services/services.hpp"

namespace lastcall {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

// Calls f(line_number, line) for each line; stops at the first error f returns.
template <typename F>
Status each_line(std::string_view text, F&& f) {
    int number = 0;
    while (!text.empty()) {
        ++number;
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (auto st = f(number, line); !st) return st;
    }
    return Ok{};
}

Error at(const std::string& path, int line, const std::string& message) {
    return Error{path + ":" + std::to_string(line) + ": " + message};
}

}  // namespace

Result<std::vector<ProcfileEntry>> parse_procfile(std::string_view text, const std::string& path) {
    std::vector<ProcfileEntry> out;
    auto st = each_line(text, [&](int number, std::string_view raw) -> Status {
        std::string_view line = trim(raw);
        if (line.empty() || line.front() == '#') return Ok{};
        auto colon = line.find(':');
        if (colon == std::string_view::npos)
            return at(path, number, "expected 'name: command', found no ':'");
        std::string name(trim(line.substr(0, colon)));
        std::string command(trim(line.substr(colon + 1)));
        if (!valid_service_name(name))
            return at(path, number,
                      "invalid process name '" + printable(name) +
                          "' (use letters, digits, '_', '-', '.')");
        if (command.empty()) return at(path, number, "process '" + name + "' has no command");
        for (const auto& e : out)
            if (e.name == name)
                return at(
                    path, number,
                    "process '" + name + "' is already defined on line " + std::to_string(e.line));
        out.push_back({name, command, number});
        return Ok{};
    });
    if (!st) return st.error();
    if (out.empty()) return Error{path + ": no processes defined"};
    return out;
}

Result<std::vector<std::string>> parse_dotenv(std::string_view text, const std::string& path) {
    std::vector<std::string> out;
    auto st = each_line(text, [&](int number, std::string_view raw) -> Status {
        std::string_view line = trim(raw);
        if (line.empty() || line.front() == '#') return Ok{};
        if (line.substr(0, 7) == "export ") line = trim(line.substr(7));
        auto eq = line.find('=');
        if (eq == std::string_view::npos) return at(path, number, "expected KEY=value");
        std::string key(trim(line.substr(0, eq)));
        if (key.empty() || key.find_first_of(" \t'\"") != std::string::npos)
            return at(path, number, "invalid variable name '" + key + "'");
        std::string_view v = trim(line.substr(eq + 1));
        std::string value;
        if (!v.empty() && v.front() == '\'') {
            auto close = v.find('\'', 1);
            if (close == std::string_view::npos)
                return at(path, number, key + ": unterminated single quote");
            value = std::string(v.substr(1, close - 1));
        } else if (!v.empty() && v.front() == '"') {
            std::size_t i = 1;
            bool closed = false;
            for (; i < v.size(); ++i) {
                char c = v[i];
                if (c == '"') {
                    closed = true;
                    break;
                }
                if (c == '\\' && i + 1 < v.size()) {
                    char n = v[++i];
                    value += n == 'n' ? '\n' : n == 't' ? '\t' : n;
                } else {
                    value += c;
                }
            }
            if (!closed) return at(path, number, key + ": unterminated double quote");
        } else {
            // Unquoted: a " #" starts a comment, as in foreman and docker compose.
            auto hash = v.find(" #");
            value = std::string(trim(v.substr(0, hash)));
        }
        out.push_back(key + "=" + value);
        return Ok{};
    });
    if (!st) return st.error();
    return out;
}

std::vector<std::string> procfile_argv(const std::string& line) {
    auto simple = [&] {
        char quote = 0;
        for (std::size_t i = 0; i < line.size(); ++i) {
            char c = line[i];
            if (quote) {
                if (c == quote)
                    quote = 0;
                else if (c == '\\' && quote == '"')
                    ++i;
                continue;
            }
            if (c == '\\') {
                ++i;
            } else if (c == '\'' || c == '"') {
                quote = c;
            } else if (c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '\n') {
                return false;
            }
        }
        auto start = line.find_first_not_of(" \t");
        if (start == std::string::npos) return false;
        std::string first = line.substr(start, line.find_first_of(" \t", start) - start);
        // `exec A=1 cmd` would run a program named "A=1"; keywords open compound commands;
        // the shell's own builtins (exit, cd, wait...) are not programs to exec.
        if (first.find('=') != std::string::npos) return false;
        for (const char* word :
             {"if",       "for",      "while",   "until", "case",  "{",       "!",     "exec",
              "[[",       "function", "select",  "time",  "exit",  "return",  "cd",    "export",
              "set",      "unset",    "shift",   "trap",  "eval",  "source",  ".",     ":",
              "wait",     "read",     "ulimit",  "umask", "alias", "unalias", "break", "continue",
              "readonly", "times",    "getopts", "hash",  "jobs",  "fg",      "bg",    "local"})
            if (first == word) return false;
        return true;
    };
    return {"/bin/sh", "-c", simple() ? "exec " + line : line};
}

}  // namespace lastcall
