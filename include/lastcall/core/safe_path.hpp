// SPDX-License-Identifier: Apache-2.0
// Opening paths for writing as root when an unprivileged process shares the filesystem.
//
// The attacker is an app in the same container (docs/security.md): it can plant a symbolic
// link, a FIFO, a hard link or a directory wherever it may write, and swap them while lastcall
// works. So every file lastcall writes as root is reached through a directory descriptor:
//   - open_dir_safely() walks the directory one component at a time with O_NOFOLLOW. A symbolic
//     link is followed only where it sits in a trusted directory (owned by root or lastcall's
//     user, writable by nobody else): /var/run -> /run works, a link planted in /tmp or in an
//     app's own directory does not.
//   - the file itself is opened relative to that descriptor with openat2(RESOLVE_NO_SYMLINKS)
//     where the kernel has it (O_NOFOLLOW otherwise), non-blocking (a planted FIFO must not
//     hang lastcall), and must turn out to be a regular file with no other hard link.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"

namespace lastcall {

// "dir/name" -> {"dir", "name"}; "name" -> {".", "name"}; "/name" -> {"/", "name"}.
std::pair<std::string, std::string> split_path(const std::string& path);

// A directory as a descriptor (O_RDONLY | O_DIRECTORY), reached as described above.
Result<UniqueFd> open_dir_safely(const std::string& dir);

// The longest suffix a file written into place gets on its temporary name beside it:
// ".emergency.tmp" (shutdown/emergency.cpp); AtomicFile's ".tmp.XXXXXX" is shorter.
inline constexpr std::size_t kLongestTempSuffix = 14;

// An output file given as `flag PATH` (--report, --metrics-file) can be written: a file name
// (not a directory), in a directory that exists and is writable, short enough for its temporary
// name: checked when lastcall starts, not found impossible at exit when the record is lost.
Status check_output_dir(const char* flag, const std::string& path);

// openat2(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH),
// or openat with O_NOFOLLOW on kernels before 5.6. `name` is one component.
int open_beneath(int dirfd, const std::string& name, int flags, mode_t mode = 0);

// Creates or truncates the regular file `name` in dirfd for writing. Refuses a symbolic link,
// anything but a regular file, and a file with more than one link. `shown` names it in errors.
Result<UniqueFd> create_file_at(int dirfd, const std::string& name, mode_t mode,
                                const std::string& shown);
// The same for a full path: open_dir_safely(its directory), then create_file_at.
Result<UniqueFd> create_file_safely(const std::string& path, mode_t mode);

// unlinkat through the directory reached by open_dir_safely(): removing a name never follows a
// link the app planted on the way. A missing file is not an error.
Status remove_file_safely(const std::string& path);

// A directory lastcall keeps its own files in (status files, the run ledger, the notify proxy):
// created with `mode` if missing (its parents with 0755 when make_parents), and then required to
// be a real directory owned by lastcall's effective uid and writable by nobody else, so that
// nothing in it can be planted or swapped by another user.
Result<UniqueFd> ensure_owned_dir(const std::string& path, mode_t mode, bool make_parents);

// For a directory that a library later opens by path (SQLite opens the ledger and its -wal and
// -shm by name): every directory above it must be owned by root or lastcall's user and writable
// by nobody else unless sticky. Otherwise whoever can write a parent can swap the checked
// directory for another between the check and each open.
Status require_trusted_ancestors(const std::string& path);

// realpath(3) of `path`, or nullopt (errno set). The result is built on the heap: a PATH_MAX
// buffer in the caller's frame made it 4 KiB deeper, and a start's deepest stack page was one
// such frame (every stack page a run touches is a page fault and resident memory; issue 18).
std::optional<std::string> real_path(const std::string& path);

// The working directory, or nullopt (errno set); on the heap for the same reason.
std::optional<std::string> current_dir();

// A file that another (less privileged) user was meant to write, opened read-only through
// dirfd: a regular file (not a link, device or FIFO), owned by `owner`, with one link.
Result<UniqueFd> open_owned_regular(int dirfd, const std::string& name, uid_t owner,
                                    const std::string& shown, struct stat* out = nullptr);

}  // namespace lastcall
