// SPDX-License-Identifier: Apache-2.0
// A directory of the test's own under /tmp (a ledger's state dir, files to read), removed with
// everything in it when the test ends.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace lastcall::test {

struct TempDir {
    // `name` tells whose directory it is when one is left behind (a test killed mid-way).
    explicit TempDir(const std::string& name = "test") {
        std::string tmpl = "/tmp/lastcall-" + name + "-XXXXXX";
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string path;
};

}  // namespace lastcall::test
