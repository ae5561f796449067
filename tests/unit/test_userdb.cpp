// SPDX-License-Identifier: Apache-2.0
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "lastcall/process/userdb.hpp"

using namespace lastcall;

namespace {
// The static build's --user reads these files itself; the parser is tested on the shapes that
// appear in real images (comments, blank lines, NIS leftovers, trailing fields missing).
std::string write_temp(const std::string& content) {
    char tmpl[] = "/tmp/lastcall-userdb-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(tmpl) << content;
    return tmpl;
}

const char* kPasswd =
    "# generated\n"
    "root:x:0:0:root:/root:/bin/sh\n"
    "\n"
    "broken:x:notanumber:5::/:/bin/false\n"
    "short:x:7\n"
    "+nisuser\n"
    "app:x:1000:1001:App:/srv/app:/bin/sh\n"
    "nohome:x:1002:1002";
const char* kGroup =
    "root:x:0:\n"
    "app:x:1001:\n"
    "wheel:x:10:root,app\n"
    "docker:x:999:other,app\n"
    "again:x:10:app\n"
    "apple:x:2000:apples,xapp\n"
    "bad:x:abc:app\n"
    "lonely:x:3000";
}  // namespace

TEST_CASE("userdb: users are found by exact name, malformed lines skipped") {
    auto passwd = write_temp(kPasswd);
    auto app = userdb::find_user_in(passwd, "app");
    REQUIRE(app);
    CHECK(app->name == "app");
    CHECK(app->uid == 1000);
    CHECK(app->gid == 1001);
    auto root = userdb::find_user_in(passwd, "root");
    REQUIRE(root);
    CHECK(root->uid == 0);
    CHECK(userdb::find_user_in(passwd, "nohome")->uid == 1002);
    CHECK_FALSE(userdb::find_user_in(passwd, "ap"));
    CHECK_FALSE(userdb::find_user_in(passwd, "broken"));
    CHECK_FALSE(userdb::find_user_in(passwd, "short"));
    CHECK_FALSE(userdb::find_user_in(passwd, "# generated"));
    CHECK_FALSE(userdb::find_user_in("/nonexistent/passwd", "root"));
    ::unlink(passwd.c_str());
}

TEST_CASE("userdb: groups by name and supplementary groups by membership") {
    auto group = write_temp(kGroup);
    CHECK(userdb::find_group_in(group, "wheel") == gid_t{10});
    CHECK(userdb::find_group_in(group, "lonely") == gid_t{3000});
    CHECK_FALSE(userdb::find_group_in(group, "bad"));
    CHECK_FALSE(userdb::find_group_in(group, "nosuch"));

    // Primary first; "again" repeats gid 10 and is not added twice; "apple" lists "xapp" and
    // "apples", neither of which is "app".
    CHECK(userdb::groups_of_in(group, "app", 1001) == std::vector<gid_t>{1001, 10, 999});
    CHECK(userdb::groups_of_in(group, "root", 0) == std::vector<gid_t>{0, 10});
    CHECK(userdb::groups_of_in(group, "nobody", 65534) == std::vector<gid_t>{65534});
    CHECK(userdb::groups_of_in("/nonexistent/group", "app", 5) == std::vector<gid_t>{5});
    ::unlink(group.c_str());
}

TEST_CASE("userdb: the build's own lookups find root") {
    // Both builds must resolve root on any Debian host (NSS in the dynamic build, /etc files in
    // the static one).
    auto root = userdb::find_user("root");
    REQUIRE(root);
    CHECK(root->uid == 0);
    CHECK(userdb::find_group("root") == gid_t{0});
    CHECK(userdb::groups_of("root", 0).front() == 0);
}
