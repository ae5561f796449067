// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/twin.hpp"

#include <limits.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "lastcall/core/linkage.hpp"
#include "lastcall/core/safe_path.hpp"

namespace lastcall::twin {

namespace {

constexpr const char* kVariable = "LASTCALL_HANDED_OVER";

// The start-up window (twin.hpp). One process, one main(): plain statics.
char** g_argv = nullptr;
sigset_t g_inherited_mask;
bool g_window_open = false;
// This process is itself a hand-over: it never hands over again, whatever its twin path names
// (a twin that is the static binary itself would otherwise exec it forever).
bool g_was_handed_over = false;

// The first 64 signals of a sigset_t as a number, bit n-1 for signal n: glibc's sigaddset()
// refuses its reserved real-time signals 32 and 33, and the kernel's mask is these 64 bits.
std::uint64_t mask_bits(const sigset_t& set) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &set, sizeof bits);
    return bits;
}

sigset_t mask_from_bits(std::uint64_t bits) {
    sigset_t set;
    ::sigemptyset(&set);
    std::memcpy(&set, &bits, sizeof bits);
    return set;
}

std::string hex(std::uint64_t v) {
    char buf[16];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v, 16).ptr);
}

std::string decimal(long v) {
    char buf[24];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// This executable's real path: /proc/self/exe, else (no /proc yet, early in a container) the
// path it was executed by, resolved (realpath walks the symlinks itself: a `tini` symlink leads
// to the real file, whose directory is the package's).
std::string own_path() {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) return std::string(self, static_cast<std::size_t>(n));
    auto execfn = reinterpret_cast<const char*>(::getauxval(AT_EXECFN));
    return execfn ? real_path(execfn).value_or(std::string()) : std::string();
}

// <directory of this executable>/<relative>: the twin sits where the package put it beside
// this binary, wherever the package's prefix is (the build tree mirrors it).
std::string twin_path(const char* relative) {
    std::string exe = own_path();
    auto slash = exe.rfind('/');
    if (slash == std::string::npos) return {};
    return exe.substr(0, slash + 1) + relative;
}

// The next '\n'-separated field of `rest`, consumed.
std::string_view next_field(std::string_view& rest) {
    auto nl = rest.find('\n');
    std::string_view field = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return field;
}

template <typename T>
bool parse_number(std::string_view text, T& out, int base) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    return !text.empty() && ec == std::errc{} && end == text.data() + text.size();
}

}  // namespace

void open_startup_window(char** argv, const sigset_t& inherited_mask) {
    g_argv = argv;
    g_inherited_mask = inherited_mask;
    g_window_open = true;
}

void close_startup_window() {
    g_window_open = false;
}

char** own_argv() {
    return g_argv;
}

void hand_over(std::string_view why) {
    const char* relative = twin_relative_path();
    if (!relative || !g_window_open || g_was_handed_over) return;
    std::string path = twin_path(relative);
    if (path.empty() || ::access(path.c_str(), X_OK) != 0) return;
    // The twin's comm would be its file name; the static binary's is what ps and pgrep knew.
    char comm[17] = {};
    ::prctl(PR_GET_NAME, comm, 0, 0, 0);
    // PID, mask, version, comm, reason: one field a line (the reason may hold spaces, a comm too).
    std::string value = decimal(::getpid()) + "\n" + hex(mask_bits(g_inherited_mask)) + "\n" +
                        LASTCALL_VERSION + "\n" + comm + "\n" + std::string(why);
    if (::setenv(kVariable, value.c_str(), 1) != 0) return;
    // Signals stay blocked across execve: one that arrives now is pending in the twin, which
    // takes it from its signalfd like any other.
    ::execv(path.c_str(), g_argv);
    ::unsetenv(kVariable);  // the exec failed: this binary goes on and reports its own error
}

void hand_over_before_reading(const std::string& path) {
    if (!twin_relative_path() || !g_window_open || path.empty()) return;
    struct stat st;
    // A directory (cron.d) is read again as well as a file.
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        hand_over(path + " is not a regular file: the twin could not read it again");
}

std::optional<HandedOver> take_handed_over() {
    const char* value = std::getenv(kVariable);
    if (!value) return std::nullopt;
    std::string_view rest(value);
    long pid = 0;
    std::uint64_t bits = 0;
    bool ok = parse_number(next_field(rest), pid, 10) && pid == ::getpid() &&
              parse_number(next_field(rest), bits, 16);
    std::string_view version = next_field(rest);
    std::string_view comm = next_field(rest);
    std::optional<HandedOver> result;
    if (ok && !version.empty()) {
        // For this very process (execve keeps the PID): not a copy some parent left behind.
        result = HandedOver{mask_from_bits(bits), std::string(version), std::string(rest)};
        g_was_handed_over = true;
        std::string name(comm.substr(0, 15));
        if (!name.empty()) ::prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
    }
    // Malformed, stale or not, no child of lastcall sees it.
    ::unsetenv(kVariable);
    return result;
}

bool nss_beyond_files(std::string_view conf) {
    auto is_space = [](char c) {
        return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
    };
    while (!conf.empty()) {
        std::string_view line = next_field(conf);
        // glibc's nss_database.c: leading blanks skipped; only a line starting with '#' is a
        // comment; the name ends at a blank or a colon, and blanks and colons follow it.
        std::size_t i = 0;
        while (i < line.size() && is_space(line[i])) ++i;
        if (i == line.size() || line[i] == '#') continue;
        std::size_t name_start = i;
        while (i < line.size() && !is_space(line[i]) && line[i] != ':') ++i;
        std::string_view db = line.substr(name_start, i - name_start);
        if (db != "passwd" && db != "group" && db != "initgroups") continue;
        while (i < line.size() && (is_space(line[i]) || line[i] == ':')) ++i;
        while (i < line.size()) {
            if (is_space(line[i])) {
                ++i;
                continue;
            }
            if (line[i] == '[') {  // [NOTFOUND=return] and the like are actions, not sources
                auto close = line.find(']', i);
                if (close == std::string_view::npos) break;
                i = close + 1;
                continue;
            }
            std::size_t start = i;
            while (i < line.size() && !is_space(line[i]) && line[i] != '[') ++i;
            // Anything but `files` is a source NSS would ask: a '#' here too (glibc would try
            // to load libnss_#.so.2 and go on to the next).
            if (line.substr(start, i - start) != "files") return true;
        }
    }
    return false;
}

}  // namespace lastcall::twin
