// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/read_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "lastcall/core/fd.hpp"

namespace lastcall {

Result<std::string> read_file(const std::string& path, std::size_t limit) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("cannot read " + path, errno);
    return read_all(fd.get(), path, limit);
}

Result<std::string> read_all(int fd, const std::string& what, std::size_t limit) {
    // A small buffer on the stack for the first KiBs, then the string's own storage: a 4 KiB
    // buffer here was the deepest page of every start's stack (a page fault of its own, and
    // resident) for kernel files of a few hundred bytes (/proc/self/cgroup, mountinfo, status).
    std::string out;
    char small[1024];
    for (;;) {
        std::size_t have = out.size();
        bool direct = have >= 4 * sizeof small;  // then in chunks as large as what was read
        if (direct) out.resize(2 * have);
        ssize_t n = ::read(fd, direct ? out.data() + have : small, direct ? have : sizeof small);
        std::size_t got = n > 0 ? static_cast<std::size_t>(n) : 0;
        if (direct) out.resize(have + got);
        if (n == 0) return out;
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("cannot read " + what, errno);
        }
        if (have + got > limit) return sys_error("cannot read " + what, EFBIG);
        if (!direct) {
            // A new string of exactly this size (most files end within these reads): append
            // and reserve double the capacity, and a kernel file of 1.5 KiB took 3 KiB of heap.
            std::string grown;
            grown.reserve(have + got);
            grown.append(out).append(small, got);
            out = std::move(grown);
        }
    }
}

}  // namespace lastcall
