// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/userdb.hpp"

#include "lastcall/core/read_file.hpp"
#include "lastcall/core/twin.hpp"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <charconv>
#include <string_view>

namespace lastcall::userdb {

namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    for (;;) {
        auto pos = line.find(sep, start);
        out.push_back(line.substr(start, pos == std::string_view::npos ? pos : pos - start));
        if (pos == std::string_view::npos) return out;
        start = pos + 1;
    }
}

template <typename Id>
std::optional<Id> parse_id(std::string_view s) {
    unsigned long v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    if (v > static_cast<unsigned long>(static_cast<Id>(-1))) return std::nullopt;
    return static_cast<Id>(v);
}

// Calls f(fields) for each line of path with at least min_fields ':'-separated fields; stops
// when f returns true. Comment and blank lines are skipped (they appear in hand-written images).
template <typename F>
void scan(const std::string& path, std::size_t min_fields, F&& f) {
    auto text = read_file(path);
    if (!text) return;
    std::string_view rest(*text);
    while (!rest.empty()) {
        std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        if (line.empty() || line[0] == '#') continue;
        auto fields = split(line, ':');
        if (fields.size() >= min_fields && f(fields)) return;
    }
}

}  // namespace

std::optional<User> find_user_in(const std::string& passwd_path, const std::string& name) {
    std::optional<User> found;
    // name:password:uid:gid:gecos:home:shell
    scan(passwd_path, 4, [&](const std::vector<std::string_view>& f) {
        if (f[0] != name) return false;
        auto uid = parse_id<uid_t>(f[2]);
        auto gid = parse_id<gid_t>(f[3]);
        if (!uid || !gid) return false;
        found = User{name, *uid, *gid};
        return true;
    });
    return found;
}

std::optional<User> find_uid_in(const std::string& passwd_path, uid_t uid) {
    std::optional<User> found;
    scan(passwd_path, 4, [&](const std::vector<std::string_view>& f) {
        auto u = parse_id<uid_t>(f[2]);
        auto gid = parse_id<gid_t>(f[3]);
        if (!u || !gid || *u != uid) return false;
        found = User{std::string(f[0]), *u, *gid};
        return true;
    });
    return found;
}

std::optional<gid_t> find_group_in(const std::string& group_path, const std::string& name) {
    std::optional<gid_t> found;
    // name:password:gid:member,member
    scan(group_path, 3, [&](const std::vector<std::string_view>& f) {
        if (f[0] != name) return false;
        found = parse_id<gid_t>(f[2]);
        return found.has_value();
    });
    return found;
}

std::vector<gid_t> groups_of_in(const std::string& group_path, const std::string& user,
                                gid_t primary) {
    std::vector<gid_t> groups{primary};
    scan(group_path, 4, [&](const std::vector<std::string_view>& f) {
        auto gid = parse_id<gid_t>(f[2]);
        if (!gid || std::find(groups.begin(), groups.end(), *gid) != groups.end()) return false;
        for (auto member : split(f[3], ','))
            if (member == user) {
                groups.push_back(*gid);
                break;
            }
        return false;
    });
    return groups;
}

#ifdef LASTCALL_NO_NSS

namespace {

// Where this host's NSS could answer otherwise than the files (LDAP, sssd, systemd's users, or
// a supplementary group from one of them), the run goes to the dynamic twin, which asks NSS, if
// it is installed (core/twin.hpp); a scratch image has no twin and its files are the answer.
void hand_over_if_nss_knows_more() {
    static const bool beyond = [] {
        auto conf = read_file("/etc/nsswitch.conf");
        return conf && twin::nss_beyond_files(*conf);
    }();
    if (beyond) twin::hand_over("NSS names more user databases than /etc/passwd and /etc/group");
}

}  // namespace

std::optional<User> find_user(const std::string& name) {
    hand_over_if_nss_knows_more();
    return find_user_in("/etc/passwd", name);
}

std::optional<User> find_uid(uid_t uid) {
    hand_over_if_nss_knows_more();
    return find_uid_in("/etc/passwd", uid);
}

std::optional<gid_t> find_group(const std::string& name) {
    hand_over_if_nss_knows_more();
    return find_group_in("/etc/group", name);
}

std::vector<gid_t> groups_of(const std::string& user, gid_t primary) {
    hand_over_if_nss_knows_more();
    return groups_of_in("/etc/group", user, primary);
}

#else

std::optional<User> find_user(const std::string& name) {
    const passwd* pw = ::getpwnam(name.c_str());
    if (!pw) return std::nullopt;
    return User{pw->pw_name, pw->pw_uid, pw->pw_gid};
}

std::optional<User> find_uid(uid_t uid) {
    const passwd* pw = ::getpwuid(uid);
    if (!pw) return std::nullopt;
    return User{pw->pw_name, pw->pw_uid, pw->pw_gid};
}

std::optional<gid_t> find_group(const std::string& name) {
    const group* gr = ::getgrnam(name.c_str());
    if (!gr) return std::nullopt;
    return gr->gr_gid;
}

std::vector<gid_t> groups_of(const std::string& user, gid_t primary) {
    int ngroups = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(ngroups));
    while (::getgrouplist(user.c_str(), primary, groups.data(), &ngroups) < 0)
        groups.resize(static_cast<std::size_t>(ngroups));
    groups.resize(static_cast<std::size_t>(ngroups));
    return groups;
}

#endif

}  // namespace lastcall::userdb
