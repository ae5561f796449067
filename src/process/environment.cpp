// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/environment.hpp"

#include <algorithm>

extern char** environ;

namespace lastcall {

namespace {

bool inherits(UnitKind kind, std::string_view key) {
    if (key == "NOTIFY_SOCKET") return false;
    bool main_only = key == "LISTEN_FDS" || key == "LISTEN_PID" || key == "LISTEN_FDNAMES" ||
                     key == "WATCHDOG_USEC" || key == "WATCHDOG_PID";
    if (main_only && kind != UnitKind::Main) return false;
    if (key.starts_with("LASTCALL_") && kind == UnitKind::Job) return false;
    return true;
}

}  // namespace

Environment Environment::inherited(UnitKind kind) {
    Environment env;
    std::size_t count = 0;
    while (environ[count]) ++count;
    env.vars_.reserve(count);
    for (char** e = environ; *e; ++e) {
        std::string_view kv(*e);
        auto eq = kv.find('=');
        if (eq == std::string_view::npos) continue;
        if (inherits(kind, kv.substr(0, eq))) env.set(kv);
    }
    return env;
}

Environment Environment::from(const std::vector<std::string>& entries) {
    Environment env;
    for (const auto& kv : entries) env.set(kv);
    return env;
}

void Environment::set(std::string_view key, std::string_view value) {
    auto it =
        std::find_if(vars_.begin(), vars_.end(), [&](const auto& v) { return v.first == key; });
    if (it != vars_.end())
        it->second = value;
    else
        vars_.emplace_back(key, value);
}

void Environment::set(std::string_view entry) {
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) return;
    set(entry.substr(0, eq), entry.substr(eq + 1));
}

void Environment::unset(std::string_view key) {
    std::erase_if(vars_, [&](const auto& v) { return v.first == key; });
}

const std::string* Environment::get(std::string_view key) const {
    for (const auto& v : vars_)
        if (v.first == key) return &v.second;
    return nullptr;
}

std::vector<std::string> Environment::entries() const {
    std::vector<std::string> out;
    out.reserve(vars_.size());
    for (const auto& [k, v] : vars_) out.push_back(k + "=" + v);
    return out;
}

}  // namespace lastcall
