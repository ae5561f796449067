// SPDX-License-Identifier: Apache-2.0
// `lastcall status [SELECTOR...]`: the services of the running lastcall instances, read from their
// status files (services/service_status), as a table or as JSON.
#include "lastcall/cli/status_cli.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "lastcall/cli/cli11_app.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/text_table.hpp"
#include "lastcall/core/utf8.hpp"
#include "lastcall/services/service_status.hpp"

namespace lastcall {

namespace {

bool all_digits(const std::string& s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One instance as shown: the file, and the services of it that the selectors kept.
struct Shown {
    const LiveStatus* status;
    std::vector<const ServiceStatusRow*> rows;
};

// A selector keeps an instance by its lastcall pid or a service's pid (digits), by its config
// file (a path), by its instance id (or a prefix of it), or keeps the services of that name.
void select(const LiveStatus& live, const std::string& sel, Shown& shown, bool& matched) {
    const StatusFile& f = live.file;
    auto all_rows = [&] {
        for (const auto& r : f.services)
            if (std::find(shown.rows.begin(), shown.rows.end(), &r) == shown.rows.end())
                shown.rows.push_back(&r);
        matched = true;
    };
    if (all_digits(sel)) {
        pid_t pid = static_cast<pid_t>(std::atol(sel.c_str()));
        if (f.lastcall_pid == pid) return all_rows();
        for (const auto& r : f.services)
            if (r.pid == pid) shown.rows.push_back(&r), matched = true;
        return;
    }
    if (sel.find('/') != std::string::npos || sel.ends_with(".toml")) {
        if (!f.config.empty() && f.config == real_path(sel).value_or(sel)) all_rows();
        return;
    }
    if (!f.instance.empty() && f.instance.starts_with(sel)) return all_rows();
    for (const auto& r : f.services)
        if (r.name == sel) shown.rows.push_back(&r), matched = true;
}

std::string uptime_of(const ServiceStatusRow& s, std::time_t now) {
    if (s.pid <= 0 || s.since <= 0) return "-";
    return format_duration(Millis{std::max<long long>(0, now - s.since) * 1000});
}

void print_table(const std::vector<Shown>& shown, std::time_t now) {
    bool first = true;
    for (const auto& sh : shown) {
        const StatusFile& f = sh.status->file;
        if (!first) std::printf("\n");
        first = false;
        // What a status file says is printed as printable() shows it: a config's path (any
        // bytes but NUL) or a file planted in the runtime dir must not drive the terminal.
        std::printf("lastcall pid %d, instance %s%s%s (%s)\n", static_cast<int>(f.lastcall_pid),
                    f.instance.empty() ? "-" : printable(f.instance).c_str(),
                    f.config.empty() ? "" : ", config ", printable(f.config).c_str(),
                    printable(sh.status->path).c_str());
        std::vector<std::vector<std::string>> rows{
            {"SERVICE", "PID", "STATE", "RESTARTS", "UPTIME"}};
        for (const auto* s : sh.rows)
            rows.push_back({printable(s->name), s->pid > 0 ? std::to_string(s->pid) : "-",
                            printable(s->state), std::to_string(s->restarts), uptime_of(*s, now)});
        std::fputs(format_table(rows).c_str(), stdout);
    }
}

void print_json(const std::vector<Shown>& shown, std::time_t now) {
    JsonWriter j;
    j.begin_array();
    for (const auto& sh : shown) {
        const StatusFile& f = sh.status->file;
        j.begin_object()
            .field("lastcall_pid", static_cast<long long>(f.lastcall_pid))
            .field("instance", f.instance)
            .field("config", f.config)
            .field("status_file", sh.status->path);
        j.key("services").begin_array();
        for (const auto* s : sh.rows) {
            j.begin_object().field("name", s->name);
            j.key("pid");
            s->pid > 0 ? j.value(static_cast<long long>(s->pid)) : j.null();
            j.field("state", s->state).field("restarts", s->restarts);
            j.key("uptime_seconds");
            s->pid > 0 && s->since > 0 ? j.value(std::max<long long>(0, now - s->since)) : j.null();
            j.end_object();
        }
        j.end_array().end_object();
    }
    j.end_array();
    std::printf("%s\n", j.str().c_str());
}

}  // namespace

int run_status(const std::vector<std::string>& args) {
    CLI::App app{
        "lastcall status: the services of the running lastcall instances, from their "
        "status files in " +
            runtime_dir() + ".",
        "lastcall status"};
    set_usage(app, "Usage: lastcall status [OPTIONS] [NAME|PID|CONFIG|INSTANCE]...");
    std::vector<std::string> selectors;
    bool json = false;
    app.add_option("selector", selectors,
                   "Show only these: a service name, a pid (lastcall's or a service's), a config "
                   "file, an instance id (or its start)");
    app.add_flag("--json", json, "A JSON array instead of tables");
    GlobalOptions global;  // accepted before or after the name; status prints no log lines
    add_global_options(app, global);
    if (auto code = parse_subcommand(app, args, "status")) return *code;
    auto live = read_live_status(
        [](const std::string& why) { std::fprintf(stderr, "lastcall status: %s\n", why.c_str()); });
    std::vector<Shown> shown;
    for (const auto& l : live) {
        Shown sh{&l, {}};
        if (selectors.empty()) {
            for (const auto& r : l.file.services) sh.rows.push_back(&r);
            shown.push_back(std::move(sh));
            continue;
        }
        bool matched = false;
        for (const auto& sel : selectors) select(l, sel, sh, matched);
        if (matched) shown.push_back(std::move(sh));
    }
    std::time_t now = std::time(nullptr);
    if (json) {
        print_json(shown, now);
    } else if (!shown.empty()) {
        print_table(shown, now);
    } else if (selectors.empty()) {
        std::printf("no running lastcall with services (no live status file in %s)\n",
                    runtime_dir().c_str());
    } else {
        std::fprintf(stderr, "lastcall status: no running lastcall matches");
        for (const auto& sel : selectors) std::fprintf(stderr, " '%s'", sel.c_str());
        std::fprintf(stderr, " (status files in %s)\n", runtime_dir().c_str());
    }
    return shown.empty() ? 1 : 0;
}

}  // namespace lastcall
