// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/safe_path.hpp"

using namespace lastcall;

namespace {

std::string temp_dir() {
    char tmpl[] = "/tmp/lastcall-safe-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    return tmpl;
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("safe_path: a link is followed only in a directory nobody else can write",
          "[safe_path]") {
    auto d = temp_dir();
    REQUIRE(::mkdir((d + "/target").c_str(), 0755) == 0);
    REQUIRE(::mkdir((d + "/shared").c_str(), 0755) == 0);
    REQUIRE(::chmod((d + "/shared").c_str(), 0777) == 0);  // writable by others: untrusted
    REQUIRE(::symlink((d + "/target").c_str(), (d + "/trusted-link").c_str()) == 0);
    REQUIRE(::symlink((d + "/target").c_str(), (d + "/shared/planted").c_str()) == 0);

    CHECK(open_dir_safely(d + "/trusted-link"));
    auto refused = open_dir_safely(d + "/shared/planted");
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error().message, Catch::Contains("is a symbolic link in a directory"));
    // The same for a link in the middle of a longer path.
    REQUIRE(::mkdir((d + "/target/sub").c_str(), 0755) == 0);
    CHECK_FALSE(open_dir_safely(d + "/shared/planted/sub"));
    CHECK(open_dir_safely(d + "/trusted-link/sub"));
}

TEST_CASE("safe_path: only a regular file with one link is created or truncated", "[safe_path]") {
    auto d = temp_dir();
    auto dir = open_dir_safely(d);
    REQUIRE(dir);
    write(d + "/victim", "secret");
    REQUIRE(::symlink((d + "/victim").c_str(), (d + "/link").c_str()) == 0);
    REQUIRE(::link((d + "/victim").c_str(), (d + "/hard").c_str()) == 0);
    REQUIRE(::mkfifo((d + "/fifo").c_str(), 0644) == 0);

    auto link = create_file_at(dir->get(), "link", 0644, "link");
    REQUIRE_FALSE(link);
    CHECK_THAT(link.error().message, Catch::Contains("symbolic link"));
    auto hard = create_file_at(dir->get(), "hard", 0644, "hard");
    REQUIRE_FALSE(hard);
    CHECK_THAT(hard.error().message, Catch::Contains("2 hard links"));
    auto fifo = create_file_at(dir->get(), "fifo", 0644, "fifo");  // must not block
    REQUIRE_FALSE(fifo);
    CHECK_THAT(fifo.error().message, Catch::Contains("not a regular file"));
    CHECK(slurp(d + "/victim") == "secret");

    write(d + "/plain", "old content");
    auto plain = create_file_safely(d + "/plain", 0644);
    REQUIRE(plain);
    CHECK(slurp(d + "/plain").empty());
}

TEST_CASE("safe_path: an atomic file is not written through a planted directory link",
          "[safe_path]") {
    auto d = temp_dir();
    REQUIRE(::mkdir((d + "/elsewhere").c_str(), 0700) == 0);
    REQUIRE(::mkdir((d + "/shared").c_str(), 0777) == 0);
    REQUIRE(::chmod((d + "/shared").c_str(), 0777) == 0);
    REQUIRE(::symlink((d + "/elsewhere").c_str(), (d + "/shared/out").c_str()) == 0);
    auto f = AtomicFile::create(d + "/shared/out/report.json");
    REQUIRE_FALSE(f);
    CHECK(::access((d + "/elsewhere/report.json").c_str(), F_OK) != 0);
}

TEST_CASE("safe_path: an owned directory must be lastcall's and closed to others", "[safe_path]") {
    auto d = temp_dir();
    CHECK(ensure_owned_dir(d + "/state", 0755, false));
    CHECK(ensure_owned_dir(d + "/a/b/c", 0755, true));
    REQUIRE(::mkdir((d + "/open").c_str(), 0755) == 0);
    REQUIRE(::chmod((d + "/open").c_str(), 0777) == 0);
    auto open = ensure_owned_dir(d + "/open", 0755, false);
    REQUIRE_FALSE(open);
    CHECK_THAT(open.error().message, Catch::Contains("writable by nobody else"));
    REQUIRE(::symlink((d + "/state").c_str(), (d + "/linked").c_str()) == 0);
    CHECK_FALSE(ensure_owned_dir(d + "/linked", 0755, false));
}

TEST_CASE("safe_path: staged output of another owner, a link or a FIFO is refused", "[safe_path]") {
    auto d = temp_dir();
    auto dir = open_dir_safely(d);
    REQUIRE(dir);
    write(d + "/staged", "data");
    REQUIRE(::symlink((d + "/staged").c_str(), (d + "/link").c_str()) == 0);
    REQUIRE(::mkfifo((d + "/fifo").c_str(), 0644) == 0);
    CHECK(open_owned_regular(dir->get(), "staged", ::geteuid(), "staged"));
    auto other = open_owned_regular(dir->get(), "staged", ::geteuid() + 1, "staged");
    REQUIRE_FALSE(other);
    CHECK_THAT(other.error().message, Catch::Contains("is owned by uid"));
    CHECK_FALSE(open_owned_regular(dir->get(), "link", ::geteuid(), "link"));
    CHECK_FALSE(open_owned_regular(dir->get(), "fifo", ::geteuid(), "fifo"));
}
