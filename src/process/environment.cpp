// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/environment.hpp"

#include <algorithm>
#include <iterator>

extern char** environ;

namespace lastcall {

namespace {

bool g_ledger_credentials_withheld = false;

bool inherits(UnitKind kind, std::string_view key) {
    if (key == "NOTIFY_SOCKET") return false;
    if (g_ledger_credentials_withheld &&
        std::find(std::begin(kLedgerCredentials), std::end(kLedgerCredentials), key) !=
            std::end(kLedgerCredentials))
        return false;
    bool main_only = key == "LISTEN_FDS" || key == "LISTEN_PID" || key == "LISTEN_FDNAMES" ||
                     key == "WATCHDOG_USEC" || key == "WATCHDOG_PID";
    if (main_only && kind != UnitKind::Main) return false;
    if (key.starts_with("LASTCALL_") && kind == UnitKind::Job) return false;
    return true;
}

// The entry "KEY=..." of `key` in `vars`.
template <typename Vars>
auto find_key(Vars& vars, std::string_view key) {
    return std::find_if(vars.begin(), vars.end(), [&](const std::string& kv) {
        return kv.size() > key.size() && kv[key.size()] == '=' && kv.starts_with(key);
    });
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
        if (eq == std::string_view::npos || eq == 0) continue;
        if (inherits(kind, kv.substr(0, eq))) env.put(kv.substr(0, eq), std::string(kv));
    }
    return env;
}

void Environment::withhold_ledger_credentials() {
    g_ledger_credentials_withheld = true;
}

Environment Environment::from(const std::vector<std::string>& entries) {
    Environment env;
    for (const auto& kv : entries) env.set(kv);
    return env;
}

void Environment::put(std::string_view key, std::string kv) {
    if (auto it = find_key(vars_, key); it != vars_.end())
        *it = std::move(kv);
    else
        vars_.push_back(std::move(kv));
}

void Environment::set(std::string_view key, std::string_view value) {
    std::string kv;
    kv.reserve(key.size() + 1 + value.size());
    kv.append(key).append(1, '=').append(value);
    put(key, std::move(kv));
}

void Environment::set(std::string_view entry) {
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) return;
    put(entry.substr(0, eq), std::string(entry));  // already in the form kept
}

void Environment::unset(std::string_view key) {
    if (auto it = find_key(vars_, key); it != vars_.end()) vars_.erase(it);
}

std::optional<std::string_view> Environment::get(std::string_view key) const& {
    auto it = find_key(vars_, key);
    if (it == vars_.end()) return std::nullopt;
    return std::string_view(*it).substr(key.size() + 1);
}

}  // namespace lastcall
