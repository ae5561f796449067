// SPDX-License-Identifier: Apache-2.0
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/json.hpp"

using namespace lastcall;

namespace {
std::string temp_dir() {
    char tmpl[] = "/tmp/lastcall-unit-XXXXXX";
    return ::mkdtemp(tmpl);
}
std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

TEST_CASE("an atomic file appears at its final path only on commit", "[atomic_file]") {
    auto dir = temp_dir();
    auto path = dir + "/report.json";
    {
        auto f = AtomicFile::create(path);
        REQUIRE(f.ok());
        REQUIRE(f->write("{\"a\":1}").ok());
        CHECK(::access(path.c_str(), F_OK) != 0);
        REQUIRE(f->commit().ok());
    }
    CHECK(slurp(path) == "{\"a\":1}");
}

TEST_CASE("an atomic file abandoned before commit leaves neither file nor temp behind",
          "[atomic_file]") {
    auto dir = temp_dir();
    auto path = dir + "/report.json";
    std::string temp;
    {
        auto f = AtomicFile::create(path);
        REQUIRE(f.ok());
        temp = f->temp_path();
        REQUIRE(f->write("partial").ok());
    }
    CHECK(::access(path.c_str(), F_OK) != 0);
    CHECK(::access(temp.c_str(), F_OK) != 0);
}

TEST_CASE("an atomic file in a missing directory fails with the path in the message",
          "[atomic_file]") {
    auto f = AtomicFile::create("/nonexistent-dir-lastcall/report.json");
    REQUIRE_FALSE(f.ok());
    CHECK_THAT(f.error().message, Catch::Contains("/nonexistent-dir-lastcall/report.json"));
    CHECK_THAT(f.error().message, Catch::Contains("No such file or directory"));
}

TEST_CASE("json strings escape quotes and control bytes, keep UTF-8 and replace other bytes",
          "[json]") {
    std::string out;
    json_quote(out, std::string("a\"b\\c\n\x01\xff", 8));
    CHECK(out == "\"a\\\"b\\\\c\\n\\u0001\\ufffd\"");
    out.clear();
    json_quote(out, "d\xc3\xa9j\xc3\xa0");  // déjà
    CHECK(out == "\"d\xc3\xa9j\xc3\xa0\"");
    JsonWriter j;
    j.begin_object().field("k", 1).key("arr").begin_array().value("x").value(true).end_array();
    j.end_object();
    CHECK(j.str() == "{\"k\":1,\"arr\":[\"x\",true]}");
}
