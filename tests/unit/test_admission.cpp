#include <catch2/catch.hpp>

#include "lastcall/admission.hpp"

using namespace lastcall;

TEST_CASE("an admitted ticket that starts is released exactly once", "[admission]") {
    Admission a;
    {
        auto t = a.try_admit();
        REQUIRE(t);
        CHECK(a.active() == 1);
        t->started();
        t->release();
        t->release();
        CHECK(a.active() == 0);
    }
    auto s = a.stats();
    CHECK(s.released == 1);
    CHECK(s.rolled_back == 0);
}

TEST_CASE("a ticket dropped before it started is rolled back, not released", "[admission]") {
    Admission a;
    { auto t = a.try_admit(); }
    auto s = a.stats();
    CHECK(s.rolled_back == 1);
    CHECK(s.released == 0);
    CHECK(a.active() == 0);
}

TEST_CASE("once intake is closed nothing is admitted and the count only goes down",
          "[admission]") {
    Admission a;
    auto t = a.try_admit();
    t->started();
    CHECK(a.close() == 1);
    CHECK_FALSE(a.try_admit());
    CHECK(a.stats().refused == 1);
    bool idle = false;
    a.on_idle([&] { idle = true; });
    t.reset();
    CHECK(idle);
    CHECK(a.active() == 0);
}

TEST_CASE("a moved ticket is finished once, by its last owner", "[admission]") {
    Admission a;
    auto t = a.try_admit();
    t->started();
    Ticket moved = std::move(*t);
    t.reset();
    CHECK(a.active() == 1);
    moved.release();
    CHECK(a.active() == 0);
    CHECK(a.stats().released == 1);
}
