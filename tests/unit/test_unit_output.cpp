// SPDX-License-Identifier: Apache-2.0
// The services' and job runs' output: one prefix format, aligned, escaped, coloured on request.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "lastcall/process/unit_output.hpp"

using namespace lastcall;

namespace {

// The output's target (a pipe read back by the test) and the loop's watches.
struct Rig {
    int target[2];
    std::map<int, std::function<void()>> watched;
    UnitOutput out;
    Rig(bool color, std::initializer_list<const char*> names)
        : target{-1, -1}, out((::pipe2(target, O_CLOEXEC), target[1]), color) {
        for (const char* n : names) out.add_name(n);
        out.attach(
            [this](int fd, std::function<void()> readable) -> Status {
                watched[fd] = std::move(readable);
                return Ok{};
            },
            [this](int fd) { watched.erase(fd); });
    }
    ~Rig() {
        ::close(target[0]);
        ::close(target[1]);
    }
    static void write(const UnitOutput::Capture& c, std::string_view text) {
        REQUIRE(::write(c.write_end.get(), text.data(), text.size()) ==
                static_cast<ssize_t>(text.size()));
    }
    std::string printed() {
        ::fcntl(target[0], F_SETFL, O_NONBLOCK);
        char buf[4096];
        ssize_t n = ::read(target[0], buf, sizeof buf);
        return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    }
};

}  // namespace

TEST_CASE("a unit's lines carry its name padded to the longest, its control bytes escaped",
          "[unit_output]") {
    Rig rig(false, {"db", "worker"});
    auto c = rig.out.capture("db");
    REQUIRE(c);
    Rig::write(*c, "started\nhalf");
    rig.out.drain(c->stream);
    CHECK(rig.printed() == "db     | started\n");  // the half line waits for its end
    Rig::write(*c, " a line\x1b[2J\r\n");
    c->write_end.reset();  // EOF: the stream ends and leaves the loop
    rig.watched.at(c->stream)();
    CHECK(rig.printed() == "db     | half a line\\x1b[2J\n");
    CHECK(rig.watched.empty());
    rig.out.say("worker", "exited with code 3");
    CHECK(rig.printed() == "worker | exited with code 3\n");
}

TEST_CASE(
    "prefixes are coloured by name when asked, and the last partial line is printed at the "
    "end",
    "[unit_output]") {
    Rig rig(true, {"web", "tick"});
    auto c = rig.out.capture("tick");
    REQUIRE(c);
    Rig::write(*c, "no newline");
    c->write_end.reset();  // the unit is gone: its last line has no newline
    CHECK(rig.out.finish(std::chrono::milliseconds(0)) == 0);
    CHECK(rig.printed() == "\x1b[33mtick |\x1b[0m no newline\n");
}
