// SPDX-License-Identifier: Apache-2.0
#include <signal.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lastcall/core/twin.hpp"

using namespace lastcall;

TEST_CASE("nsswitch.conf naming only files for users and groups keeps the static binary's answer",
          "[twin]") {
    CHECK_FALSE(twin::nss_beyond_files(""));
    CHECK_FALSE(twin::nss_beyond_files("passwd: files\ngroup: files\nshadow: files\n"));
    // Other databases are not the static binary's business.
    CHECK_FALSE(
        twin::nss_beyond_files("# Debian's default, in an image\npasswd:\tfiles\ngroup: files\n"
                               "hosts: files dns myhostname\nnetgroup: nis\n"));
    // An action between sources is not a source.
    CHECK_FALSE(twin::nss_beyond_files("passwd: files [NOTFOUND=return]\ngroup: files\n"));
    CHECK_FALSE(twin::nss_beyond_files("# passwd: files systemd\n  # group: ldap\n"));
    CHECK_FALSE(twin::nss_beyond_files("passwd files\ngroup\t files\r\n"));
}

TEST_CASE("nsswitch.conf naming another user database sends the lookup to NSS", "[twin]") {
    CHECK(twin::nss_beyond_files("passwd:         files systemd\ngroup: files\n"));
    CHECK(twin::nss_beyond_files("passwd: files\ngroup:          files systemd\n"));
    CHECK(twin::nss_beyond_files("passwd: files\ngroup: files\ninitgroups: files sss\n"));
    CHECK(twin::nss_beyond_files("passwd: compat\n"));  // reads NIS entries
    CHECK(twin::nss_beyond_files("passwd: files [NOTFOUND=return] ldap\n"));
    CHECK(twin::nss_beyond_files("  group : ldap\n"));
    // glibc 2.33+ takes a name without a colon, and a '#' after a source for another source.
    CHECK(twin::nss_beyond_files("passwd files sss\n"));
    CHECK(twin::nss_beyond_files("passwd: files # systemd\n"));
}

std::string handed_over_value(long pid, const char* rest) {
    return std::to_string(pid) + "\n" + rest;
}

TEST_CASE("a hand-over passes the first parent's signal mask and leaves no variable behind",
          "[twin]") {
    // SIGUSR1, SIGUSR2 and glibc's reserved 32 (bit 31), which sigaddset() cannot set.
    auto value =
        handed_over_value(::getpid(), "80000a00\n0.1.0\nunit_tests\n--metrics-listen needs x");
    ::setenv("LASTCALL_HANDED_OVER", value.c_str(), 1);
    auto handed = twin::take_handed_over();
    REQUIRE(handed);
    CHECK(::getenv("LASTCALL_HANDED_OVER") == nullptr);
    CHECK(handed->why == "--metrics-listen needs x");
    CHECK(handed->version == "0.1.0");
    CHECK(sigismember(&handed->inherited_mask, SIGUSR1) == 1);
    CHECK(sigismember(&handed->inherited_mask, SIGUSR2) == 1);
    CHECK(sigismember(&handed->inherited_mask, SIGTERM) == 0);
    std::uint64_t bits = 0;
    std::memcpy(&bits, &handed->inherited_mask, sizeof bits);
    CHECK(bits == 0x80000a00);
    // Read once: a second call finds nothing.
    CHECK_FALSE(twin::take_handed_over());
}

TEST_CASE("a hand-over variable for another process or malformed is dropped, not trusted",
          "[twin]") {
    std::string other = handed_over_value(::getpid() + 1, "0\n0.1.0\nx\nwhy");
    std::string no_mask = handed_over_value(::getpid(), "zz\n0.1.0\nx\nwhy");
    std::string no_version = handed_over_value(::getpid(), "0");
    for (const std::string& value :
         {std::string(), std::string("12"), other, no_mask, no_version}) {
        ::setenv("LASTCALL_HANDED_OVER", value.c_str(), 1);
        CHECK_FALSE(twin::take_handed_over());
        CHECK(::getenv("LASTCALL_HANDED_OVER") == nullptr);
    }
}
