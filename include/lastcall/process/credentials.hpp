// SPDX-License-Identifier: Apache-2.0
// Who a unit runs as, and the one path by which a child gives up lastcall's rights.
//
// Parsing (parent, before fork): USER[:GROUP] where each part is a name or a decimal id. Ids are
// strict: digits only, no sign, no spaces, at most 4294967294, because (uid_t)-1 means
// "leave unchanged" to setresuid(2) and anything wider used to wrap to 0 (root). An empty part, an
// unknown name or a name with control characters is an error, never a fallback to root.
//
// Dropping (child, between fork and exec, async-signal-safe): supplementary groups (the user's
// groups from the group database, root's cleared), gid, uid, then every capability set cleared
// (bounding, inheritable, permitted, effective, ambient) when the target is not root, then the
// check that none of it can be undone, then optional no_new_privs. Every unit and helper goes
// through drop_privileges(): main command, services and their readiness probes, jobs, crontab
// lines, verify commands, the pre-stop hook.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/process/userdb.hpp"

namespace lastcall {

struct Credentials {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // the complete supplementary list set in the child
    std::string name;           // for messages
};

// The user database as the parser sees it; system_userdb() is NSS (or the files in the static
// build). The fuzz target and the unit tests pass their own.
struct UserDb {
    std::function<std::optional<userdb::User>(const std::string&)> find_user;
    std::function<std::optional<userdb::User>(uid_t)> find_uid;
    std::function<std::optional<gid_t>(const std::string&)> find_group;
    std::function<std::vector<gid_t>(const std::string&, gid_t)> groups_of;
};
const UserDb& system_userdb();

// The largest id accepted: (uid_t)-1 is setresuid's "unchanged", never a real user.
constexpr std::uint32_t kMaxId = 4294967294u;

// A decimal id, strictly: [0-9]+ with a value in 0..kMaxId. nullopt for anything else.
std::optional<std::uint32_t> parse_numeric_id(std::string_view text);

// USER[:GROUP]. A numeric USER with a passwd entry takes that entry's group and supplementary
// groups; without one, its gid is the uid and it has no other group. With :GROUP, the gid is
// GROUP and it is the only group. Errors are one line without the option or key name (the
// caller adds "--user 'x': " or "FILE:LINE: services.a.user: ").
Result<Credentials> parse_credentials(std::string_view spec, const UserDb& db);
Result<gid_t> parse_group(std::string_view group, const UserDb& db);

// parse_credentials with the system database.
Result<Credentials> lookup_credentials(const std::string& spec);

// A unit's own `user`/`group` keys over the default (--user): `user` replaces the default
// entirely; `group` alone keeps the default user (or lastcall's own uid) with that one group.
std::optional<Credentials> unit_credentials(const std::optional<Credentials>& own_user,
                                            std::optional<gid_t> own_group,
                                            const std::optional<Credentials>& fallback);

enum class SpawnStage : int;

// In the child, after fork and before exec: async-signal-safe system calls only, no allocation.
// false with errno set and `failed` naming the step that failed; the child must then _exit.
bool drop_privileges(const Credentials& c, bool no_new_privs, SpawnStage& failed);
// no_new_privs alone, for a child that keeps lastcall's ids.
bool set_no_new_privs(SpawnStage& failed);

}  // namespace lastcall
