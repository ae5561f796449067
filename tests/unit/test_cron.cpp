#include <catch2/catch.hpp>

#include "lastcall/cron.hpp"

TEST_CASE("placeholder", "[cron]") { REQUIRE(lastcall::cron::parse("* * * * *", lastcall::cron::TimeZone::utc())); }
