// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "lastcall/core/fd.hpp"
#include "lastcall/core/fd_reserve.hpp"

namespace lastcall {

Result<std::string> read_file(const std::string& path, std::size_t limit) {
    // Through the reserve: the stop path reads /proc and cgroup files here (fd_reserve.hpp).
    UniqueFd fd(open_with_reserve([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }));
    if (!fd) return sys_error("cannot read " + path, errno);
    return read_all(fd.get(), path, limit);
}

Result<std::string> read_regular_file(const std::string& path, std::size_t limit) {
    UniqueFd fd(open_with_reserve(
        [&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW); }));
    if (!fd) return sys_error("cannot read " + path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return sys_error("cannot read " + path, errno);
    if (!S_ISREG(st.st_mode)) return Error{"cannot read " + path + ": not a regular file"};
    return read_all(fd.get(), path, limit);
}

Result<std::string> read_all(int fd, const std::string& what, std::size_t limit) {
    // A small buffer on the stack for the first KiBs, then the string's own storage: a 4 KiB
    // buffer here was the deepest page of every start's stack (a page fault of its own, and
    // resident) for kernel files of a few hundred bytes (/proc/self/cgroup, mountinfo, status);
    // a file of 1-4 KiB now takes a read per KiB (1 us each; a fault is 11-20).
    std::string out;
    char small[1024];
    std::size_t used = 0;  // of out; past the first KiBs, out.size() - used is room to read into
    const std::size_t cap = limit < SIZE_MAX ? limit + 1 : limit;  // one byte tells EFBIG
    for (;;) {
        bool direct = used >= 4 * sizeof small;
        // Grown only when full, doubling: each byte is zeroed once, and a pipe or a kernel
        // file that hands out a page per read does not make the loop quadratic.
        if (direct && used == out.size()) out.resize(std::min(2 * used, cap));
        ssize_t n = direct ? ::read(fd, out.data() + used, out.size() - used)
                           : ::read(fd, small, sizeof small);
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("cannot read " + what, errno);
        }
        if (n == 0) {
            out.resize(used);
            return out;
        }
        if (used + static_cast<std::size_t>(n) > limit)
            return sys_error("cannot read " + what, EFBIG);
        if (!direct) {
            // A new string of exactly this size (most files end within these reads): append
            // doubles the capacity, and a kernel file of 1.5 KiB held 2 KiB of heap.
            std::string grown;
            grown.reserve(used + static_cast<std::size_t>(n));
            grown.append(out).append(small, static_cast<std::size_t>(n));
            out = std::move(grown);
        }
        used += static_cast<std::size_t>(n);
    }
}

}  // namespace lastcall
