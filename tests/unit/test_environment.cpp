// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <cstdlib>

#include "lastcall/process/environment.hpp"

using namespace lastcall;

TEST_CASE("a variable set twice appears once, with the last value, in its first place") {
    auto env = Environment::from({"A=1", "B=2", "A=3"});
    CHECK(env.entries() == std::vector<std::string>{"A=3", "B=2"});
    env.set("B", "x=y");
    CHECK(*env.get("B") == "x=y");
    env.unset("A");
    CHECK(env.entries() == std::vector<std::string>{"B=x=y"});
    env.set("no-equals-sign");
    CHECK(env.size() == 1);
}

TEST_CASE("a key is matched whole, not as the prefix of a longer one") {
    auto env = Environment::from({"PATHEXT=.x", "PATH=/bin", "E="});
    CHECK(*env.get("PATH") == "/bin");
    CHECK(*env.get("E") == "");
    CHECK_FALSE(env.get("PAT"));
    env.set("PATH", "/usr/bin");
    env.unset("PATHE");
    CHECK(env.entries() == std::vector<std::string>{"PATHEXT=.x", "PATH=/usr/bin", "E="});
    env.unset("PATH");
    CHECK(std::move(env).entries() == std::vector<std::string>{"PATHEXT=.x", "E="});
}

TEST_CASE("socket activation and the watchdog are inherited by the main command only") {
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("WATCHDOG_USEC", "1000", 1);
    ::setenv("NOTIFY_SOCKET", "/run/x", 1);
    ::setenv("LASTCALL_RUN_ID", "7", 1);
    auto main = Environment::inherited(UnitKind::Main);
    CHECK(main.get("LISTEN_FDS"));
    CHECK(main.get("WATCHDOG_USEC"));
    CHECK_FALSE(main.get("NOTIFY_SOCKET"));
    for (auto kind : {UnitKind::Service, UnitKind::Job, UnitKind::Helper}) {
        auto env = Environment::inherited(kind);
        CHECK_FALSE(env.get("LISTEN_FDS"));
        CHECK_FALSE(env.get("WATCHDOG_USEC"));
        CHECK_FALSE(env.get("NOTIFY_SOCKET"));
    }
    auto job = Environment::inherited(UnitKind::Job);
    auto service = Environment::inherited(UnitKind::Service);
    CHECK_FALSE(job.get("LASTCALL_RUN_ID"));
    CHECK(service.get("LASTCALL_RUN_ID"));
    for (const char* k : {"LISTEN_FDS", "WATCHDOG_USEC", "NOTIFY_SOCKET", "LASTCALL_RUN_ID"})
        ::unsetenv(k);
}

TEST_CASE("with a postgresql ledger its credentials reach no unit, but a unit's own settings do") {
    ::setenv("PGPASSWORD", "lastcalls", 1);
    ::setenv("PGPASSFILE", "/run/secrets/pgpass", 1);
    ::setenv("PGHOST", "db", 1);
    // Before a ledger is opened, PGPASSWORD is the units' as any other variable.
    auto before = Environment::inherited(UnitKind::Job);
    CHECK(before.get("PGPASSWORD"));
    // Process-wide and for good, as in lastcall: later test cases see it withheld too.
    Environment::withhold_ledger_credentials();
    for (auto kind : {UnitKind::Main, UnitKind::Service, UnitKind::Job, UnitKind::Helper}) {
        auto env = Environment::inherited(kind);
        for (auto key : kLedgerCredentials) CHECK_FALSE(env.get(key));
        CHECK(*env.get("PGHOST") == "db");  // where to connect is not a credential
        env.set("PGPASSWORD", "the-units-own");
        CHECK(*env.get("PGPASSWORD") == "the-units-own");
    }
    for (const char* k : {"PGPASSWORD", "PGPASSFILE", "PGHOST"}) ::unsetenv(k);
}
