// SPDX-License-Identifier: Apache-2.0
// parse_credentials reads --user and the `user`/`group` keys of services and jobs, as root,
// from values a less trusted party may have written. Properties: it never crashes; whatever it
// accepts is a real id (at most 4294967294, so never wrapped to 0 and never setresuid's
// "unchanged"); an accepted numeric user is exactly the number written; nothing with a control
// character or an empty part is accepted; parse_numeric_id agrees with decimal arithmetic.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lastcall/process/credentials.hpp"

namespace {

using namespace lastcall;

const UserDb& fake_db() {
    static const UserDb db{
        [](const std::string& n) -> std::optional<userdb::User> {
            if (n == "root") return userdb::User{"root", 0, 0};
            if (n == "nobody") return userdb::User{"nobody", 65534, 65534};
            if (n == "app") return userdb::User{"app", 1000, 1000};
            return std::nullopt;
        },
        [](uid_t u) -> std::optional<userdb::User> {
            if (u == 0) return userdb::User{"root", 0, 0};
            if (u == 1000) return userdb::User{"app", 1000, 1000};
            return std::nullopt;
        },
        [](const std::string& n) -> std::optional<gid_t> {
            if (n == "root") return 0;
            if (n == "daemon") return 1;
            if (n == "app") return 1000;
            return std::nullopt;
        },
        [](const std::string& n, gid_t primary) {
            std::vector<gid_t> g{primary};
            if (n == "app") g.push_back(27);
            return g;
        },
    };
    return db;
}

bool digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

// The value of a digit string, saturated above 2^40 (more than any id).
std::uint64_t value_of(std::string_view s) {
    std::uint64_t v = 0;
    for (char c : s) {
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
        if (v > (1ULL << 40)) return 1ULL << 40;
    }
    return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);

    auto id = parse_numeric_id(text);
    if (id) {
        if (!digits(text) || *id > kMaxId || value_of(text) != *id) __builtin_trap();
        if (parse_numeric_id(std::to_string(*id)) != id) __builtin_trap();
    } else if (digits(text) && value_of(text) <= kMaxId) {
        __builtin_trap();  // a valid id refused
    }

    auto c = parse_credentials(text, fake_db());
    if (!c) {
        if (c.error().message.empty() || c.error().message.find('\n') != std::string::npos)
            __builtin_trap();  // errors are one line
        return 0;
    }
    for (unsigned char ch : text)
        if (ch < 0x20 || ch == 0x7f) __builtin_trap();
    std::string_view user = text.substr(0, text.find(':'));
    if (user.empty()) __builtin_trap();
    if (text.find(':') != std::string_view::npos && text.substr(text.find(':') + 1).empty())
        __builtin_trap();
    if (c->uid > kMaxId || c->gid > kMaxId || c->groups.empty()) __builtin_trap();
    for (gid_t g : c->groups)
        if (g > kMaxId) __builtin_trap();
    if (digits(user) && c->uid != value_of(user)) __builtin_trap();
    return 0;
}
