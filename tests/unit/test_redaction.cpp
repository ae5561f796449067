// SPDX-License-Identifier: Apache-2.0
// What lastcall prints of a ledger URL and of a unit's text: no password, no control sequence.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "lastcall/cli/cli.hpp"
#include "lastcall/core/utf8.hpp"
#include "lastcall/jobs/ledger.hpp"

using namespace lastcall;

TEST_CASE("a ledger URL is shown with its password as ***, wherever libpq reads one") {
    CHECK(redact_url_password("postgresql://user:secret@host/db") ==
          "postgresql://user:***@host/db");
    CHECK(redact_url_password("postgres://u:p%40ss@h:5432/db?sslmode=require") ==
          "postgres://u:***@h:5432/db?sslmode=require");
    CHECK(redact_url_password("postgresql://u@/db?host=/run/pg&password=x1&%70assword=x2") ==
          "postgresql://u@/db?host=/run/pg&password=***&%70assword=***");
    // No password: as it is. The userinfo ends at the first '@' before any '/'.
    CHECK(redact_url_password("postgresql://user@host/db") == "postgresql://user@host/db");
    CHECK(redact_url_password("postgresql://host/db:x@y") == "postgresql://host/db:x@y");
    CHECK(redact_url_password("postgresql://u:@host/db") == "postgresql://u:@host/db");
}

TEST_CASE("libpq's message about a URL is shown without the URL's password") {
    CHECK(hide_url_passwords("postgresql://u:se%zzcret@h/db",
                             "invalid percent-encoded token: \"se%zzcret\"") ==
          "invalid percent-encoded token: \"***\"");
    CHECK(hide_url_passwords("postgresql://u@h/db", "no password here") == "no password here");
}

TEST_CASE("a password in argv is overwritten in place, the rest of the URL kept") {
    char url[] = "postgresql://user:secret@host/db";
    std::size_t size = sizeof url;
    REQUIRE(scrub_url_password(url));
    CHECK(std::string(url) == "postgresql://user:***@host/db");
    // The bytes the shorter text left are NUL: /proc/PID/cmdline shows none of the password.
    CHECK(std::string(url, size).find("ret") == std::string::npos);
    char short_password[] = "postgresql://u:ab@h/db";
    REQUIRE(scrub_url_password(short_password));
    CHECK(std::string(short_password) == "postgresql://u:**@h/db");
    char none[] = "postgresql://u@h/db";
    CHECK_FALSE(scrub_url_password(none));
}

TEST_CASE(
    "the password of the --ledger URL is scrubbed from lastcall's arguments, never from the "
    "command's") {
    std::vector<std::string> text{
        "lastcall", "--ledger=postgresql://u:pw1@h/db", "--ledger", "postgresql://u:pw1@h/db", "--",
        "psql",     "postgresql://u:pw1@h/db"};
    std::vector<char*> argv;
    for (auto& s : text) argv.push_back(s.data());
    Options options;
    options.ledger_url = "postgresql://u:pw1@h/db";
    options.command = {"psql", "postgresql://u:pw1@h/db"};
    CHECK(scrub_ledger_password(static_cast<int>(argv.size()), argv.data(), options));
    CHECK(std::string(argv[1]) == "--ledger=postgresql://u:***@h/db");
    CHECK(std::string(argv[3]) == "postgresql://u:***@h/db");
    CHECK(std::string(argv[6]) == "postgresql://u:pw1@h/db");
}

TEST_CASE("a unit's text is printed with its control characters escaped, UTF-8 and tabs kept") {
    CHECK(printable("\x1b]0;PWNED\x07\x1b[2J") == "\\x1b]0;PWNED\\x07\\x1b[2J");
    CHECK(printable("line\nforged\r") == "line\\x0aforged\\x0d");
    CHECK(printable("a\tb d\xc3\xa9j\xc3\xa0 \x7f") == "a\tb d\xc3\xa9j\xc3\xa0 \\x7f");
    // C1 CSI (U+009B), which a terminal may read as ESC [, and bytes that are not UTF-8.
    CHECK(printable("\xc2\x9b"
                    "2J \x9b\xff") == "\\u009b2J \\x9b\\xff");
    std::string out = "prefix | ";
    append_printable(out, "\x1b[31mred");
    CHECK(out == "prefix | \\x1b[31mred");
}
