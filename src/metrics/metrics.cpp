// SPDX-License-Identifier: Apache-2.0
#include "lastcall/metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lastcall/core/atomic_file.hpp"

namespace lastcall {

namespace {

// Label values escape backslash, double quote and newline (the text format's rules); HELP
// escapes backslash and newline.
std::string escaped(const std::string& s, bool quote) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (c == '"' && quote)
            out += "\\\"";
        else
            out += c;
    }
    return out;
}

std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

}  // namespace

void MetricsWriter::sample(const std::string& name, const char* type, const std::string& help,
                           const Labels& labels, double value) {
    Family& f = families_[name];
    if (f.type.empty()) {
        f.type = type;
        f.help = help;
    }
    std::string line = name;
    if (!labels.empty()) {
        line += '{';
        for (std::size_t i = 0; i < labels.size(); ++i) {
            if (i) line += ',';
            line += labels[i].first + "=\"" + escaped(labels[i].second, true) + '"';
        }
        line += '}';
    }
    f.lines.push_back(line + ' ' + number(value));
}

std::string MetricsWriter::text() const {
    std::string out;
    for (const auto& [name, f] : families_) {
        out += "# HELP " + name + ' ' + escaped(f.help, false) + '\n';
        out += "# TYPE " + name + ' ' + f.type + '\n';
        for (const auto& line : f.lines) out += line + '\n';
    }
    return out;
}

Status write_metrics_file(const std::string& path, const std::string& text) {
    auto file = AtomicFile::create(path, 0644);
    if (!file) return file.error();
    if (auto st = file->write(text); !st) return st;
    return file->commit();
}

}  // namespace lastcall

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

namespace lastcall {

MetricsFile::MetricsFile(std::string path, std::vector<SupervisorComponent*> sources,
                         const Clock& clock, Millis interval)
    : path_(std::move(path)), sources_(std::move(sources)), clock_(clock), interval_(interval) {}

Status MetricsFile::attach(Supervisor& sup) {
    sup_ = &sup;
    if (auto st = watch_new_timer(sup.loop(), timer_, [this] { on_timer(); }); !st) return st;
    write();
    // The first refresh comes soon: at attach the services have not started yet.
    return timer_->arm(clock_.now() + std::min(interval_, Millis{1000}));
}

void MetricsFile::on_timer() {
    timer_->consume();
    write();
    (void)timer_->arm(clock_.now() + interval_);
}

void MetricsFile::finished(int /*exit_code*/) {
    if (timer_) (void)timer_->arm(std::nullopt);
    write();
}

std::string metrics_text(const Supervisor* sup, const std::vector<SupervisorComponent*>& sources) {
    MetricsWriter m;
    m.sample("lastcall_info", "gauge", "lastcall's version; always 1",
             {{"version", LASTCALL_VERSION}}, 1);
    const Ending* end = sup ? sup->ending() : nullptr;
    m.sample("lastcall_running", "gauge", "1 while lastcall runs, 0 in the file it leaves at exit",
             {}, end ? 0 : 1);
    if (end) {
        for (const char* v : {"clean", "forced"})
            m.sample("lastcall_shutdown_verdict", "gauge",
                     "How the last run ended: 1 for its verdict, 0 for the other", {{"verdict", v}},
                     end->verdict == v ? 1 : 0);
        m.sample("lastcall_exit_code", "gauge", "lastcall's exit code", {}, end->exit_code);
        if (end->shutdown_seconds)
            m.sample("lastcall_shutdown_duration_seconds", "gauge",
                     "Time from the shutdown's trigger to the last process reaped", {},
                     *end->shutdown_seconds);
        m.sample("lastcall_shutdown_processes", "gauge",
                 "Processes of the final tree, by how the shutdown treated them",
                 {{"treatment", "tracked"}}, end->processes);
        m.sample("lastcall_shutdown_processes", "gauge", "", {{"treatment", "signalled"}},
                 end->signalled);
        m.sample("lastcall_shutdown_processes", "gauge", "", {{"treatment", "killed"}},
                 end->killed);
    }
    for (auto* c : sources)
        if (c) c->contribute_metrics(m);
    return m.text();
}

void MetricsFile::write() {
    auto st = write_metrics_file(path_, metrics_text(sup_, sources_));
    if (!st && !failing_) spdlog::warn("metrics file not written: {}", st.error().message);
    failing_ = !st;
}

}  // namespace lastcall
