// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/credentials.hpp"

#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "lastcall/process/spawner.hpp"

namespace lastcall {

namespace {

// Longer than any name a user database holds (LOGIN_NAME_MAX is 256); also bounds what a
// hostile value makes lastcall pass to NSS.
constexpr std::size_t kMaxName = 256;

// A name that NSS could be asked about: no control characters (an embedded NUL would make
// getpwnam see a shorter name), no spaces, no separators.
bool plausible_name(std::string_view s) {
    if (s.empty() || s.size() > kMaxName) return false;
    for (unsigned char c : s)
        if (c <= 0x20 || c == 0x7f || c == ':' || c == '/' || c == ',') return false;
    return true;
}

bool all_digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

std::string quoted(std::string_view s) {
    std::string out = "'";
    for (unsigned char c : s) {
        if (c < 0x20 || c == 0x7f) {
            static constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "'";
}

Result<std::uint32_t> numeric_id(std::string_view text, const char* what) {
    if (auto id = parse_numeric_id(text)) return *id;
    return Error{std::string(what) + " id " + quoted(text) + " is out of range (0.." +
                 std::to_string(kMaxId) + ")"};
}

}  // namespace

const UserDb& system_userdb() {
    static const UserDb db{
        [](const std::string& n) { return userdb::find_user(n); },
        [](uid_t u) { return userdb::find_uid(u); },
        [](const std::string& n) { return userdb::find_group(n); },
        [](const std::string& n, gid_t g) { return userdb::groups_of(n, g); },
    };
    return db;
}

std::optional<std::uint32_t> parse_numeric_id(std::string_view text) {
    // Digits only and at most 10 of them (after leading zeros), so the sum never overflows.
    if (!all_digits(text)) return std::nullopt;
    while (text.size() > 1 && text.front() == '0') text.remove_prefix(1);
    if (text.size() > 10) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : text) v = v * 10 + static_cast<std::uint64_t>(c - '0');
    if (v > kMaxId) return std::nullopt;
    return static_cast<std::uint32_t>(v);
}

Result<gid_t> parse_group(std::string_view group, const UserDb& db) {
    if (group.empty()) return Error{"empty group name"};
    if (all_digits(group)) {
        auto id = numeric_id(group, "group");
        if (!id) return id.error();
        return static_cast<gid_t>(*id);
    }
    if (!plausible_name(group)) return Error{"invalid group name " + quoted(group)};
    if (auto gid = db.find_group(std::string(group))) {
        if (*gid > kMaxId) return Error{"group " + quoted(group) + " has an invalid gid"};
        return *gid;
    }
    return Error{"no such group " + quoted(group)};
}

Result<Credentials> parse_credentials(std::string_view spec, const UserDb& db) {
    std::string_view user = spec, group;
    bool has_group = false;
    if (auto colon = spec.find(':'); colon != std::string_view::npos) {
        user = spec.substr(0, colon);
        group = spec.substr(colon + 1);
        has_group = true;
    }
    if (user.empty()) return Error{"empty user name"};
    Credentials c;
    std::optional<userdb::User> entry;
    if (all_digits(user)) {
        auto id = numeric_id(user, "user");
        if (!id) return id.error();
        c.uid = static_cast<uid_t>(*id);
        // Numeric ids without a passwd entry are allowed (common in containers).
        entry = db.find_uid(c.uid);
        c.gid = entry ? entry->gid : static_cast<gid_t>(c.uid);
        c.name = entry ? entry->name : std::string(user);
    } else {
        if (!plausible_name(user)) return Error{"invalid user name " + quoted(user)};
        entry = db.find_user(std::string(user));
        if (!entry) return Error{"no such user " + quoted(user)};
        c.uid = entry->uid;
        c.gid = entry->gid;
        c.name = entry->name;
    }
    if (c.uid > kMaxId || c.gid > kMaxId)
        return Error{"user " + quoted(user) + " has an invalid uid or gid"};
    if (has_group) {
        auto gid = parse_group(group, db);
        if (!gid) return gid.error();
        c.gid = *gid;
        c.groups = {c.gid};
        return c;
    }
    // initgroups(3)'s list: the primary group and every group naming the user. Computed here,
    // in the parent, because the lookup is not async-signal-safe.
    if (entry) c.groups = db.groups_of(entry->name, c.gid);
    if (c.groups.empty()) c.groups = {c.gid};
    return c;
}

Result<Credentials> lookup_credentials(const std::string& spec) {
    return parse_credentials(spec, system_userdb());
}

std::optional<Credentials> unit_credentials(const std::optional<Credentials>& own_user,
                                            std::optional<gid_t> own_group,
                                            const std::optional<Credentials>& fallback) {
    std::optional<Credentials> c = own_user ? own_user : fallback;
    if (!own_group) return c;
    if (!c) c = Credentials{::geteuid(), 0, {}, std::to_string(::geteuid())};
    c->gid = *own_group;
    c->groups = {*own_group};
    return c;
}

// ---- In the child: system calls only. ----

namespace {

bool fail_with(SpawnStage& failed, SpawnStage stage, int err) {
    failed = stage;
    errno = err;
    return false;
}

// Inheritable, permitted and effective sets to zero. Only ever lowers them, so it needs no
// privilege.
bool clear_capability_sets() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    return ::syscall(SYS_capset, &header, data) == 0;
}

bool no_capabilities_left() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return false;
    for (const auto& d : data)
        if (d.effective || d.permitted || d.inheritable) return false;
    return true;
}

bool has_effective(int cap) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return false;
    return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

}  // namespace

bool set_no_new_privs(SpawnStage& failed) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return fail_with(failed, SpawnStage::NoNewPrivs, errno);
    return true;
}

bool drop_privileges(const Credentials& c, bool no_new_privs, SpawnStage& failed) {
    const bool to_root = c.uid == 0;
    if (!to_root && has_effective(CAP_SETPCAP)) {
        // The bounding set first, while CAP_SETPCAP is still there: a setuid-root or
        // file-capability binary the unit execs gains nothing from lastcall's rights. Without
        // CAP_SETPCAP (a runtime that dropped it) the bounding set is what the runtime left,
        // which is the runtime's choice (docs/security.md).
        for (int cap = 0; cap < 64; ++cap) {
            int has = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
            if (has < 0) break;  // EINVAL: past the kernel's last capability
            if (has == 1 && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
                return fail_with(failed, SpawnStage::Capabilities, errno);
        }
    }
    // Order matters: groups and gid while still privileged, uid last. The raw system calls, as
    // glibc's own posix_spawn child makes them: glibc's wrappers apply a credential change to
    // every thread of the process they believe they are in (a signal to each, and a wait for its
    // answer), and a child made by a raw clone3 believes it is lastcall, whose ledger worker
    // thread (jobs/ledger_worker.hpp) is not in the child. The kernel's calls change this one
    // thread, which is the whole child.
    if (::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) < 0)
        return fail_with(failed, SpawnStage::Setgroups, errno);
    if (::syscall(SYS_setresgid, c.gid, c.gid, c.gid) < 0)
        return fail_with(failed, SpawnStage::Setgid, errno);
    if (::syscall(SYS_setresuid, c.uid, c.uid, c.uid) < 0)
        return fail_with(failed, SpawnStage::Setuid, errno);
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    if (::getresuid(&ru, &eu, &su) != 0 || ::getresgid(&rg, &eg, &sg) != 0 || ru != c.uid ||
        eu != c.uid || su != c.uid || rg != c.gid || eg != c.gid || sg != c.gid)
        return fail_with(failed, SpawnStage::VerifyIds, EPERM);
    if (::getgroups(0, nullptr) != static_cast<int>(c.groups.size()))
        return fail_with(failed, SpawnStage::VerifyIds, EPERM);
    if (!to_root) {
        // setuid() away from root already empties these unless securebits say otherwise
        // (SECBIT_KEEP_CAPS, SECBIT_NO_SETUID_FIXUP set by whoever started lastcall); cleared
        // explicitly so that the result does not depend on them.
        if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
            return fail_with(failed, SpawnStage::Capabilities, errno);
        if (!clear_capability_sets()) return fail_with(failed, SpawnStage::Capabilities, errno);
        // Dropping from root must be irreversible.
        if (::setuid(0) == 0 || !no_capabilities_left())
            return fail_with(failed, SpawnStage::VerifyIds, EPERM);
    }
    if (no_new_privs) return set_no_new_privs(failed);
    return true;
}

}  // namespace lastcall
