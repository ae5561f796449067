// SPDX-License-Identifier: Apache-2.0
// The status file, the report, the metrics, and the output at the end.
#include "lastcall/services/service_manager.hpp"
#include "service_manager_internal.hpp"

#include "lastcall/metrics/metrics.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>

#include "lastcall/core/json.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/utf8.hpp"
#include "lastcall/process/environment.hpp"
#include "lastcall/process/process_ref.hpp"
#include "lastcall/process/stop.hpp"
#include "lastcall/services/service_status.hpp"

namespace lastcall {

// ---- status and report ----

// The file lists every service and is fsynced, and one event may change many (the stop of every
// service at once): written at each change, the stop of 1,000 services rewrote a file of 1,000
// rows 2,000 times, most of a 41 s stop with a 10 s grace (issue 42). So the first change of a
// turn is written at once (the file is current before what follows the change is logged), and
// the turn's later changes once, after its event.
void ServiceManager::write_status() {
    if (opts_.state_path.empty()) return;
    if (batching_status_ || status_posted_) {
        status_dirty_ = true;  // a slice of starts writes once, at its end; a turn, after it
        return;
    }
    write_status_now();
    status_posted_ = true;
    host_->post([this] {
        status_posted_ = false;
        if (status_dirty_) write_status_now();
    });
}

void ServiceManager::write_status_now() {
    status_dirty_ = false;
    if (opts_.state_path.empty()) return;
    StatusFile f;
    f.lastcall_pid = ::getpid();
    f.instance = opts_.instance;
    f.config = opts_.config_path;
    for (const auto& s : services_) {
        ServiceStatusRow row;
        row.name = s.spec.name;
        row.pid = s.pid;
        row.state = std::string(to_string(s.state));
        row.restarts = s.restarts();
        row.since = s.pid > 0 ? s.started_wall : 0;
        f.services.push_back(row);
    }
    // Said once per failure streak: a crash loop must not turn one problem into a log flood.
    auto st = write_status_file(opts_.state_path, f);
    if (!st && !status_failing_) spdlog::warn("status file not written: {}", st.error().message);
    status_failing_ = !st;
}

void ServiceManager::contribute_metrics(MetricsWriter& m) {
    for (const auto& s : services_) {
        m.sample("lastcall_service_restarts_total", "counter", "Restarts of each service",
                 {{"service", s.spec.name}}, s.restarts());
        m.sample("lastcall_service_state", "gauge",
                 "1 for each service's current state (pending, starting, ready, cleaning, backoff, "
                 "exited, failed, stopping, stopped)",
                 {{"service", s.spec.name}, {"state", std::string(to_string(s.state))}}, 1);
    }
}

void ServiceManager::contribute_report(JsonWriter& j) {
    j.key("services").begin_array();
    for (const auto& s : services_) {
        j.begin_object();
        j.field("name", s.spec.name);
        j.field("state", to_string(s.state));
        j.field("starts", s.starts);
        j.field("restarts", s.restarts());
        j.key("last_exit_code");
        if (s.last_status)
            j.value(exit_code_of(*s.last_status));
        else
            j.null();
        j.field("forced", s.forced());
        j.field("leftovers_killed", s.leftovers_killed);
        j.end_object();
    }
    j.end_array();
    j.field("service_starts_refused", refused_);
}

void ServiceManager::finished(int /*exit_code*/) {
    finish_output(*out_);
    if (!opts_.state_path.empty()) remove_status_file(opts_.state_path);
}

Result<std::vector<ServiceSpec>> load_config_services(const std::string& config_path,
                                                      const std::string& config_text) {
    if (config_path.empty()) return std::vector<ServiceSpec>{};
    return parse_services_toml(config_text, config_path);
}

}  // namespace lastcall
