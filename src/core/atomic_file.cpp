// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/core/safe_path.hpp"

namespace lastcall {

std::string dir_of(const std::string& path) {
    auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

Status fsync_dir(const std::string& dir) {
    UniqueFd fd(
        open_with_reserve([&] { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }));
    if (!fd) return sys_error("open directory " + dir, errno);
    if (::fsync(fd.get()) != 0) return sys_error("fsync directory " + dir, errno);
    return Ok{};
}

Result<AtomicFile> AtomicFile::create(std::string final_path, int mode) {
    auto [dir, name] = split_path(final_path);
    if (name.empty() || name == "." || name == "..")
        return Error{"create " + final_path + ": not a file name"};
    auto dirfd = open_dir_safely(dir);
    if (!dirfd)
        return Error{"create temporary file for " + final_path + ": " + dirfd.error().message};
    // Random, created exclusively and never through a link: a name guessed in advance by
    // someone else makes the open fail and the next name is tried.
    for (int attempt = 0; attempt < 100; ++attempt) {
        unsigned char rnd[6];
        if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
            return sys_error("getrandom", errno);
        static constexpr char kChars[] =
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        std::string temp_name = name + ".tmp.";
        for (unsigned char c : rnd) temp_name += kChars[c % 62];
        UniqueFd fd(open_beneath(dirfd->get(), temp_name, O_WRONLY | O_CREAT | O_EXCL,
                                 static_cast<mode_t>(mode)));
        if (!fd) {
            if (errno == EEXIST) continue;
            return sys_error("create temporary file for " + final_path, errno);
        }
        std::string temp = (dir == "/" ? "" : dir) + "/" + temp_name;
        if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
            int err = errno;
            ::unlinkat(dirfd->get(), temp_name.c_str(), 0);
            return sys_error("fchmod " + temp, err);
        }
        return AtomicFile(std::move(final_path), std::move(temp), std::move(*dirfd), name,
                          std::move(temp_name), std::move(fd));
    }
    return sys_error("create temporary file for " + final_path, EEXIST);
}

AtomicFile::~AtomicFile() {
    if (!committed_ && dir_) ::unlinkat(dir_.get(), temp_name_.c_str(), 0);
}

Status AtomicFile::write(std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd_.get(), data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return sys_error("write " + temp_, errno);
        }
        data.remove_prefix(static_cast<size_t>(n));
    }
    return Ok{};
}

Status AtomicFile::commit() {
    // Data before name: after a crash the final name shows either the old file or the full new one.
    if (::fsync(fd_.get()) != 0) return sys_error("fsync " + temp_, errno);
    if (::close(fd_.release()) != 0) return sys_error("close " + temp_, errno);
    // rename(2) replaces whatever is at the final name (a planted link included) and never
    // writes through it.
    if (::renameat(dir_.get(), temp_name_.c_str(), dir_.get(), final_name_.c_str()) != 0)
        return sys_error("rename " + temp_ + " to " + final_, errno);
    committed_ = true;
    if (::fsync(dir_.get()) != 0) return sys_error("fsync directory of " + final_, errno);
    return Ok{};
}

}  // namespace lastcall
