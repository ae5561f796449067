// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/safe_path.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>

#include "lastcall/core/fd_reserve.hpp"

namespace lastcall {

namespace {

// As the kernel's own limit on nested links (MAXSYMLINKS).
constexpr int kMaxLinks = 40;

// A directory whose entries only root or lastcall's own user can change.
bool trusted_dir(const struct stat& st) {
    return (st.st_uid == 0 || st.st_uid == ::geteuid()) && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

void push_components(std::deque<std::string>& out, const std::string& path) {
    std::deque<std::string> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        if (end > start) parts.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    out.insert(out.begin(), parts.begin(), parts.end());
}

}  // namespace

std::pair<std::string, std::string> split_path(const std::string& path) {
    auto slash = path.rfind('/');
    if (slash == std::string::npos) return {".", path};
    return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

namespace {

int open_beneath_once(int dirfd, const std::string& name, int flags, mode_t mode) {
    static bool have_openat2 = true;
    if (have_openat2) {
        open_how how{};
        how.flags = static_cast<std::uint64_t>(flags | O_NOFOLLOW | O_CLOEXEC);
        how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
        how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
        long fd = ::syscall(SYS_openat2, dirfd, name.c_str(), &how, sizeof how);
        if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return static_cast<int>(fd);
        // ENOSYS: before Linux 5.6, or a seccomp filter that says so. EPERM: older container
        // seccomp profiles deny system calls they do not know that way; the openat below then
        // decides (and gives the real EPERM, if that is what it was).
        if (errno == ENOSYS) have_openat2 = false;
    }
    if (name.find('/') != std::string::npos || name == "..") {
        errno = EXDEV;  // what RESOLVE_BENEATH says for an escape
        return -1;
    }
    return ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
}

}  // namespace

// Every open here goes through the reserve (fd_reserve.hpp): the report is written at the end of
// a run that may have used up RLIMIT_NOFILE, and these descriptors live only as long as a write.
int open_beneath(int dirfd, const std::string& name, int flags, mode_t mode) {
    return open_with_reserve([&] { return open_beneath_once(dirfd, name, flags, mode); });
}

Result<UniqueFd> open_dir_safely(const std::string& dir) {
    if (dir.empty()) return Error{"empty directory path"};
    // O_PATH on the way: a directory lastcall may search but not read (a non-root lastcall
    // under someone's 0711 directory) is still walked.
    constexpr int kWalk = O_PATH | O_DIRECTORY | O_CLOEXEC;
    const char* start = dir[0] == '/' ? "/" : ".";
    UniqueFd cur(open_with_reserve([&] { return ::open(start, kWalk); }));
    if (!cur) return sys_error("open " + std::string(start), errno);
    std::deque<std::string> todo;
    push_components(todo, dir);
    int links = 0;
    std::string walked = dir[0] == '/' ? "" : ".";
    while (!todo.empty()) {
        std::string name = std::move(todo.front());
        todo.pop_front();
        if (name == ".") continue;
        UniqueFd next(open_with_reserve(
            [&] { return ::openat(cur.get(), name.c_str(), kWalk | O_NOFOLLOW); }));
        if (next) {
            cur = std::move(next);
            walked += "/" + name;
            continue;
        }
        int err = errno;
        struct stat lst {};
        if (::fstatat(cur.get(), name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISLNK(lst.st_mode))
            return sys_error("open directory " + walked + "/" + name, err);
        struct stat here {};
        if (::fstat(cur.get(), &here) != 0) return sys_error("fstat " + walked, errno);
        if (!trusted_dir(here))
            return Error{"open directory " + dir + ": " + walked + "/" + name +
                         " is a symbolic link in a directory that uid " +
                         std::to_string(here.st_uid) + " or others can write; not followed"};
        if (++links > kMaxLinks) return sys_error("open directory " + dir, ELOOP);
        std::string target(4096, '\0');
        ssize_t n = ::readlinkat(cur.get(), name.c_str(), target.data(), target.size());
        if (n < 0) return sys_error("readlink " + walked + "/" + name, errno);
        target.resize(static_cast<std::size_t>(n));
        if (!target.empty() && target[0] == '/') {
            cur.reset(open_with_reserve([&] { return ::open("/", kWalk); }));
            if (!cur) return sys_error("open /", errno);
            walked.clear();
        }
        push_components(todo, target);
    }
    // The result is a real descriptor (fsync, fchmod and fchown need one); a directory that
    // can only be searched stays an O_PATH descriptor, which is enough for the *at() calls.
    UniqueFd readable(open_with_reserve(
        [&] { return ::openat(cur.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); }));
    if (readable) return readable;
    return cur;
}

Result<UniqueFd> create_file_at(int dirfd, const std::string& name, mode_t mode,
                                const std::string& shown) {
    // No O_TRUNC yet: a file that turns out to be the wrong kind must not be truncated.
    UniqueFd fd(open_beneath(dirfd, name, O_WRONLY | O_CREAT | O_NONBLOCK, mode));
    if (!fd) {
        int err = errno;
        if (err == ELOOP) return Error{"open " + shown + ": is a symbolic link; not followed"};
        // O_NONBLOCK on a FIFO without a reader (or a socket): not something to write to.
        if (err == ENXIO) return Error{"open " + shown + ": not a regular file; not written"};
        return sys_error("open " + shown, err);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return sys_error("fstat " + shown, errno);
    if (!S_ISREG(st.st_mode)) return Error{"open " + shown + ": not a regular file; not written"};
    if (st.st_nlink > 1)
        return Error{"open " + shown + ": has " + std::to_string(st.st_nlink) +
                     " hard links; not written"};
    if (::ftruncate(fd.get(), 0) != 0) return sys_error("truncate " + shown, errno);
    if (::fcntl(fd.get(), F_SETFL, 0) != 0) return sys_error("fcntl " + shown, errno);
    return fd;
}

Result<UniqueFd> create_file_safely(const std::string& path, mode_t mode) {
    auto [dir, name] = split_path(path);
    if (name.empty() || name == "." || name == "..")
        return Error{"open " + path + ": not a file name"};
    auto dirfd = open_dir_safely(dir);
    if (!dirfd) return dirfd.error();
    return create_file_at(dirfd->get(), name, mode, path);
}

Status remove_file_safely(const std::string& path) {
    auto [dir, name] = split_path(path);
    auto dirfd = open_dir_safely(dir);
    if (!dirfd) return dirfd.error();
    if (::unlinkat(dirfd->get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return sys_error("unlink " + path, errno);
    return Ok{};
}

Result<UniqueFd> ensure_owned_dir(const std::string& path, mode_t mode, bool make_parents) {
    auto [parent, name] = split_path(path);
    if (name.empty() || name == "." || name == "..") {
        // "/", "x/" or "..": open as given (a trailing slash leaves the name empty).
        auto fd = open_dir_safely(path);
        if (!fd) return fd.error();
        struct stat st {};
        if (::fstat(fd->get(), &st) != 0) return sys_error("fstat " + path, errno);
        if (!trusted_dir(st))
            return Error{path + ": owned by uid " + std::to_string(st.st_uid) +
                         " or writable by others; refusing to use it"};
        return fd;
    }
    auto pfd = open_dir_safely(parent);
    if (!pfd && make_parents) {
        // Missing parents are made by path: the worst a swapped component can do is put empty
        // directories elsewhere; the directory itself is then checked through a descriptor.
        for (std::size_t pos = 1;; ++pos) {
            pos = parent.find('/', pos);
            std::string p = parent.substr(0, pos);
            if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST)
                return sys_error("mkdir " + p, errno);
            if (pos == std::string::npos) break;
        }
        pfd = open_dir_safely(parent);
    }
    if (!pfd) return pfd.error();
    if (::mkdirat(pfd->get(), name.c_str(), mode) != 0 && errno != EEXIST)
        return sys_error("mkdir " + path, errno);
    UniqueFd fd(open_beneath(pfd->get(), name, O_RDONLY | O_DIRECTORY));
    if (!fd) {
        if (errno == ELOOP || errno == ENOTDIR)
            return Error{path +
                         ": not a directory (a symbolic link or a file); refusing to use it"};
        return sys_error("open directory " + path, errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return sys_error("fstat " + path, errno);
    if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        return Error{path + ": owned by uid " + std::to_string(st.st_uid) + " with mode " +
                     [&] {
                         char m[8];
                         std::snprintf(m, sizeof m, "%04o", st.st_mode & 07777);
                         return std::string(m);
                     }() +
                     "; lastcall needs it owned by uid " + std::to_string(::geteuid()) +
                     " and writable by nobody else"};
    return fd;
}

std::optional<std::string> real_path(const std::string& path) {
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), std::free);
    if (!real) return std::nullopt;
    return std::string(real.get());
}

std::optional<std::string> current_dir() {
    std::unique_ptr<char, decltype(&std::free)> cwd(::getcwd(nullptr, 0), std::free);
    if (!cwd) return std::nullopt;
    return std::string(cwd.get());
}

Status require_trusted_ancestors(const std::string& given) {
    // The real path first (links such as /var/run -> /run resolved), then each directory above
    // it, from the root down, reached without following a link: owned by root or lastcall's
    // user, and writable by nobody else unless sticky (in a sticky directory such as /tmp only
    // an entry's owner may rename it). Had anyone swapped a component while realpath ran, the
    // walk meets a directory they own, and refuses it.
    auto real = real_path(given);
    if (!real) return sys_error("realpath " + given, errno);
    std::string path = std::move(*real);
    UniqueFd at(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!at) return sys_error("open /", errno);
    std::string walked;
    auto [parent, name] = split_path(path);
    std::deque<std::string> parts;
    push_components(parts, parent);
    for (std::size_t i = 0;; ++i) {
        struct stat st {};
        if (::fstat(at.get(), &st) != 0) return sys_error("fstat " + walked, errno);
        bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
        if ((st.st_uid != 0 && st.st_uid != ::geteuid()) ||
            (others_write && (st.st_mode & S_ISVTX) == 0))
            return Error{(walked.empty() ? "/" : walked) + " (above " + path +
                         ") is owned by uid " + std::to_string(st.st_uid) +
                         " or writable by others: whoever can write "
                         "it can swap the directory lastcall checked for another; use one "
                         "whose parents only root or lastcall's user can change"};
        if (i == parts.size()) return Ok{};
        walked += "/" + parts[i];
        UniqueFd next(
            ::openat(at.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next) return sys_error("open directory " + walked, errno);
        at = std::move(next);
    }
}

Result<UniqueFd> open_owned_regular(int dirfd, const std::string& name, uid_t owner,
                                    const std::string& shown, struct stat* out) {
    UniqueFd fd(open_beneath(dirfd, name, O_RDONLY | O_NONBLOCK));
    if (!fd) {
        if (errno == ELOOP) return Error{shown + " is a symbolic link"};
        return sys_error(shown, errno);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return sys_error("fstat " + shown, errno);
    if (!S_ISREG(st.st_mode)) return Error{shown + " is not a regular file"};
    if (st.st_uid != owner)
        return Error{shown + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
                     std::to_string(owner) + " that the job runs as"};
    if (st.st_nlink != 1)
        return Error{shown + " has " + std::to_string(st.st_nlink) + " hard links"};
    if (out) *out = st;
    return fd;
}

// Where the report (or the metrics) will go must exist when lastcall starts, not be found
// missing at exit, when the record of how the run ended is lost and nothing can be done about it.
Status check_output_dir(const char* flag, const std::string& path) {
    if (path.empty()) return Ok{};
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string what = std::string(flag) + " " + path;
    if (name.empty() || name == "." || name == "..") return Error{what + ": not a file name"};
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return sys_error(what + ": directory " + dir, errno);
    if (!S_ISDIR(st.st_mode)) return Error{what + ": " + dir + " is not a directory"};
    if (::access(dir.c_str(), W_OK) != 0) return sys_error(what + ": directory " + dir, errno);
    // The file is renamed into place from a longer name beside it (AtomicFile's NAME.tmp.XXXXXX,
    // the emergency report's NAME.emergency.tmp): that name must fit the directory's limit too.
    long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
    if (name_max > 0 && name.size() + kLongestTempSuffix > static_cast<std::size_t>(name_max))
        return Error{what + ": file name longer than " +
                     std::to_string(name_max - static_cast<long>(kLongestTempSuffix)) +
                     " bytes (its temporary name beside it would be longer than the directory "
                     "allows)"};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return Error{what + ": is a directory"};
    return Ok{};
}

}  // namespace lastcall
