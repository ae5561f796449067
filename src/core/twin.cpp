// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/twin.hpp"

#include <limits.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "lastcall/core/linkage.hpp"

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

// <directory of this executable>/<relative>: the twin sits where the package put it beside
// this binary, wherever the package's prefix is (the build tree mirrors it).
std::string twin_path(const char* relative) {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return {};  // no /proc yet: no twin can be found, none is used
    std::string_view exe(self, static_cast<std::size_t>(n));
    auto slash = exe.rfind('/');
    if (slash == std::string_view::npos) return {};
    return std::string(exe.substr(0, slash + 1)) + relative;
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

void hand_over(std::string_view why) {
    const char* relative = twin_relative_path();
    if (!relative || !g_window_open || g_was_handed_over) return;
    std::string path = twin_path(relative);
    if (path.empty() || ::access(path.c_str(), X_OK) != 0) return;
    char bits[17];
    auto end = std::to_chars(bits, bits + 16, mask_bits(g_inherited_mask), 16).ptr;
    std::string value = std::string(bits, end) + " " + std::string(why);
    if (::setenv(kVariable, value.c_str(), 1) != 0) return;
    // Signals stay blocked across execve: one that arrives now is pending in the twin, which
    // takes it from its signalfd like any other.
    ::execv(path.c_str(), g_argv);
    ::unsetenv(kVariable);  // the exec failed: this binary goes on and reports its own error
}

std::optional<HandedOver> take_handed_over() {
    const char* value = std::getenv(kVariable);
    if (!value) return std::nullopt;
    std::string_view text(value);
    std::uint64_t bits = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bits, 16);
    std::optional<HandedOver> result;
    if (ec == std::errc{} && end != text.data() &&
        (end == text.data() + text.size() || *end == ' ')) {
        std::string why(end == text.data() + text.size() ? end : end + 1,
                        text.data() + text.size());
        result = HandedOver{mask_from_bits(bits), std::move(why)};
        g_was_handed_over = true;
    }
    // Malformed or not, no child of lastcall sees it.
    ::unsetenv(kVariable);
    return result;
}

bool nss_beyond_files(std::string_view conf) {
    while (!conf.empty()) {
        auto nl = conf.find('\n');
        std::string_view line = conf.substr(0, nl);
        conf = nl == std::string_view::npos ? std::string_view() : conf.substr(nl + 1);
        if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        std::string_view db = line.substr(0, colon);
        while (!db.empty() && (db.front() == ' ' || db.front() == '\t')) db.remove_prefix(1);
        while (!db.empty() && (db.back() == ' ' || db.back() == '\t')) db.remove_suffix(1);
        if (db != "passwd" && db != "group" && db != "initgroups") continue;
        std::string_view rest = line.substr(colon + 1);
        std::size_t i = 0;
        while (i < rest.size()) {
            char c = rest[i];
            if (c == ' ' || c == '\t') {
                ++i;
                continue;
            }
            if (c == '[') {  // [NOTFOUND=return] and the like are actions, not sources
                auto close = rest.find(']', i);
                if (close == std::string_view::npos) break;
                i = close + 1;
                continue;
            }
            auto stop = rest.find_first_of(" \t[", i);
            std::string_view source =
                rest.substr(i, stop == std::string_view::npos ? stop : stop - i);
            if (source != "files") return true;
            i = stop == std::string_view::npos ? rest.size() : stop;
        }
    }
    return false;
}

}  // namespace lastcall::twin
