// SPDX-License-Identifier: Apache-2.0
// The one way lastcall reads a whole file: configs, Procfiles, env files, status files, zone
// files and the kernel's /proc and cgroup files alike.
#pragma once

#include <cstddef>
#include <string>

#include "lastcall/core/error.hpp"

namespace lastcall {

// 16 MiB: far above any config, zone file or /proc listing lastcall reads (the children of
// 10,000 processes are 60 KB), far below what would hurt to hold.
inline constexpr std::size_t kReadFileLimit = std::size_t{16} << 20;

// The whole content of `path`, read with plain system calls (no stdio or stream buffers: /proc
// walks read thousands of files). A file longer than `limit` is an error (EFBIG), not a
// truncated read: a path that names /dev/zero must not fill memory. The error carries errno in
// `code` ("cannot read PATH: ...").
Result<std::string> read_file(const std::string& path, std::size_t limit = kReadFileLimit);

// read_file for a file that must be a regular one (a status file in a shared runtime directory):
// opened without blocking and without following a symlink, so that a FIFO or a device put in its
// place is an error ("not a regular file"), never a reader that waits for a writer forever.
Result<std::string> read_regular_file(const std::string& path, std::size_t limit = kReadFileLimit);

// The rest of an open fd (standard input, a pipe) up to end of file, with read_file's limit;
// `what` names it in the error ("cannot read WHAT: ...").
Result<std::string> read_all(int fd, const std::string& what, std::size_t limit = kReadFileLimit);

}  // namespace lastcall
