// SPDX-License-Identifier: Apache-2.0
// Private to src/process/{process_tree,cgroup_tracker,proc_tracker}.cpp: the helpers they share.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/process/process_tree.hpp"

namespace lastcall::proctree {

// Defined in process_tree.cpp.
void throw_if_out_of_memory(int err);
std::vector<pid_t> parse_pids(std::string_view text);
std::string read_kernel_file(const std::string& path);
int kill_each(const std::vector<ProcInfo>& members, const MemberFilter& record);
// Whether the kernel has /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN).
bool have_proc_children();
// The children of `pid` from its children files: only its main thread's where `single` says it
// has no other (a process's children hang off the thread that forked them).
std::vector<pid_t> children_of(pid_t pid, bool single);
// Defined in proc_tracker.cpp: reap_all tells the /proc scopes' record of lastcall's children that
// `pid` was reaped (its number may name another process from now on).
void forget_child(pid_t pid);

template <typename F>
void for_each_entry(const std::string& dir, F&& f) {
    // Closed however the walk ends: a callback may throw (out of memory, read_kernel_file).
    // Opened through the reserve (core/fd_reserve.hpp): the stop path lists the cgroups it
    // freezes, enumerates and kills, at a limit the tree may have used up.
    int fd =
        open_with_reserve([&] { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
    auto close_dir = [](DIR* dir) {
        ::closedir(dir);
        fd_reserve_refill();  // as UniqueFd's close does
    };
    std::unique_ptr<DIR, decltype(close_dir)> d(fd >= 0 ? ::fdopendir(fd) : nullptr, close_dir);
    if (fd >= 0 && !d) {
        int err = errno;
        ::close(fd);
        errno = err;
    }
    if (!d) {
        throw_if_out_of_memory(errno);
        return;
    }
    while (dirent* e = ::readdir(d.get())) f(*e);
}

// Defined in cgroup_tracker.cpp; make_tracker (proc_tracker.cpp) falls back from it to /proc.
Result<std::unique_ptr<Tracker>> make_cgroup_tracker(const std::string& instance, bool main_leaf);

}  // namespace lastcall::proctree
