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
#include <fstream>
#include <sstream>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
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

std::string render_status(const StatusFile& f) {
    std::string out = "lastcall-status 1\nlastcall " + std::to_string(f.lastcall_pid) + "\n";
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

int run_status(const std::vector<std::string>& args) {
    for (std::size_t i = 2; i < args.size(); ++i) {
        if (args[i] == "-h" || args[i] == "--help") {
            std::printf(
                "Usage: lastcall status\nShows the services of every running lastcall (from the "
                "status files in %s).\n",
                runtime_dir().c_str());
            return 0;
        }
        std::fprintf(stderr,
                     "lastcall status: unexpected argument '%s' (see lastcall status --help)\n",
                     args[i].c_str());
        return 2;
    }
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
    std::time_t now = std::time(nullptr);
    int shown = 0;
    for (const auto& path : files) {
        auto text = read_file(path);
        if (!text) continue;  // removed by its lastcall between the listing and the read
        auto f = parse_status(*text, path);
        if (!f) {
            std::fprintf(stderr, "lastcall status: %s\n", f.error().message.c_str());
            continue;
        }
        // A file left by a lastcall that died without cleaning up describes nothing alive.
        if (f->lastcall_pid <= 0 || (::kill(f->lastcall_pid, 0) != 0 && errno == ESRCH)) continue;
        if (shown++) std::printf("\n");
        std::printf("lastcall pid %d (%s)\n", static_cast<int>(f->lastcall_pid), path.c_str());
        std::size_t width = 7;
        for (const auto& s : f->services) width = std::max(width, s.name.size());
        int w = static_cast<int>(width);
        std::printf("%-*s  %-8s %-9s %-8s %s\n", w, "SERVICE", "PID", "STATE", "RESTARTS",
                    "UPTIME");
        for (const auto& s : f->services) {
            std::string pid = s.pid > 0 ? std::to_string(s.pid) : "-";
            std::string uptime =
                s.pid > 0 && s.since > 0
                    ? format_duration(Millis{std::max<long long>(0, now - s.since) * 1000})
                    : "-";
            std::printf("%-*s  %-8s %-9s %-8d %s\n", w, s.name.c_str(), pid.c_str(),
                        s.state.c_str(), s.restarts, uptime.c_str());
        }
    }
    if (shown == 0) {
        std::printf("no running lastcall with services (no live status file in %s)\n", dir.c_str());
        return 1;
    }
    return 0;
}

}  // namespace lastcall
