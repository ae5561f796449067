// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/limits.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>

#include <spdlog/spdlog.h>

#include "lastcall/core/fd.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/process/process_tree.hpp"

namespace lastcall {

namespace {

constexpr int kOomScoreAdjMin = -1000;  // OOM_SCORE_ADJ_MIN: never chosen by the OOM killer

UnitLimits g_unit_limits;
bool g_protected = false;
SelfProtection g_protection;
// The memory cgroup's counter file and its value at start-up ("" when there is none).
std::string g_oom_counter_path;
long long g_oom_kills_at_start = 0;

std::optional<int> read_oom_score_adj() {
    auto text = read_file("/proc/self/oom_score_adj");
    if (!text) return std::nullopt;
    int v = 0;
    const char* p = text->data();
    if (!text->empty() && *p == '-') ++p;
    auto [end, ec] = std::from_chars(p, text->data() + text->size(), v);
    if (ec != std::errc{} || end == p) return std::nullopt;
    return (*text)[0] == '-' ? -v : v;
}

// The file that counts the OOM kills in lastcall's memory cgroup, or "": cgroup v2's
// memory.events (there only where the memory controller is enabled for lastcall's cgroup), else
// the v1 memory controller's memory.oom_control.
std::string oom_counter_path() {
    if (auto dir = own_cgroup_dir(); dir) {
        std::string path = *dir + "/memory.events";
        if (::access(path.c_str(), R_OK) == 0) return path;
    }
    if (auto dir = own_v1_cgroup_dir("memory"); !dir.empty()) {
        std::string path = dir + "/memory.oom_control";
        if (::access(path.c_str(), R_OK) == 0) return path;
    }
    return {};
}

std::optional<long long> read_oom_kills(const std::string& path) {
    auto text = read_file(path);
    if (!text) return std::nullopt;
    return parse_oom_kill(*text);
}

}  // namespace

const UnitLimits& unit_limits() {
    return g_unit_limits;
}

std::optional<long long> parse_oom_kill(const std::string& text) {
    std::string_view rest(text);
    while (!rest.empty()) {
        std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        // "oom_kill 3", not "oom_kill_disable 0" nor "oom_group_kill 0".
        constexpr std::string_view key = "oom_kill ";
        if (!line.starts_with(key)) continue;
        long long v = 0;
        auto [end, ec] = std::from_chars(line.data() + key.size(), line.data() + line.size(), v);
        if (ec != std::errc{}) return std::nullopt;
        return v;
    }
    return std::nullopt;
}

SelfProtection protect_self() {
    if (g_protected) return g_protection;
    g_protected = true;
    SelfProtection& p = g_protection;

    rlimit nofile{};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        p.nofile_soft_before = p.nofile_soft_now = nofile.rlim_cur;
        if (nofile.rlim_cur < nofile.rlim_max) {
            rlimit raised = nofile;
            raised.rlim_cur = nofile.rlim_max;
            if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
                p.nofile_soft_now = raised.rlim_cur;
                g_unit_limits.restore_nofile = true;
                g_unit_limits.nofile = nofile;
                spdlog::debug("raised the soft RLIMIT_NOFILE from {} to {}; units get {}",
                              nofile.rlim_cur, raised.rlim_cur, nofile.rlim_cur);
            } else {
                spdlog::debug("soft RLIMIT_NOFILE kept at {}: {}", nofile.rlim_cur,
                              std::strerror(errno));
            }
        }
    }

    if (auto before = read_oom_score_adj()) {
        p.oom_score_adj_before = *before;
        p.oom_protected = *before == kOomScoreAdjMin;
        if (!p.oom_protected) {
            // Only root or CAP_SYS_RESOURCE may go below the value inherited: elsewhere (an
            // unprivileged container) lastcall keeps what it has, and its units share its odds.
            UniqueFd fd(::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC));
            char text[] = "-1000";
            if (fd && ::write(fd.get(), text, sizeof text - 1) == sizeof text - 1) {
                p.oom_protected = true;
                int n = std::snprintf(g_unit_limits.oom_score_adj,
                                      sizeof g_unit_limits.oom_score_adj, "%d", *before);
                g_unit_limits.oom_score_adj_len = static_cast<std::size_t>(n);
                g_unit_limits.restore_oom_score_adj = true;
                spdlog::debug("oom_score_adj set to -1000 (was {}; units get {})", *before,
                              *before);
            } else {
                spdlog::debug("oom_score_adj kept at {}: {}", *before, std::strerror(errno));
            }
        }
    }

    g_oom_counter_path = oom_counter_path();
    if (!g_oom_counter_path.empty()) {
        if (auto n = read_oom_kills(g_oom_counter_path))
            g_oom_kills_at_start = *n;
        else
            g_oom_counter_path.clear();
    }
    return p;
}

bool restore_nofile(const UnitLimits& limits) {
    if (!limits.restore_nofile) return true;
    return ::setrlimit(RLIMIT_NOFILE, &limits.nofile) == 0;
}

bool restore_oom_score_adj(const UnitLimits& limits) {
    if (!limits.restore_oom_score_adj) return true;
    int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = ::write(fd, limits.oom_score_adj, limits.oom_score_adj_len);
    int err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(limits.oom_score_adj_len)) {
        errno = n < 0 ? err : EIO;
        return false;
    }
    return true;
}

std::optional<long long> oom_kills_since_start() {
    if (g_oom_counter_path.empty()) return std::nullopt;
    auto now = read_oom_kills(g_oom_counter_path);
    if (!now) return std::nullopt;
    return *now - g_oom_kills_at_start;
}

}  // namespace lastcall
