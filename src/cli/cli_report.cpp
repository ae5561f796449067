// SPDX-License-Identifier: Apache-2.0
// `lastcall report`: the shutdown report for people. The JSON is read with nlohmann-json (only
// this file includes it); every key is optional here, so a report of an emergency exit or of an
// older lastcall still renders what it has.
#include "lastcall/cli/report_cli.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "lastcall/cli/cli11_app.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/text_table.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/core/utf8.hpp"

namespace lastcall {
namespace {

using nlohmann::json;

std::optional<long long> parse_iso_ms(const json& v) {
    if (!v.is_string()) return std::nullopt;
    auto ms = parse_iso_utc_ms(v.get_ref<const std::string&>());
    return ms ? std::optional<long long>(*ms) : std::nullopt;
}

// Every text of the report as printable() shows it: a command line, a comm, a reason may be a
// unit's, and the report is read on a terminal.
std::string str(const json& obj, const char* key, std::string fallback = "") {
    if (!obj.is_object()) return fallback;
    auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? printable(it->get_ref<const std::string&>())
                                              : fallback;
}

std::optional<long long> num(const json& obj, const char* key) {
    if (!obj.is_object()) return std::nullopt;
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<long long>();
}

const json& sub(const json& obj, const char* key) {
    static const json null;
    if (!obj.is_object()) return null;
    auto it = obj.find(key);
    return it != obj.end() ? *it : null;
}

// Seconds after the shutdown began, with milliseconds: "+0.037s", "+20.005s".
std::string offset(long long ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%lld.%03llds", ms < 0 ? "-" : "+", std::llabs(ms) / 1000,
                  std::llabs(ms) % 1000);
    return buf;
}

std::string seconds(long long ms) {
    char buf[32];
    if (ms % 1000 == 0)
        std::snprintf(buf, sizeof buf, "%llds", ms / 1000);
    else
        std::snprintf(buf, sizeof buf, "%.3gs", static_cast<double>(ms) / 1000.0);
    return buf;
}

std::string plural(long long n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

// A command line as a person would type it again.
std::string command_line(const json& argv) {
    std::string out;
    if (!argv.is_array()) return out;
    for (const auto& a : argv) {
        if (!a.is_string()) continue;
        std::string s = a.get<std::string>();
        bool plain =
            !s.empty() && s.find_first_of(" \t\n'\"\\$`;&|<>()*?[]#~") == std::string::npos;
        if (!out.empty()) out += ' ';
        if (plain) {
            out += s;
            continue;
        }
        out += '\'';
        for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
        out += '\'';
    }
    return out;
}

// How one process ended, in words.
std::string ending_of(const json& p) {
    std::string ending = str(p, "ending");
    if (ending == "exited") return "exited " + std::to_string(num(p, "exit_code").value_or(-1));
    if (ending == "signalled") return "killed by " + str(p, "signal", "a signal");
    if (ending == "killed") return "forced: SIGKILL";
    if (ending == "gone") return "gone (its parent reaped it)";
    if (ending == "survived")
        return "survived SIGKILL (state " + str(p, "state", "?") + ", in " + str(p, "wchan", "?") +
               "): still running";
    return "still running";
}

struct TimelineEntry {
    long long at;
    std::string what;
    // Order within one millisecond: what starts the stop (signals received, the drain, the
    // hook) 0, the stop and what it does 1, the end of the shutdown 2.
    int rank = 0;
};

class Renderer {
  public:
    Renderer(const json& r, const ReportView& view) : r_(r), view_(view) {}

    std::string render() {
        header();
        timeline();
        processes();
        jobs();
        services();
        return out_.str();
    }

  private:
    // Zero of every offset: the trigger, else the first state entered.
    long long zero() const {
        if (auto t = parse_iso_ms(sub(sub(r_, "trigger"), "at"))) return *t;
        for (const auto& t : sub(r_, "transitions"))
            if (auto at = parse_iso_ms(sub(t, "at"))) return *at;
        return 0;
    }

    void header() {
        std::string verdict = str(r_, "verdict", "unknown");
        auto code = num(r_, "exit_code");
        out_ << "lastcall shutdown: " << verdict;
        if (code) out_ << ", exit code " << *code;
        if (sub(r_, "emergency").is_boolean() && sub(r_, "emergency").get<bool>())
            out_ << " (emergency: " << str(r_, "reason", "unknown reason") << ")";
        if (sub(r_, "start_failed").is_object())
            out_ << " (the command did not start: " << str(sub(r_, "start_failed"), "error", "?")
                 << ")";
        out_ << "\n";
        if (auto n = num(r_, "reaped_in_teardown")) {
            bool main = sub(r_, "main_reaped").is_boolean() && sub(r_, "main_reaped").get<bool>();
            row("teardown", std::string("emergency teardown: SIGKILL to the tree, ") +
                                plural(*n, "process", "processes") + " reaped; the main command " +
                                (main ? "was reaped" : "was not reaped"));
        }
        std::string cmd = command_line(sub(r_, "command"));
        // One line: a script's newlines and indentation read as single spaces, and a long
        // command is cut to the width.
        std::string flat;
        for (char ch : cmd) {
            bool blank = ch == '\n' || ch == '\t' || ch == '\r' || ch == ' ';
            if (!blank)
                flat += ch;
            else if (!flat.empty() && flat.back() != ' ')
                flat += ' ';
        }
        cmd = printable(flat);
        std::size_t room = static_cast<std::size_t>(std::max(20, view_.width - 12));
        if (cmd.size() > room) cmd = cmd.substr(0, room - 3) + "...";
        if (!cmd.empty()) row("command", cmd);
        const json& trigger = sub(r_, "trigger");
        std::string kind = str(trigger, "kind");
        std::string when;
        if (auto at = parse_iso_ms(sub(trigger, "at"))) when = ", " + wall(*at);
        if (kind == "signal")
            row("trigger", str(trigger, "signal", "a signal") + " received" + when);
        else if (kind == "main-exited")
            row("trigger", main_exited(trigger) + when);
        else if (!kind.empty())
            row("trigger", "none (lastcall ended without a shutdown request)");
        const json& budget = sub(r_, "budget");
        if (auto grace = num(budget, "grace_ms")) {
            std::string text = seconds(num(budget, "used_ms").value_or(0)) + " used of " +
                               seconds(*grace) + " grace";
            if (auto delay = num(budget, "drain_delay_ms"); delay && *delay > 0)
                text += " (drain delay " + seconds(*delay) + ")";
            row("time", text);
        }
        for (const auto& f : sub(r_, "force_facts")) {
            std::string text = fact_text(f);
            if (auto at = parse_iso_ms(sub(f, "at"))) text += " at " + offset(*at - zero_);
            row("forced by", text);
        }
        if (sub(r_, "abandoned").is_boolean() && sub(r_, "abandoned").get<bool>()) {
            std::string pids;
            for (const auto& p : sub(r_, "processes"))
                if (str(p, "ending") == "survived")
                    pids +=
                        (pids.empty() ? "pid " : ", ") + std::to_string(num(p, "pid").value_or(0));
            row("abandoned", "processes outlived SIGKILL (uninterruptible sleep); lastcall left" +
                                 (pids.empty() ? std::string() : ": " + pids + " still running"));
        }
        std::string tracker = str(r_, "tracker");
        if (!tracker.empty()) {
            std::string text = tracker + " tracker, stop signal to the " +
                               str(r_, "kill_scope", "tree") + "; " +
                               plural(num(r_, "reaped_total").value_or(0), "process", "processes") +
                               " reaped in all";
            row("tree", text);
        }
        if (auto lost = num(r_, "log_lines_lost"); lost && *lost > 0)
            row("log", plural(*lost, "line", "lines") + " of lastcall's log lost (stderr full)");
    }

    void timeline() {
        std::vector<TimelineEntry> ev;
        const json& trigger = sub(r_, "trigger");
        for (const auto& b : sub(r_, "signals")) {
            auto at = parse_iso_ms(sub(b, "at"));
            if (!at) continue;
            long long n = num(b, "count").value_or(1);
            ev.push_back({*at, str(b, "signal", "a signal") + " received" +
                                   (n > 1 ? " (" + std::to_string(n) + " times)" : "")});
        }
        if (str(trigger, "kind") == "main-exited")
            if (auto at = parse_iso_ms(sub(trigger, "at")))
                ev.push_back({*at, main_exited(trigger)});
        for (const auto& t : sub(r_, "transitions")) {
            auto at = parse_iso_ms(sub(t, "at"));
            std::string state = str(t, "state");
            if (!at || state == "running") continue;
            int rank = state == "draining" ? 0 : state == "stopped" ? 2 : 1;
            ev.push_back({*at, state + ": " + state_meaning(state), rank});
        }
        const json& hook = sub(r_, "pre_stop");
        if (auto at = parse_iso_ms(sub(hook, "started_at")))
            ev.push_back({*at, "pre-stop hook started"});
        if (auto at = parse_iso_ms(sub(hook, "ended_at"))) {
            std::string how = num(hook, "exit_code")
                                  ? "exited " + std::to_string(*num(hook, "exit_code"))
                                  : "killed by " + str(hook, "signal", "a signal");
            ev.push_back({*at, "pre-stop hook " + how});
        }
        // The stop signal goes out in passes a few microseconds apart: one line per signal and
        // millisecond, with the count.
        std::vector<std::pair<long long, std::string>> sent;
        for (const auto& p : sub(r_, "processes"))
            if (auto at = parse_iso_ms(sub(p, "signalled_at")))
                sent.emplace_back(*at, str(p, "stop_signal", "the stop signal"));
        std::sort(sent.begin(), sent.end());
        for (std::size_t i = 0; i < sent.size();) {
            std::size_t j = i;
            while (j < sent.size() && sent[j] == sent[i]) ++j;
            ev.push_back({sent[i].first,
                          sent[i].second + " sent to " +
                              plural(static_cast<long long>(j - i), "process", "processes"),
                          1});
            i = j;
        }
        for (const auto& f : sub(r_, "force_facts")) {
            auto at = parse_iso_ms(sub(f, "at"));
            if (!at || str(f, "kind") == "entered-forcing") continue;
            ev.push_back({*at, fact_text(f), 1});
        }
        // Each exit (the hook's is the line above).
        auto hook_pid = num(hook, "pid");
        for (const auto& p : sub(r_, "processes"))
            if (auto at = parse_iso_ms(sub(p, "ended_at")); at && num(p, "pid") != hook_pid)
                ev.push_back({*at,
                              "pid " + std::to_string(num(p, "pid").value_or(0)) + " " +
                                  str(p, "comm", "?") + " " + ending_of(p),
                              1});
        if (ev.empty()) return;
        std::stable_sort(ev.begin(), ev.end(), [](const TimelineEntry& a, const TimelineEntry& b) {
            return a.at != b.at ? a.at < b.at : a.rank < b.rank;
        });
        out_ << "\ntimeline (seconds after the "
             << (str(trigger, "kind") == "none" ? "start" : "trigger") << ")\n";
        std::size_t w = 0;
        for (const auto& e : ev) w = std::max(w, offset(e.at - zero_).size());
        for (const auto& e : ev)
            out_ << "  " << pad(offset(e.at - zero_), w) << "  " << e.what << "\n";
    }

    // One fact that made the shutdown forced (docs/report.md, force_facts).
    static std::string fact_text(const json& f) {
        std::string kind = str(f, "kind", "?"), source = str(f, "source", "?");
        std::string n = plural(num(f, "count").value_or(0), "process", "processes");
        if (kind == "sigkill") return source + ": SIGKILL to " + n;
        if (kind == "cgroup.kill") return source + ": SIGKILL to " + n + " (cgroup.kill)";
        if (kind == "entered-forcing") return source + ": forcing began";
        if (kind == "abandoned") return source + ": " + n + " outlived SIGKILL";
        return source + ": " + kind;
    }

    // The comm, and what the process was to lastcall where the report says.
    std::string name_of(const json& p) const {
        std::string name = str(p, "comm", "?");
        auto hook = num(sub(r_, "pre_stop"), "pid");
        if (hook && num(p, "pid") == hook) name += " (pre-stop hook)";
        return name;
    }

    // What ended the run: the main command, or what a component named (a Procfile's first
    // process to exit: "service worker exited with code 3"; a Procfile has no main command).
    static std::string main_exited(const json& trigger) {
        std::string reason = str(trigger, "reason");
        return reason.empty() ? "the main command exited" : reason;
    }

    static std::string state_meaning(const std::string& state) {
        if (state == "draining") return "readiness off, no new work admitted";
        if (state == "stopping") return "the stop signal goes out";
        if (state == "forcing") return "SIGKILL to whatever is left";
        if (state == "stopped") return "every process reaped";
        return "";
    }

    void processes() {
        const json& procs = sub(r_, "processes");
        if (!procs.is_array() || procs.empty()) return;
        long long end = zero_;
        for (const auto& t : sub(r_, "transitions"))
            if (auto at = parse_iso_ms(sub(t, "at"))) end = std::max(end, *at);
        for (const auto& p : procs)
            if (auto at = parse_iso_ms(sub(p, "ended_at"))) end = std::max(end, *at);
        std::vector<std::vector<std::string>> rows;
        // UNIT: which service, job run or the main command each process was part of. A report
        // written before processes had units is drawn without the column.
        bool units = std::any_of(procs.begin(), procs.end(),
                                 [](const json& p) { return !str(p, "unit").empty(); });
        rows.push_back({"PID", "UNIT", "COMMAND", "SIGNAL", "ENDING", "AT"});
        for (const auto& p : procs) {
            std::string pid = std::to_string(num(p, "pid").value_or(0));
            if (sub(p, "main").is_boolean() && sub(p, "main").get<bool>()) pid += "*";
            auto ended = parse_iso_ms(sub(p, "ended_at"));
            rows.push_back({pid, str(p, "unit", "-"), name_of(p), str(p, "stop_signal", "-"),
                            ending_of(p), ended ? offset(*ended - zero_) : "-"});
        }
        if (!units)
            for (auto& r : rows) r.erase(r.begin() + 1);
        std::vector<std::size_t> w(rows[0].size(), 0);
        for (const auto& r : rows)
            for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
        std::size_t text = 2;
        for (auto x : w) text += x + 2;
        // The bar spans the shutdown, from the trigger to its last event; `-` alive, `=` told to
        // stop, then how it ended: `|` by itself, `X` SIGKILLed, `?` reaped by its parent.
        int bar = std::max(10, view_.width - static_cast<int>(text) - 2);
        bool bars = view_.width - static_cast<int>(text) >= 20 && end > zero_;
        out_ << "\nprocesses (* the main command";
        if (bars) out_ << "; bar: - running, = sent the stop signal, | ended, X SIGKILLed";
        out_ << ")\n";
        for (std::size_t r = 0; r < rows.size(); ++r) {
            std::string line = " ";
            for (std::size_t i = 0; i < rows[r].size(); ++i)
                line += " " + pad(rows[r][i], w[i]) + " ";
            if (bars && r == 0) line += "|" + axis(bar, end - zero_) + "|";
            if (bars && r > 0) line += "|" + bar_of(procs[r - 1], bar, end) + "|";
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out_ << line << "\n";
        }
    }

    // "0s" at the left, the span at the right.
    static std::string axis(int width, long long span_ms) {
        std::string right = seconds(span_ms);
        std::string s(static_cast<std::size_t>(width), ' ');
        s.replace(0, 2, "0s");
        if (static_cast<int>(right.size()) + 3 < width)
            s.replace(static_cast<std::size_t>(width) - right.size(), right.size(), right);
        return s;
    }

    std::string bar_of(const json& p, int width, long long end) const {
        auto col = [&](long long at) {
            long long c = (at - zero_) * width / std::max(1LL, end - zero_);
            return static_cast<int>(std::clamp(c, 0LL, static_cast<long long>(width - 1)));
        };
        auto signalled = parse_iso_ms(sub(p, "signalled_at"));
        auto ended = parse_iso_ms(sub(p, "ended_at"));
        int stop_col = signalled ? col(*signalled) : width;
        int end_col = ended ? col(*ended) : width - 1;
        std::string s(static_cast<std::size_t>(width), ' ');
        for (int c = 0; c <= end_col && c < width; ++c) s[c] = c < stop_col ? '-' : '=';
        std::string ending = str(p, "ending");
        char mark = ending == "killed" ? 'X' : ending == "gone" ? '?' : ended ? '|' : '>';
        s[static_cast<std::size_t>(end_col)] = mark;
        return s;
    }

    void jobs() {
        const json& jobs = sub(r_, "jobs");
        if (!jobs.is_object()) return;
        const json& runs = sub(jobs, "interrupted_runs");
        if (runs.is_array() && !runs.empty()) {
            out_ << "\njob runs interrupted by the shutdown\n";
            std::vector<std::vector<std::string>> rows{{"ID", "JOB", "PID", "SCHEDULED", "REASON"}};
            for (const auto& r : runs)
                rows.push_back({std::to_string(num(r, "id").value_or(0)), str(r, "job"),
                                std::to_string(num(r, "pid").value_or(0)), str(r, "scheduled_at"),
                                str(r, "reason")});
            table(rows);
        }
        for (const auto& u : sub(jobs, "unrecorded"))
            out_ << "  not recorded: run " << num(u, "id").value_or(0) << " of " << str(u, "job")
                 << " as " << str(u, "state") << ": " << str(u, "error") << "\n";
        for (const auto& f : sub(jobs, "unrecorded_fire_times")) {
            out_ << "  not recorded: "
                 << plural(num(f, "count").value_or(0), "fire time", "fire times") << " of "
                 << str(f, "job") << " as " << str(f, "state");
            if (auto first = str(f, "first_fire_time"); !first.empty())
                out_ << " (" << first << " to " << str(f, "last_fire_time") << ")";
            out_ << ": " << str(f, "error") << "\n";
        }
        if (auto n = num(jobs, "skipped_at_shutdown"); n && *n > 0)
            out_ << "  " << plural(*n, "run", "runs") << " not started: the shutdown had begun\n";
        if (auto n = num(jobs, "unclaimed"); n && *n > 0)
            out_ << "  " << plural(*n, "fire time", "fire times")
                 << " not run here: the shared ledger could not be reached to claim them\n";
        if (auto r = str(jobs, "replica");
            !r.empty() && str(jobs, "ledger_backend") == "postgresql")
            out_ << "  replica: " << r << "\n";
        std::string ledger = str(jobs, "ledger");
        if (!ledger.empty()) out_ << "  ledger: " << ledger << "\n";
    }

    void services() {
        const json& svcs = sub(r_, "services");
        if (!svcs.is_array() || svcs.empty()) return;
        out_ << "\nservices\n";
        std::vector<std::vector<std::string>> rows{
            {"NAME", "STATE", "STARTS", "RESTARTS", "LAST EXIT", "ENDED"}};
        for (const auto& s : svcs) {
            auto last = num(s, "last_exit_code");
            bool forced = sub(s, "forced").is_boolean() && sub(s, "forced").get<bool>();
            // A service lastcall stopped ended on its stop signal, not by itself.
            std::string ended = forced                         ? "forced: SIGKILL"
                                : str(s, "state") == "stopped" ? "on its stop signal"
                                                               : "by itself";
            // Kills of an exited instance's leftovers while running: not the shutdown's.
            if (auto n = num(s, "leftovers_killed"); n && *n > 0)
                ended += " (leftovers killed " + std::to_string(*n) + "x while running)";
            rows.push_back({str(s, "name"), str(s, "state"),
                            std::to_string(num(s, "starts").value_or(0)),
                            std::to_string(num(s, "restarts").value_or(0)),
                            last ? std::to_string(*last) : "-", ended});
        }
        table(rows);
    }

    void table(const std::vector<std::vector<std::string>>& rows) {
        out_ << format_table(rows, "  ");
    }

    void row(const char* label, const std::string& text) {
        out_ << "  " << pad(label, 10) << text << "\n";
    }

    static std::string pad(std::string s, std::size_t w) {
        if (s.size() < w) s.append(w - s.size(), ' ');
        return s;
    }

    static std::string wall(long long ms) {
        std::time_t t = static_cast<std::time_t>(ms / 1000);
        std::tm tm{};
        ::gmtime_r(&t, &tm);
        char buf[48];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%03lld UTC",
                      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                      tm.tm_sec, ms % 1000);
        return buf;
    }

    const json& r_;
    ReportView view_;
    long long zero_ = zero();
    std::ostringstream out_;
};

int terminal_width() {
    struct winsize ws {};
    if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    if (const char* c = std::getenv("COLUMNS")) {
        int n = std::atoi(c);
        if (n > 0) return n;
    }
    return 80;
}

}  // namespace

Result<std::string> render_report_text(std::string_view text, const ReportView& view) {
    json r = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (r.is_discarded()) return Error{"not JSON"};
    if (!r.is_object() || !num(r, "schema"))
        return Error{"not a lastcall shutdown report (no \"schema\" key)"};
    if (*num(r, "schema") != 1)
        return Error{"report schema " + std::to_string(*num(r, "schema")) +
                     " is newer than this lastcall reads (1)"};
    return Renderer(r, view).render();
}

int run_report(const std::vector<std::string>& args) {
    CLI::App app{
        "lastcall report: the JSON shutdown report (--report FILE) for people: the "
        "verdict, a timeline of the shutdown and how each process, job run and service "
        "ended.",
        "lastcall report"};
    set_usage(app, "Usage: lastcall report [OPTIONS] [FILE]");
    std::string path;
    int width = 0;
    app.add_option("file", path, "The report; - or none: standard input");
    app.add_option("--width", width, "Columns to draw in (default: the terminal's, else 80)")
        ->check(CLI::Range(40, 1000));
    GlobalOptions global;
    add_global_options(app, global);
    if (auto code = parse_subcommand(app, args, "report")) return *code;
    std::string text;
    if (path.empty() || path == "-") {
        if (path.empty() && ::isatty(STDIN_FILENO)) {
            std::fprintf(stderr,
                         "lastcall report: no report given (lastcall report FILE, or pipe one "
                         "in; see lastcall report --help)\n");
            return 2;
        }
        path = "standard input";
        auto in = read_all(STDIN_FILENO, path);
        if (!in) {
            std::fprintf(stderr, "lastcall report: %s: %s\n", path.c_str(),
                         std::strerror(in.error().code));
            return 1;
        }
        text = std::move(*in);
    } else {
        auto file = read_file(path);
        if (!file) {
            std::fprintf(stderr, "lastcall report: %s: %s\n", path.c_str(),
                         std::strerror(file.error().code));
            return 1;
        }
        text = std::move(*file);
    }
    auto rendered = render_report_text(text, ReportView{width ? width : terminal_width()});
    if (!rendered) {
        std::fprintf(stderr, "lastcall report: %s: %s\n", path.c_str(),
                     rendered.error().message.c_str());
        return 1;
    }
    std::fputs(rendered->c_str(), stdout);
    return 0;
}

}  // namespace lastcall
