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
    std::string out;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) return out;
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("cannot read " + what, errno);
        }
        if (out.size() + static_cast<std::size_t>(n) > limit)
            return sys_error("cannot read " + what, EFBIG);
        out.append(buf, static_cast<std::size_t>(n));
    }
}

}  // namespace lastcall
