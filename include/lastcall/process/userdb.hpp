// SPDX-License-Identifier: Apache-2.0
// User and group lookups for --user.
//
// The dynamic build asks NSS (getpwnam, getgrouplist, getgrnam), so LDAP, sssd or systemd-userdb
// users work as everywhere else on the host. The static build (LASTCALL_NO_NSS) reads /etc/passwd
// and /etc/group itself: glibc's NSS in a static binary dlopen()s the host's shared libnss_*
// modules at runtime, which in a scratch, distroless or alpine image are absent or belong to
// another libc, so the answer would depend on the image in ways nobody can see. Files only is
// predictable, and it is what a container has. Where the host's nsswitch.conf names another
// source and the .deb's dynamic twin is installed, the static binary hands the run over to it
// at the first lookup (core/twin.hpp), so the answer is NSS's. Numeric ids work in both builds.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace lastcall::userdb {

struct User {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
};

// Lookups in files of passwd(5) / group(5) format. Malformed lines are skipped, as libc does; the
// paths are parameters so the unit tests use their own files.
std::optional<User> find_user_in(const std::string& passwd_path, const std::string& name);
std::optional<User> find_uid_in(const std::string& passwd_path, uid_t uid);
std::optional<gid_t> find_group_in(const std::string& group_path, const std::string& name);
// The primary group first, then every group whose member list names the user, each once
// (getgrouplist's contract).
std::vector<gid_t> groups_of_in(const std::string& group_path, const std::string& user,
                                gid_t primary);

// What lookup_credentials uses: NSS in the dynamic build, /etc/passwd and /etc/group in the
// static one (or, during start-up, a hand-over to the twin that asks NSS).
std::optional<User> find_user(const std::string& name);
std::optional<User> find_uid(uid_t uid);
std::optional<gid_t> find_group(const std::string& name);
std::vector<gid_t> groups_of(const std::string& user, gid_t primary);

}  // namespace lastcall::userdb
