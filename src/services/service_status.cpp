// SPDX-License-Identifier: Apache-2.0
#include "lastcall/services/service_status.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"

namespace lastcall {

std::string runtime_dir() {
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
        return std::string(xdg) + "/lastcall";
    if (::geteuid() == 0) return "/run/lastcall";
    return "/tmp/lastcall-" + std::to_string(::geteuid());
}

std::string status_path_for(const std::string& instance) {
    return runtime_dir() + "/" + instance + ".status";
}

namespace {

// The config path is the rest of its line, and a file name may hold a newline: written as it
// was, the rest of the name would be read as lines of their own (a forged service). Backslash
// and newline are escaped; nothing else needs to be.
std::string escape_line(const std::string& text) {
    std::string out;
    for (char c : text) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string unescape_line(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) {
            char next = text[++i];
            out += next == 'n' ? '\n' : next;
        } else {
            out += text[i];
        }
    }
    return out;
}

}  // namespace

std::string render_status(const StatusFile& f) {
    std::string out = "lastcall-status 1\nlastcall " + std::to_string(f.lastcall_pid) + "\n";
    if (!f.instance.empty()) out += "instance " + f.instance + "\n";
    // The path is the rest of the line: it may hold spaces (and, escaped, newlines).
    if (!f.config.empty()) out += "config " + escape_line(f.config) + "\n";
    for (const auto& s : f.services) {
        out += "service " + s.name + " " + (s.pid > 0 ? std::to_string(s.pid) : "-") + " " +
               s.state + " " + std::to_string(s.restarts) + " " +
               (s.since > 0 ? std::to_string(static_cast<long long>(s.since)) : "-") + "\n";
    }
    return out;
}

Result<StatusFile> parse_status(std::string_view text, const std::string& path) {
    StatusFile f;
    std::istringstream in{std::string(text)};
    std::string line;
    int number = 0;
    auto bad = [&](const std::string& why) {
        return Error{path + ":" + std::to_string(number) + ": " + why};
    };
    while (std::getline(in, line)) {
        ++number;
        std::istringstream words(line);
        std::string kind;
        words >> kind;
        if (number == 1) {
            int version = 0;
            words >> version;
            if (kind != "lastcall-status" || version != 1) return bad("not a lastcall status file");
        } else if (kind == "lastcall") {
            words >> f.lastcall_pid;
        } else if (kind == "instance") {
            words >> f.instance;
        } else if (kind == "config") {
            f.config = line.size() > 7 ? unescape_line(std::string_view(line).substr(7)) : "";
        } else if (kind == "service") {
            ServiceStatusRow row;
            std::string pid, since;
            words >> row.name >> pid >> row.state >> row.restarts >> since;
            if (!words) return bad("malformed service line");
            row.pid = pid == "-" ? -1 : static_cast<pid_t>(std::atol(pid.c_str()));
            row.since = since == "-" ? 0 : static_cast<std::time_t>(std::atoll(since.c_str()));
            f.services.push_back(row);
        } else if (!kind.empty()) {
            return bad("unknown line '" + kind + "'");
        }
    }
    if (number == 0) return Error{path + ": empty status file"};
    return f;
}

Status write_status_file(const std::string& path, const StatusFile& f) {
    // The directory must be lastcall's own (a /tmp/lastcall-UID made in advance by someone
    // else would let them swap the files in it). 0711: the notify proxy's per-run directory
    // may live in it too and must be reachable by a unit's user; nothing in it is listable.
    if (auto dir = ensure_owned_dir(dir_of(path), 0711, false); !dir) return dir.error();
    auto file = AtomicFile::create(path, 0600);
    if (!file) return file.error();
    if (auto st = file->write(render_status(f)); !st) return st;
    return file->commit();
}

void remove_status_file(const std::string& path) {
    auto [dir, name] = split_path(path);
    if (auto fd = ensure_owned_dir(dir, 0711, false)) ::unlinkat(fd->get(), name.c_str(), 0);
}

std::vector<LiveStatus> read_live_status(const std::function<void(const std::string&)>& warn) {
    std::string dir = runtime_dir();
    std::vector<std::string> files;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d)) {
            std::string name = e->d_name;
            if (name.size() > 7 && name.ends_with(".status")) files.push_back(dir + "/" + name);
        }
        ::closedir(d);
    }
    std::sort(files.begin(), files.end());
    std::vector<LiveStatus> out;
    for (const auto& path : files) {
        // Never a FIFO someone put in the shared directory: `lastcall status` must not hang.
        auto text = read_regular_file(path);
        if (!text) continue;  // removed by its lastcall between the listing and the read
        auto f = parse_status(*text, path);
        if (!f) {
            warn(f.error().message);
            continue;
        }
        // A file left by a lastcall that died without cleaning up describes nothing alive.
        if (f->lastcall_pid <= 0 || (::kill(f->lastcall_pid, 0) != 0 && errno == ESRCH)) continue;
        out.push_back({path, std::move(*f)});
    }
    return out;
}

}  // namespace lastcall
