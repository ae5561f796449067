// SPDX-License-Identifier: Apache-2.0
// The systemd integration's pure parts (datagram parsing, addresses, watchdog and LISTEN_* rules,
// JOURNAL_STREAM) and its sockets against real AF_UNIX datagram sockets.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "lastcall/core/log.hpp"
#include "lastcall/systemd/notifier.hpp"
#include "lastcall/systemd/notify_proxy.hpp"
#include "lastcall/systemd/socket_activation.hpp"

using namespace lastcall;

namespace {

// A bound datagram socket standing in for systemd's notify socket.
struct Listener {
    UniqueFd fd;
    std::string name;  // as it would appear in NOTIFY_SOCKET

    explicit Listener(bool abstract) {
        fd.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        REQUIRE(fd);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::string unique = "lastcall-test-" + std::to_string(::getpid()) + "-" +
                             std::to_string(reinterpret_cast<std::uintptr_t>(this));
        socklen_t len;
        if (abstract) {
            name = "@" + unique;
            std::memcpy(addr.sun_path + 1, unique.data(), unique.size());
            len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + unique.size());
        } else {
            name = "/tmp/" + unique + ".sock";
            ::unlink(name.c_str());
            std::memcpy(addr.sun_path, name.c_str(), name.size() + 1);
            len = sizeof addr;
        }
        REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
    }
    ~Listener() {
        if (name[0] == '/') ::unlink(name.c_str());
    }
    std::string receive() {
        char buf[4096];
        ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        REQUIRE(n >= 0);
        return std::string(buf, static_cast<std::size_t>(n));
    }
};

}  // namespace

TEST_CASE("notify datagrams parse into ordered KEY=VALUE assignments", "[notifier]") {
    auto f = parse_notify_datagram("READY=1\nSTATUS=serving on :80\n\nMAINPID=42\n");
    REQUIRE(f);
    REQUIRE(f->assignments.size() == 3);
    CHECK(f->assignments[0] == NotifyAssignment{"READY", "1"});
    CHECK(f->assignments[1] == NotifyAssignment{"STATUS", "serving on :80"});
    CHECK(*f->find("MAINPID") == "42");
    CHECK(f->find("ERRNO") == nullptr);
    CHECK(f->invalid.empty());
}

TEST_CASE("a repeated notify key reads as its last value; values keep their '='", "[notifier]") {
    auto f = parse_notify_datagram("STATUS=a\nSTATUS=b=c");
    REQUIRE(f);
    CHECK(*f->find("STATUS") == "b=c");
}

TEST_CASE("lines that are not KEY=VALUE are set aside, the rest still counts", "[notifier]") {
    auto f = parse_notify_datagram("garbage\n=1\nBAD KEY=1\nREADY=1");
    REQUIRE(f);
    CHECK(f->invalid == std::vector<std::string>{"garbage", "=1", "BAD KEY=1"});
    REQUIRE(f->assignments.size() == 1);
    CHECK(f->assignments[0].key == "READY");
}

TEST_CASE("a notify datagram with a NUL byte is refused whole", "[notifier]") {
    using namespace std::string_view_literals;
    CHECK_FALSE(parse_notify_datagram("READY=1\0MAINPID=1"sv));
    auto empty = parse_notify_datagram("");
    REQUIRE(empty);
    CHECK(empty->assignments.empty());
}

TEST_CASE("only readiness and status keys are relayed, never MAINPID", "[notifier]") {
    for (auto k : {"READY", "STATUS", "RELOADING", "STOPPING", "ERRNO", "MONOTONIC_USEC"})
        CHECK(is_forwardable_key(k));
    for (auto k : {"MAINPID", "WATCHDOG", "WATCHDOG_USEC", "FDSTORE", "EXTEND_TIMEOUT_USEC", ""})
        CHECK_FALSE(is_forwardable_key(k));
}

TEST_CASE("NOTIFY_SOCKET addresses: absolute paths and abstract names only", "[notifier]") {
    CHECK(parse_notify_address("/run/systemd/notify")->path == "/run/systemd/notify");
    auto abstract = parse_notify_address("@sd/notify");
    REQUIRE(abstract);
    CHECK(abstract->path == std::string("\0sd/notify", 10));
    CHECK_FALSE(parse_notify_address(""));
    CHECK_FALSE(parse_notify_address("@"));
    CHECK_FALSE(parse_notify_address("relative/notify"));
    CHECK_FALSE(parse_notify_address("/" + std::string(200, 'x')));
}

TEST_CASE("the socket channel delivers datagrams to path and abstract sockets", "[notifier]") {
    for (bool abstract : {false, true}) {
        Listener systemd(abstract);
        auto channel = open_socket_channel(systemd.name);
        REQUIRE(channel);
        REQUIRE((*channel)->send("READY=1\nSTATUS=running"));
        CHECK(systemd.receive() == "READY=1\nSTATUS=running");
    }
}

TEST_CASE("the socket channel reports a missing socket with its address", "[notifier]") {
    auto channel = open_socket_channel("/nonexistent/lastcall-notify.sock");
    REQUIRE(channel);
    auto st = (*channel)->send("READY=1");
    REQUIRE_FALSE(st);
    CHECK(st.error().message.find("/nonexistent/lastcall-notify.sock") != std::string::npos);
}

TEST_CASE("the watchdog is on only for our pid and a positive WATCHDOG_USEC", "[notifier]") {
    using std::chrono::microseconds;
    CHECK(watchdog_interval("200000", nullptr, 10) == microseconds(200000));
    CHECK(watchdog_interval("200000", "10", 10) == microseconds(200000));
    CHECK_FALSE(watchdog_interval("200000", "11", 10));
    CHECK_FALSE(watchdog_interval("0", nullptr, 10));
    CHECK_FALSE(watchdog_interval("-5", nullptr, 10));
    CHECK_FALSE(watchdog_interval("12x", nullptr, 10));
    CHECK_FALSE(watchdog_interval(nullptr, "10", 10));
}

TEST_CASE("LISTEN_FDS counts only when LISTEN_PID names us", "[notifier][socket-activation]") {
    CHECK(listen_fds_for("10", "2", 10) == 2);
    CHECK(listen_fds_for("11", "2", 10) == 0);
    CHECK(listen_fds_for(nullptr, "2", 10) == 0);
    CHECK(listen_fds_for("10", "0", 10) == 0);
    CHECK(listen_fds_for("10", "two", 10) == 0);
    CHECK(listen_fds_for("10", "-1", 10) == 0);
}

TEST_CASE("the proxy directory follows RUNTIME_DIRECTORY, XDG_RUNTIME_DIR, then /run or /tmp",
          "[notifier]") {
    CHECK(notify_runtime_base("/run/app:/run/other", "/run/user/1000", true) == "/run/app");
    CHECK(notify_runtime_base(nullptr, "/run/user/1000", false) == "/run/user/1000/lastcall");
    CHECK(notify_runtime_base("", "", true) == "/run/lastcall");
    CHECK(notify_runtime_base(nullptr, nullptr, false) == "/tmp");
}

TEST_CASE("the proxy socket is private and reports each sender's pid", "[notifier]") {
    char base[] = "/tmp/lastcall-proxy-test-XXXXXX";
    REQUIRE(::mkdtemp(base));
    std::string dir;
    {
        auto proxy = NotifyProxy::create(base, std::nullopt, std::nullopt);
        REQUIRE(proxy);
        const std::string& path = (*proxy)->socket_path();
        dir = path.substr(0, path.rfind('/'));
        struct stat st {};
        REQUIRE(::stat(dir.c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0700);

        auto sender = open_socket_channel(path);
        REQUIRE(sender);
        REQUIRE((*sender)->send("READY=1"));
        auto got = (*proxy)->receive();
        REQUIRE(got);
        REQUIRE(got->has_value());
        CHECK((*got)->pid == ::getpid());
        CHECK((*got)->data == "READY=1");
        CHECK_FALSE((*got)->truncated);

        auto none = (*proxy)->receive();
        REQUIRE(none);
        CHECK_FALSE(none->has_value());
    }
    CHECK(::access(dir.c_str(), F_OK) != 0);  // removed with the proxy
    ::rmdir(base);
}

TEST_CASE("JOURNAL_STREAM matches only the device and inode of the given fd", "[notifier][log]") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    UniqueFd r(fds[0]), w(fds[1]);
    struct stat st {};
    REQUIRE(::fstat(w.get(), &st) == 0);
    std::string ok = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    std::string other = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
    CHECK(journal_stream_matches(ok.c_str(), w.get()));
    CHECK_FALSE(journal_stream_matches(other.c_str(), w.get()));
    CHECK_FALSE(journal_stream_matches((ok + "x").c_str(), w.get()));
    CHECK_FALSE(journal_stream_matches("", w.get()));
    CHECK_FALSE(journal_stream_matches(nullptr, w.get()));
}

TEST_CASE("journal lines reach the journal socket in the native protocol", "[notifier][log]") {
    char base[] = "/tmp/lc-journal-XXXXXX";
    REQUIRE(::mkdtemp(base));
    std::string path = std::string(base) + "/socket";
    UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(sock);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, path.size());
    REQUIRE(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

    spdlog::logger logger("journal-test", make_journal_sink(path));
    logger.warn("tree of {} processes", 3);
    logger.info("two\nlines");
    char buf[512];
    ssize_t n = ::recv(sock.get(), buf, sizeof buf, MSG_DONTWAIT);
    REQUIRE(n > 0);
    CHECK(std::string(buf, static_cast<size_t>(n)) ==
          "PRIORITY=4\nSYSLOG_IDENTIFIER=lastcall\nMESSAGE=tree of 3 processes\n");
    n = ::recv(sock.get(), buf, sizeof buf, MSG_DONTWAIT);
    REQUIRE(n > 0);
    std::string multi(buf, static_cast<size_t>(n));
    CHECK(multi == journal_entry(6, "two\nlines"));
    CHECK(
        multi ==
        std::string(
            "PRIORITY=6\nSYSLOG_IDENTIFIER=lastcall\nMESSAGE\n\x09\0\0\0\0\0\0\0two\nlines\n", 64));
    ::unlink(path.c_str());
    ::rmdir(base);
}
