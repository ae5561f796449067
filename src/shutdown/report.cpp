// SPDX-License-Identifier: Apache-2.0
#include "lastcall/shutdown/report.hpp"

#include "lastcall/metrics/metrics.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <ctime>

#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/timefmt.hpp"

namespace lastcall {

void ProcessBook::set_main(pid_t pid, const std::vector<std::string>& command) {
    // Nothing is read from /proc here, on the start-up path: the command is known, and what the
    // kernel shows of it right after the exec is the same (comm: the executed file's name, cut
    // to 15 bytes). The start time, which tells this process from a later one with its pid, is
    // filled in by the first observation of a live main child (observe(): a record without one
    // takes it), the shutdown's stop signal; a main child that ended before needs none.
    main_pid_ = pid;
    ProcessRecord r;
    r.pid = pid;
    r.pgid = pid;  // spawned in its own group (or session)
    r.is_main = true;
    r.unit = "main";
    if (!command.empty()) {
        std::string_view exe = command.front();
        if (auto slash = exe.rfind('/'); slash != std::string_view::npos)
            exe.remove_prefix(slash + 1);
        r.comm = std::string(exe.substr(0, 15));
    }
    for (std::size_t i = 0; i < command.size(); ++i) r.cmdline += (i ? " " : "") + command[i];
    live_[pid] = records_.size();
    records_.push_back(std::move(r));
}

ProcessRecord* ProcessBook::live_main() {
    auto it = live_.find(main_pid_);
    return it == live_.end() ? nullptr : &records_[it->second];
}

ProcessRecord& ProcessBook::observe(const ProcInfo& info) {
    auto it = live_.find(info.pid);
    if (it != live_.end()) {
        auto& r = records_[it->second];
        if (r.start == info.start || r.start == 0) {
            if (r.start == 0) r.start = info.start;
            return r;
        }
    }
    ProcessRecord r;
    r.pid = info.pid;
    r.start = info.start;
    r.comm = info.comm;
    // Reading /proc/PID/cmdline takes the process's mmap lock, which a fork holds for writing
    // while it copies the address space. A fork bomb is forever forking: the stop pass blocked
    // seconds per read behind a preempted forker (6.6 s of a 2 s grace). Only a process asleep
    // or stopped is read (it holds no lock to wait on in practice); one that is running or in
    // D state is recorded by its comm alone.
    bool asleep = info.state == 'S' || info.state == 'T' || info.state == 't' || info.state == 'I';
    if (command_lines_ && asleep) r.cmdline = read_cmdline(info.pid);
    r.pgid = info.pgid;
    r.is_main = info.pid == main_pid_;
    r.unit = r.is_main ? "main" : labeller_ ? labeller_(info) : "";
    live_[info.pid] = records_.size();
    records_.push_back(std::move(r));
    return records_.back();
}

void ProcessBook::reaped(const Reaped& rp, bool forcing, MonoTime at) {
    ++reaped_;
    ProcessRecord* rec = nullptr;
    if (rp.info) {
        rec = &observe(*rp.info);
    } else if (auto it = live_.find(rp.pid); it != live_.end()) {
        rec = &records_[it->second];
    }
    if (!rec) return;  // reaped before shutdown: counted, not itemised
    rec->status = rp.status;
    rec->ended_at = at;
    // A SIGKILL death after the escalation went out is the escalation's doing, even for a child
    // forked after the enumeration (cgroup.kill catches those without us listing them).
    if (forcing && WIFSIGNALED(rp.status) && WTERMSIG(rp.status) == SIGKILL) rec->killed = true;
    live_.erase(rp.pid);
}

std::vector<pid_t> ProcessBook::forced() const {
    std::vector<pid_t> out;
    for (const auto& r : records_)
        if (r.killed) out.push_back(r.pid);
    return out;
}

namespace {

std::string iso_time(MonoTime t, const ReportInput& in) {
    auto wall =
        in.wall_now - std::chrono::duration_cast<std::chrono::system_clock::duration>(in.now - t);
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
    return iso_utc_ms(ms);
}

long long ms_between(MonoTime a, MonoTime b) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

void write_ending(JsonWriter& j, const ProcessRecord& r) {
    if (r.survived) {
        // Neither reaped by lastcall nor by its parent: still running when lastcall gave up.
        j.field("ending", "survived")
            .field("state", std::string(1, r.survived->state))
            .field("wchan", r.survived->wchan);
    } else if (r.status) {
        int st = *r.status;
        if (WIFEXITED(st)) {
            j.field("ending", "exited").field("exit_code", WEXITSTATUS(st));
        } else {
            j.field("ending", r.killed ? "killed" : "signalled")
                .field("signal", signal_name(WTERMSIG(st)));
        }
        j.field("reaped_by", "lastcall");
    } else {
        // Reaped by its own parent: gone, but its status went to that parent, not to us.
        j.field("ending", r.killed ? "killed" : "gone").field("reaped_by", "parent");
    }
    j.field("within_grace", !r.killed);
}

}  // namespace

std::string_view to_string(ForceKind k) {
    switch (k) {
        case ForceKind::Sigkill:
            return "sigkill";
        case ForceKind::CgroupKill:
            return "cgroup.kill";
        case ForceKind::EnteredForcing:
            return "entered-forcing";
        case ForceKind::Abandoned:
            return "abandoned";
    }
    return "?";
}

std::string_view to_string(Verdict v) {
    return v == Verdict::Clean ? "clean" : "forced";
}

Verdict verdict_from(const std::vector<ForceFact>& facts) {
    // Any recorded fact counts, even a kill that found nobody left to kill: lastcall had
    // decided to force, so the ending was not the processes' own.
    return facts.empty() ? Verdict::Clean : Verdict::Forced;
}

int exit_code_without_main(Verdict v) {
    return v == Verdict::Forced ? 128 + SIGKILL : 0;
}

Verdict verdict_of(const ReportInput& in) {
    // The book's SIGKILL deaths and the give-up are facts too (recorded by the reaper); the
    // explicit facts cover the kills that found nobody and the components' own kills.
    if (!in.book->forced().empty() || in.gave_up) return Verdict::Forced;
    return in.force_facts ? verdict_from(*in.force_facts) : Verdict::Clean;
}

namespace {

void write_trigger(JsonWriter& j, const Shutdown& sd, const ReportInput& in) {
    j.key("trigger").begin_object();
    switch (sd.trigger().kind) {
        case TriggerKind::Signal:
            j.field("kind", "signal").field("signal", signal_name(sd.trigger().signal));
            break;
        case TriggerKind::MainExited:
            j.field("kind", "main-exited");
            if (!in.trigger_reason.empty()) j.field("reason", in.trigger_reason);
            break;
        case TriggerKind::None:
            j.field("kind", "none");
            break;
    }
    if (sd.trigger().kind != TriggerKind::None) j.field("at", iso_time(sd.trigger().at, in));
    j.end_object();
}

void write_transitions(JsonWriter& j, const Shutdown& sd, const ReportInput& in) {
    j.key("transitions").begin_array();
    for (State s :
         {State::Running, State::Draining, State::Stopping, State::Forcing, State::Stopped}) {
        if (!sd.entered(s)) continue;
        j.begin_object().field("state", to_string(s)).field("at", iso_time(*sd.entered(s), in));
        j.end_object();
    }
    j.end_array();
}

void write_budget(JsonWriter& j, const Shutdown& sd, const ReportInput& in) {
    j.key("budget").begin_object();
    j.field("grace_ms", static_cast<long long>(in.grace.count()));
    j.field("drain_delay_ms", static_cast<long long>(in.drain_delay.count()));
    long long used = 0;
    if (sd.trigger().kind != TriggerKind::None) {
        MonoTime end = sd.entered(State::Stopped) ? *sd.entered(State::Stopped) : in.now;
        used = ms_between(sd.trigger().at, end);
    }
    j.field("used_ms", used);
    j.end_object();
}

void write_pre_stop(JsonWriter& j, const ReportInput& in) {
    j.key("pre_stop").begin_object();
    j.field("pid", static_cast<long long>(in.pre_stop->pid));
    j.field("started_at", iso_time(in.pre_stop->started, in));
    if (in.pre_stop->ended) j.field("ended_at", iso_time(*in.pre_stop->ended, in));
    if (in.pre_stop->status) {
        int st = *in.pre_stop->status;
        if (WIFEXITED(st))
            j.field("exit_code", WEXITSTATUS(st));
        else
            j.field("signal", signal_name(WTERMSIG(st)));
    }
    j.end_object();
}

void write_signals(JsonWriter& j, const Shutdown& sd, const ReportInput& in) {
    j.key("signals").begin_array();
    for (const auto& b : sd.bursts())
        j.begin_object()
            .field("signal", signal_name(b.signal))
            .field("count", b.count)
            .field("at", iso_time(b.first, in))
            .end_object();
    j.end_array();
}

void write_processes(JsonWriter& j, const ReportInput& in) {
    j.key("processes").begin_array();
    for (const auto& r : in.book->records()) {
        j.begin_object();
        j.field("pid", static_cast<long long>(r.pid)).field("comm", r.comm);
        j.field("cmdline", r.cmdline).field("pgid", static_cast<long long>(r.pgid));
        j.field("main", r.is_main);
        if (!r.unit.empty()) j.field("unit", r.unit);
        // Unknown for a member of a big tree's bulk listing (its group was not read: pgid 0).
        if (r.pgid != 0) j.field("left_group", r.pgid != in.main_pid);
        if (r.stop_signal) j.field("stop_signal", signal_name(r.stop_signal));
        if (r.signalled_at) j.field("signalled_at", iso_time(*r.signalled_at, in));
        write_ending(j, r);
        if (r.ended_at) j.field("ended_at", iso_time(*r.ended_at, in));
        j.end_object();
    }
    j.end_array();
}

// The verdict and the facts behind it.
void write_forcing(JsonWriter& j, const ReportInput& in) {
    j.field("verdict", to_string(verdict_of(in)));
    j.key("forced").begin_array();
    for (pid_t p : in.book->forced()) j.value(static_cast<long long>(p));
    j.end_array();
    j.key("force_facts").begin_array();
    if (in.force_facts)
        for (const auto& f : *in.force_facts)
            j.begin_object()
                .field("kind", to_string(f.kind))
                .field("source", f.source)
                .field("count", f.count)
                .field("at", iso_time(f.at, in))
                .end_object();
    j.end_array();
    if (in.gave_up) j.field("abandoned", true);
}

void write_admission(JsonWriter& j, const ReportInput& in) {
    // Every unit of work by the way it entered: what the drain had to wait for.
    j.key("admission").begin_object();
    for (EntryPath p : kEntryPaths) {
        const PathCounts& c = in.admission->of(p);
        j.key(to_string(p)).begin_object();
        j.field("registered", static_cast<long long>(c.registered));
        j.field("executing", static_cast<long long>(c.executing));
        j.field("released", static_cast<long long>(c.released));
        j.field("refused", static_cast<long long>(c.refused));
        j.field("rolled_back", static_cast<long long>(c.rolled_back));
        j.end_object();
    }
    j.end_object();
}

}  // namespace

std::string render_report(const ReportInput& in) {
    const Shutdown& sd = *in.shutdown;
    JsonWriter j;
    j.begin_object();
    j.field("schema", 1);
    j.key("command").begin_array();
    for (const auto& a : in.command) j.value(a);
    j.end_array();
    j.field("lastcall_pid", static_cast<long long>(::getpid()));

    write_trigger(j, sd, in);
    write_transitions(j, sd, in);
    write_budget(j, sd, in);

    j.field("tracker", in.tracker).field("kill_scope", in.kill_scope);
    if (in.pre_stop) write_pre_stop(j, in);
    write_signals(j, sd, in);

    write_processes(j, in);
    j.field("reaped_total", in.book->reaped_count());
    // Not a kill of lastcall's: a fact of the run (a unit outgrew its memory), not a verdict.
    j.key("oom_kills");
    if (in.oom_kills)
        j.value(*in.oom_kills);
    else
        j.null();

    write_forcing(j, in);
    j.field("log_lines_lost", static_cast<long long>(in.log_lines_lost));
    j.field("log_lines_waiting", static_cast<long long>(in.log_lines_waiting));
    if (in.admission) write_admission(j, in);
    if (in.extra) in.extra(j);
    j.field("exit_code", in.exit_code);
    j.end_object();
    std::string out = j.str();
    out += '\n';
    return out;
}

int stop_signalled(const ReportInput& in) {
    int n = 0;
    for (const auto& r : in.book->records()) n += r.stop_signal != 0;
    return n;
}

Ending ending_of(const ReportInput& in) {
    Ending e;
    e.verdict = std::string(to_string(verdict_of(in)));
    e.exit_code = in.exit_code;
    const Shutdown& sd = *in.shutdown;
    if (sd.trigger().kind != TriggerKind::None && sd.entered(State::Stopped))
        e.shutdown_seconds =
            static_cast<double>(ms_between(sd.trigger().at, *sd.entered(State::Stopped))) / 1000.0;
    e.processes = static_cast<int>(in.book->records().size());
    e.signalled = stop_signalled(in);
    e.killed = static_cast<int>(in.book->forced().size());
    return e;
}

bool worth_a_line(const ReportInput& in) {
    return in.shutdown->trigger().kind == TriggerKind::Signal || stop_signalled(in) > 0 ||
           !in.book->forced().empty() || in.gave_up || in.shutdown->forced() ||
           (in.oom_kills && *in.oom_kills > 0);
}

std::string summarize(const ReportInput& in) {
    const Shutdown& sd = *in.shutdown;
    std::string s = "shutdown " + std::string(to_string(verdict_of(in))) + ": exit code " +
                    std::to_string(in.exit_code);
    auto processes = [](std::size_t n) {
        return std::to_string(n) + (n == 1 ? " process" : " processes");
    };
    s += ", " + processes(in.book->records().size()) + " in the final tree";
    s += ", " + std::to_string(stop_signalled(in)) + " sent the stop signal";
    s += ", " + std::to_string(in.book->reaped_count()) + " reaped in all";
    auto forced = in.book->forced();
    if (!forced.empty()) {
        // The log line stays readable after a fork storm; the report has the complete list.
        constexpr std::size_t kShown = 20;
        s += ", SIGKILL to " + processes(forced.size()) + " (pid";
        for (std::size_t i = 0; i < forced.size() && i < kShown; ++i)
            s += (i ? ", " : " ") + std::to_string(forced[i]);
        if (forced.size() > kShown) s += " and " + std::to_string(forced.size() - kShown) + " more";
        s += ")";
    }
    if (in.gave_up) s += ", some processes did not die from SIGKILL";
    if (in.oom_kills && *in.oom_kills > 0)
        s += ", " + std::to_string(*in.oom_kills) + " killed by the OOM killer";
    if (sd.trigger().kind != TriggerKind::None && sd.entered(State::Stopped))
        s += ", " + std::to_string(ms_between(sd.trigger().at, *sd.entered(State::Stopped))) +
             "ms of " + std::to_string(in.grace.count()) + "ms grace used";
    return s;
}

Status write_report(const std::string& path, const std::string& json) {
    auto file = AtomicFile::create(path);
    if (!file) return file.error();
    if (auto st = file->write(json); !st) return st;
    return file->commit();
}

void write_start_failed(JsonWriter& j, std::string_view error) {
    j.key("start_failed").begin_object();
    j.field("error", error);
    j.end_object();
}

namespace {

// A run that ended before its loop: no shutdown is asked of anything.
struct NoShutdownActions final : ShutdownActions {
    void state_changed(State, State, Event) override {}
    void readiness_off() override {}
    void start_pre_stop() override {}
    void signal_tree(int) override {}
    void kill_tree() override {}
};

}  // namespace

Status write_start_failure_report(const std::string& path, ReportInput in, std::string_view error) {
    // Before the supervisor exists (a config, a ledger, a metrics port that fails) there is no
    // shutdown, no process and no force fact: the report's own empty ones.
    SteadyClock clock;
    NoShutdownActions actions;
    Shutdown shutdown(ShutdownConfig{in.grace, in.drain_delay}, clock, actions);
    ProcessBook book;
    std::vector<ForceFact> no_facts;
    if (!in.shutdown) {
        in.shutdown = &shutdown;
        in.now = clock.now();
        in.wall_now = std::chrono::system_clock::now();
    }
    if (!in.book) in.book = &book;
    if (!in.force_facts) in.force_facts = &no_facts;
    in.extra = [error](JsonWriter& j) { write_start_failed(j, error); };
    return write_report(path, render_report(in));
}

}  // namespace lastcall
