// SPDX-License-Identifier: Apache-2.0
#include <signal.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>

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
    CHECK_FALSE(twin::nss_beyond_files("passwd: files # systemd\n"));
}

TEST_CASE("nsswitch.conf naming another user database sends the lookup to NSS", "[twin]") {
    CHECK(twin::nss_beyond_files("passwd:         files systemd\ngroup: files\n"));
    CHECK(twin::nss_beyond_files("passwd: files\ngroup:          files systemd\n"));
    CHECK(twin::nss_beyond_files("passwd: files\ngroup: files\ninitgroups: files sss\n"));
    CHECK(twin::nss_beyond_files("passwd: compat\n"));  // reads NIS entries
    CHECK(twin::nss_beyond_files("passwd: files [NOTFOUND=return] ldap\n"));
    CHECK(twin::nss_beyond_files("  group : ldap\n"));
}

TEST_CASE("a hand-over passes the first parent's signal mask and leaves no variable behind",
          "[twin]") {
    // SIGUSR1, SIGUSR2 and glibc's reserved 32 (bit 31), which sigaddset() cannot set.
    ::setenv("LASTCALL_HANDED_OVER", "80000a00 --metrics-listen needs libmicrohttpd", 1);
    auto handed = twin::take_handed_over();
    REQUIRE(handed);
    CHECK(::getenv("LASTCALL_HANDED_OVER") == nullptr);
    CHECK(handed->why == "--metrics-listen needs libmicrohttpd");
    CHECK(sigismember(&handed->inherited_mask, SIGUSR1) == 1);
    CHECK(sigismember(&handed->inherited_mask, SIGUSR2) == 1);
    CHECK(sigismember(&handed->inherited_mask, SIGTERM) == 0);
    std::uint64_t bits = 0;
    std::memcpy(&bits, &handed->inherited_mask, sizeof bits);
    CHECK(bits == 0x80000a00);
    // Read once: a second call finds nothing.
    CHECK_FALSE(twin::take_handed_over());
}

TEST_CASE("a malformed hand-over variable is dropped, not trusted", "[twin]") {
    for (const char* value : {"", "zz why", "12x", " 12"}) {
        ::setenv("LASTCALL_HANDED_OVER", value, 1);
        CHECK_FALSE(twin::take_handed_over());
        CHECK(::getenv("LASTCALL_HANDED_OVER") == nullptr);
    }
}
