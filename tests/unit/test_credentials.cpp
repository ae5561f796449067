// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include "lastcall/process/credentials.hpp"

using namespace lastcall;

namespace {

const UserDb& db() {
    static const UserDb d{
        [](const std::string& n) -> std::optional<userdb::User> {
            if (n == "app") return userdb::User{"app", 1000, 1001};
            if (n == "nobody") return userdb::User{"nobody", 65534, 65534};
            return std::nullopt;
        },
        [](uid_t u) -> std::optional<userdb::User> {
            if (u == 1000) return userdb::User{"app", 1000, 1001};
            return std::nullopt;
        },
        [](const std::string& n) -> std::optional<gid_t> {
            if (n == "daemon") return 1;
            return std::nullopt;
        },
        [](const std::string& n, gid_t primary) {
            std::vector<gid_t> g{primary};
            if (n == "app") g.push_back(27);
            return g;
        },
    };
    return d;
}

std::string error_of(std::string_view spec) {
    auto c = parse_credentials(spec, db());
    return c ? "" : c.error().message;
}

}  // namespace

TEST_CASE("credentials: numeric ids are strict and never wrap to root", "[credentials]") {
    CHECK(parse_numeric_id("0") == 0u);
    CHECK(parse_numeric_id("4294967294") == 4294967294u);
    CHECK(parse_numeric_id("0004294967294") == 4294967294u);
    CHECK_FALSE(parse_numeric_id("4294967295"));  // setresuid's "unchanged"
    CHECK_FALSE(parse_numeric_id("4294967296"));
    CHECK_FALSE(parse_numeric_id("18446744073709551616"));
    for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x1", "1e3", "١"})
        CHECK_FALSE(parse_numeric_id(bad));
    CHECK(error_of("4294967296") == "user id '4294967296' is out of range (0..4294967294)");
    CHECK(error_of("1:4294967296") == "group id '4294967296' is out of range (0..4294967294)");
}

TEST_CASE("credentials: empty, unknown and malformed names are errors", "[credentials]") {
    CHECK(error_of("") == "empty user name");
    CHECK(error_of(":daemon") == "empty user name");
    CHECK(error_of("app:") == "empty group name");
    CHECK(error_of("ghost") == "no such user 'ghost'");
    CHECK(error_of("app:ghost") == "no such group 'ghost'");
    CHECK(error_of("app:daemon:x") == "invalid group name 'daemon:x'");
    // An embedded NUL must not make NSS see "app".
    CHECK(error_of(std::string_view("app\0x", 5)) == "invalid user name 'app\\x00x'");
    CHECK(error_of("a b") == "invalid user name 'a b'");
}

TEST_CASE("credentials: names, numbers and groups", "[credentials]") {
    auto app = parse_credentials("app", db());
    REQUIRE(app);
    CHECK(app->uid == 1000);
    CHECK(app->gid == 1001);
    CHECK(app->groups == std::vector<gid_t>{1001, 27});
    // A numeric id with a passwd entry is that user, groups included.
    auto by_id = parse_credentials("1000", db());
    REQUIRE(by_id);
    CHECK(by_id->gid == 1001);
    CHECK(by_id->groups == std::vector<gid_t>{1001, 27});
    // Without one: gid = uid, no other group.
    auto bare = parse_credentials("54321", db());
    REQUIRE(bare);
    CHECK(bare->gid == 54321);
    CHECK(bare->groups == std::vector<gid_t>{54321});
    // An explicit group is the only group.
    auto grouped = parse_credentials("app:daemon", db());
    REQUIRE(grouped);
    CHECK(grouped->gid == 1);
    CHECK(grouped->groups == std::vector<gid_t>{1});
}

TEST_CASE("credentials: a unit's user and group over the default", "[credentials]") {
    auto fallback = parse_credentials("nobody", db()).value();
    auto own = parse_credentials("app", db()).value();
    CHECK_FALSE(unit_credentials(std::nullopt, std::nullopt, std::nullopt));
    CHECK(unit_credentials(std::nullopt, std::nullopt, fallback)->uid == 65534);
    CHECK(unit_credentials(own, std::nullopt, fallback)->uid == 1000);
    auto grouped = unit_credentials(std::nullopt, gid_t{1}, fallback);
    CHECK(grouped->uid == 65534);
    CHECK(grouped->gid == 1);
    CHECK(grouped->groups == std::vector<gid_t>{1});
}
