// SPDX-License-Identifier: Apache-2.0
// Reading /proc: a process's stat, cmdline and environment, the walk of lastcall's descendants.
#include "lastcall/process/process_tree.hpp"
#include "process_tree_internal.hpp"

#include "lastcall/core/fd_reserve.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/process/process_ref.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <string_view>
#include <utility>

namespace lastcall {

namespace proctree {

// Out of memory is not "nothing there": a /proc or cgroup listing that failed for lack of memory
// would make a live tree look empty, and lastcall would stop waiting for processes it never
// signalled. It becomes std::bad_alloc, which the emergency teardown handles (cgroup.kill or
// SIGKILL to every pid, reap, a minimal report).
void throw_if_out_of_memory(int err) {
    if (err == ENOMEM) throw std::bad_alloc();
}

// "12 345 6789 ": the pids of a children file or of cgroup.procs, without a string stream (a
// walk parses one such file per process).
std::vector<pid_t> parse_pids(std::string_view text) {
    std::vector<pid_t> out;
    const char* p = text.data();
    const char* end = p + text.size();
    while (p < end) {
        if (*p < '0' || *p > '9') {
            ++p;
            continue;
        }
        pid_t pid = 0;
        auto [next, ec] = std::from_chars(p, end, pid);
        if (ec == std::errc{}) out.push_back(pid);
        p = next;
    }
    return out;
}

// A /proc or cgroup file: empty when the process or cgroup is gone (or was never ours to read).
std::string read_kernel_file(const std::string& path) {
    auto text = read_file(path);
    if (text) return std::move(*text);
    throw_if_out_of_memory(text.error().code);
    return {};
}

int kill_each(const std::vector<ProcInfo>& members, const MemberFilter& record) {
    int n = 0;
    for (const auto& p : members) {
        if (!record(p)) continue;
        if (signal_exact(p, SIGKILL)) ++n;
    }
    return n;
}

}  // namespace proctree

using proctree::for_each_entry;
using proctree::parse_pids;
using proctree::read_kernel_file;
using proctree::throw_if_out_of_memory;

namespace {

std::vector<pid_t> numeric_entries(const std::string& dir) {
    std::vector<pid_t> out;
    for_each_entry(dir, [&](const dirent& e) {
        char* end = nullptr;
        long v = std::strtol(e.d_name, &end, 10);
        if (end != e.d_name && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
    });
    return out;
}

}  // namespace

namespace proctree {

bool have_proc_children() {
    static const bool have = [] {
        std::string p = "/proc/self/task/" + std::to_string(::getpid()) + "/children";
        return ::access(p.c_str(), R_OK) == 0;
    }();
    return have;
}

std::vector<pid_t> children_of(pid_t pid, bool single) {
    auto tids = single ? std::vector<pid_t>{pid}
                       : numeric_entries("/proc/" + std::to_string(pid) + "/task");
    std::vector<pid_t> out;
    for (pid_t tid : tids) {
        auto pids = parse_pids(read_kernel_file("/proc/" + std::to_string(pid) + "/task/" +
                                                std::to_string(tid) + "/children"));
        out.insert(out.end(), pids.begin(), pids.end());
    }
    return out;
}

}  // namespace proctree

using proctree::children_of;
using proctree::have_proc_children;

bool run_queue_crowded() {
    // "0.52 0.58 0.59 3/412 12345": the fourth field is runnable/total scheduling entities.
    std::string text = read_kernel_file("/proc/loadavg");
    std::size_t field = 0, pos = 0;
    while (field < 3 && (pos = text.find(' ', pos)) != std::string::npos) ++field, ++pos;
    if (field < 3) return false;
    long running = std::strtol(text.c_str() + pos, nullptr, 10);
    // 16 runnable per CPU: lastcall, one of them, gets a few milliseconds of CPU per scheduler
    // period, and each period is 16 time slices long or more; a walk of thousands of /proc
    // files then spans many periods. A fork bomb at ulimit -u 2000 shows ~2,000.
    long cpus = std::max(::sysconf(_SC_NPROCESSORS_ONLN), 1L);
    return running > 16 * cpus;
}

std::optional<ProcInfo> read_proc_stat(pid_t pid) {
    // One open, one read, one close, no allocation but comm: a walk of a fork bomb reads this
    // file for each of its thousands of processes while the grace runs out. The file is one
    // seq_file record produced whole, and the fields parsed (through 22, starttime) end within
    // its first ~500 bytes (19 numbers of at most 20 digits after a comm of at most 64), so the
    // first read has them: the read that would return 0 at the end is not made. 1 KiB, not 4:
    // the buffer lies on the stop path's deepest frame, and every stack page is a fault.
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    UniqueFd fd(open_with_reserve([&] { return ::open(path, O_RDONLY | O_CLOEXEC); }));
    if (!fd) {
        throw_if_out_of_memory(errno);
        return std::nullopt;
    }
    char buf[1024];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    return parse_proc_stat(pid, std::string_view(buf, static_cast<std::size_t>(n)));
}

std::optional<ProcInfo> parse_proc_stat(pid_t pid, std::string_view s) {
    // comm may contain spaces and parentheses: it ends at the *last* ')'.
    auto open = s.find('('), close = s.rfind(')');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
        close + 2 >= s.size())
        return std::nullopt;
    ProcInfo info;
    info.pid = pid;
    info.comm = std::string(s.substr(open + 1, close - open - 1));
    // Field 3 (state) follows ") "; the numeric fields after it are separated by one space.
    info.state = s[close + 2];
    const char* p = s.data() + close + 3;
    const char* end = s.data() + s.size();
    // Fields 4 (ppid), 5 (pgrp), 6 (session), 20 (num_threads) and 22 (starttime).
    long long fields[23] = {};
    for (int i = 4; i <= 22; ++i) {
        if (p >= end || *p != ' ') return std::nullopt;
        ++p;
        auto [next, ec] = std::from_chars(p, end, fields[i]);
        if (ec != std::errc{}) return std::nullopt;
        p = next;
    }
    info.ppid = static_cast<pid_t>(fields[4]);
    info.pgid = static_cast<pid_t>(fields[5]);
    info.sid = static_cast<pid_t>(fields[6]);
    info.threads = static_cast<long>(fields[20]);
    info.start = static_cast<unsigned long long>(fields[22]);
    return info;
}

std::string read_cmdline(pid_t pid) {
    std::string s = read_kernel_file("/proc/" + std::to_string(pid) + "/cmdline");
    while (!s.empty() && s.back() == '\0') s.pop_back();
    for (char& c : s)
        if (c == '\0') c = ' ';
    return s;
}

std::string read_wchan(pid_t pid) {
    return read_kernel_file("/proc/" + std::to_string(pid) + "/wchan");
}

bool is_alive(const ProcInfo& p) {
    if (p.state == 'X') return false;
    if (p.state != 'Z') return true;
    // A zombie leader with live threads. The kernel counts a thread group's threads until each
    // is released, so the stat file of a true zombie says 1 (the leader itself) and that of a
    // leader whose other threads run says more: no listing of /proc/<pid>/task for each of the
    // zombies a force leaves behind. Unknown (0): /proc/<pid>/task lists the live threads.
    if (p.threads > 0) return p.threads > 1;
    return numeric_entries("/proc/" + std::to_string(p.pid) + "/task").size() > 1;
}

std::vector<FoundProcess> processes_with_environment(const std::vector<std::string>& entries,
                                                     const std::vector<std::string>& read) {
    std::vector<FoundProcess> out;
    pid_t self = ::getpid();
    for (pid_t pid : numeric_entries("/proc")) {
        if (pid == self) continue;
        std::string env = read_kernel_file("/proc/" + std::to_string(pid) + "/environ");
        if (env.empty()) continue;  // gone, a kernel thread, or not ours to read
        std::size_t found = 0;
        std::vector<std::string> values(read.size());
        for (std::size_t pos = 0; pos < env.size();) {
            std::size_t end = env.find('\0', pos);
            if (end == std::string::npos) end = env.size();
            std::string_view var(env.data() + pos, end - pos);
            for (const auto& e : entries) found += var == e;
            for (std::size_t i = 0; i < read.size(); ++i)
                if (var.size() > read[i].size() && var.substr(0, read[i].size()) == read[i] &&
                    var[read[i].size()] == '=')
                    values[i] = std::string(var.substr(read[i].size() + 1));
            pos = end + 1;
        }
        if (found < entries.size()) continue;
        if (auto info = read_proc_stat(pid); info && is_alive(*info))
            out.push_back({*info, std::move(values)});
    }
    return out;
}

std::vector<ProcInfo> processes_with_environment(const std::vector<std::string>& entries) {
    std::vector<ProcInfo> out;
    for (auto& f : processes_with_environment(entries, {})) out.push_back(f.info);
    return out;
}

std::vector<ProcInfo> descendants_of(pid_t root, const std::function<bool()>& out_of_time,
                                     const std::function<void(const ProcInfo&)>& listed) {
    std::vector<ProcInfo> out;
    std::size_t reads = 0;
    // As PID 1 of the namespace /proc shows, the listing below reads one file per process where
    // the walk reads two (a process's children file, and each child's stat): the listing holds
    // the namespace and little else (lastcall's tree, and what `docker exec` entered, which the
    // parent map leaves out), where on the host it would read every process of the machine.
    // A 10,000-process teardown with the /proc tracker: 60,000 -> 30,000 system calls a pass.
    if (have_proc_children() && !(root == ::getpid() && proc_lists_own_namespace())) {
        // (pid, single-threaded, index in out): a single-threaded process's children are all in
        // its main thread's file, which saves listing its task directory (5 system calls of ~13
        // per process; 2,000 processes of a fork bomb are walked while the grace runs out). Not
        // for a zombie leader: its one live thread is another task, which holds the children.
        struct Next {
            pid_t pid;
            bool single;
            std::size_t index;  // in out; kRoot: nobody to hand over (the root, a dead child)
        };
        constexpr std::size_t kRoot = static_cast<std::size_t>(-1);
        std::vector<Next> stack{{root, false, kRoot}};
        std::set<pid_t> seen{root};
        while (!stack.empty()) {
            // Every 16 /proc reads (a process's children files, a child's stat): the budget
            // is checked in the middle of a deep tree and of a flat one alike.
            if (out_of_time && ++reads % 16 == 0 && out_of_time()) return out;
            auto [p, single, index] = stack.back();
            stack.pop_back();
            for (pid_t c : children_of(p, single)) {
                if (!seen.insert(c).second) continue;
                // A flat tree (orphans reparented to lastcall) comes from one file.
                if (out_of_time && ++reads % 16 == 0 && out_of_time()) return out;
                auto info = read_proc_stat(c);
                bool alive = info && is_alive(*info);
                if (alive) out.push_back(*info);
                // A true zombie has no children: its threads' exits gave them away.
                if (info && !alive) continue;
                stack.push_back({c, info && info->threads == 1 && info->state != 'Z',
                                 alive ? out.size() - 1 : kRoot});
            }
            if (listed && index != kRoot) listed(out[index]);
        }
        return out;
    }
    // Without the children files: one pass over /proc builds the parent map.
    std::multimap<pid_t, ProcInfo> by_parent;
    for (pid_t pid : numeric_entries("/proc")) {
        if (out_of_time && ++reads % 16 == 0 && out_of_time()) break;
        if (auto info = read_proc_stat(pid)) by_parent.emplace(info->ppid, *info);
    }
    std::vector<pid_t> stack{root};
    while (!stack.empty()) {
        pid_t p = stack.back();
        stack.pop_back();
        auto [lo, hi] = by_parent.equal_range(p);
        for (auto it = lo; it != hi; ++it) {
            if (is_alive(it->second)) out.push_back(it->second);
            stack.push_back(it->second.pid);
        }
    }
    if (listed)
        for (const auto& p : out) listed(p);
    return out;
}

bool proc_lists_own_namespace() {
    // /proc/self names the reader as the mount's pid namespace numbers it: "1" for its PID 1
    // only. lastcall as PID 1 under a /proc of another namespace (unshare without --mount-proc)
    // sees the host's processes there, not its own.
    static const bool own = [] {
        if (::getpid() != 1) return false;
        char buf[16];
        ssize_t n = ::readlink("/proc/self", buf, sizeof buf);
        return n == 1 && buf[0] == '1';
    }();
    return own;
}

std::vector<ProcInfo> namespace_descendants_outside(const std::vector<pid_t>& listed) {
    std::set<pid_t> inside(listed.begin(), listed.end());
    pid_t self = ::getpid();
    std::map<pid_t, ProcInfo> others;  // every other process of the namespace, by pid
    for (pid_t pid : numeric_entries("/proc"))
        if (pid != self && !inside.count(pid))
            if (auto info = read_proc_stat(pid)) others.emplace(pid, std::move(*info));
    // Whether a process is lastcall's descendant, decided up its chain of parents among the
    // others (memoized: a deep chain is followed once).
    std::map<pid_t, bool> known;
    std::function<bool(pid_t)> descends = [&](pid_t pid) {
        if (pid == self || inside.count(pid)) return true;
        auto it = others.find(pid);
        if (it == others.end()) return false;  // parent 0 (entered from outside), or gone
        if (auto k = known.find(pid); k != known.end()) return k->second;
        known[pid] = false;  // a cycle cannot happen; a pid reused meanwhile must not loop
        return known[pid] = descends(it->second.ppid);
    };
    std::vector<ProcInfo> out;
    for (auto& [pid, info] : others)
        if (is_alive(info) && descends(info.ppid)) out.push_back(info);
    return out;
}

int Tracker::signal_all(int sig, const MemberFilter& filter, int max_passes) {
    int total = 0;
    for (int pass = 0; pass < max_passes; ++pass) {
        int signalled = 0;
        (void)members_listing([&](const ProcInfo& p) {
            if (filter(p) && signal_exact(p, sig)) ++signalled;
        });
        total += signalled;
        if (signalled == 0) break;
    }
    return total;
}

}  // namespace lastcall
