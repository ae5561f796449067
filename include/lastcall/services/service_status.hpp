// SPDX-License-Identifier: Apache-2.0
// The services' status file and `lastcall status`.
//
// Each lastcall that runs services writes <runtime dir>/<instance id>.status (mode 0600, in a 0700
// directory), atomically, on every change of a service's state; `lastcall status` reads every
// such file whose lastcall is still alive. A plain line format, one service per line, because
// the reader is lastcall itself and a shell user with cat:
//   lastcall-status 1
//   lastcall <pid>
//   service <name> <pid or -> <state> <restarts> <started, unix seconds, or ->
#pragma once

#include <sys/types.h>

#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"

namespace lastcall {

struct ServiceStatusRow {
    std::string name;
    pid_t pid = -1;  // -1: no running instance
    std::string state;
    int restarts = 0;
    std::time_t since = 0;  // wall-clock start of the current instance; 0: none
};

struct StatusFile {
    pid_t lastcall_pid = 0;
    std::string instance;  // instance_id(): what `lastcall status ID` selects
    std::string config;    // absolute path of --config, or empty
    std::vector<ServiceStatusRow> services;
};

// $XDG_RUNTIME_DIR/lastcall when set, else /run/lastcall as root, else /tmp/lastcall-<uid>.
std::string runtime_dir();
// One file per instance (instance_id(): not the pid, which is 1 in every container).
std::string status_path_for(const std::string& instance);

std::string render_status(const StatusFile& f);
Result<StatusFile> parse_status(std::string_view text, const std::string& path);
// Creates the runtime directory (0700) if needed and replaces the file atomically (0600).
Status write_status_file(const std::string& path, const StatusFile& f);
// The status files of the live lastcall instances (a file left by one that died is skipped);
// unreadable files are reported to `warn` and skipped.
struct LiveStatus {
    std::string path;
    StatusFile file;
};
std::vector<LiveStatus> read_live_status(const std::function<void(const std::string&)>& warn);
// Removes it at exit, through the same checked directory (never through a planted link).
void remove_status_file(const std::string& path);

}  // namespace lastcall
