// SPDX-License-Identifier: Apache-2.0
// The `runs` and `jobs` subcommands. CLI11 parses them here, as cli.cpp does for the main line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <unistd.h>

#include "lastcall/cli/cli.hpp"
#include "lastcall/cli/cli11_app.hpp"
#include "lastcall/cli/jobs_cli.hpp"
#include "lastcall/core/atomic_file.hpp"
#include "lastcall/core/duration.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/signals.hpp"
#include "lastcall/core/text_table.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/core/twin.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/cron.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/process/credentials.hpp"
#include "lastcall/process/userdb.hpp"

namespace lastcall {

namespace {

// The ledger the way the supervisor picks it: --ledger, else the config's `ledger`, else SQLite
// in the state dir (resolve_state_dir).
Result<LedgerLocation> ledger_of(const std::string& url, const std::string& flag,
                                 const std::string& config_path, const std::string& crontab_path) {
    if (!url.empty()) {
        if (!is_postgresql_url(url)) return Error{"--ledger: expected a postgresql:// URL"};
        return LedgerLocation{"", url};
    }
    std::string from_config;
    if (!config_path.empty()) {
        // Its `ledger` may be PostgreSQL, which the static binary hands to its twin: a config
        // that cannot be read twice goes there unread (core/twin.hpp).
        twin::hand_over_before_reading(config_path);
        auto config = load_jobs_config(config_path);
        if (!config) return config.error();
        if (flag.empty() && !config->ledger.empty()) return LedgerLocation{"", config->ledger};
        from_config = config->state_dir;
    }
    return LedgerLocation{
        resolve_state_dir(flag, from_config, !config_path.empty() ? config_path : crontab_path),
        ""};
}

// A password in --ledger's URL leaves this process's command line before the connection, which
// may wait seconds for an unanswering server while every process can read /proc/PID/cmdline. The
// static binary's twin reads the URL from that command line again: handed over first.
void scrub_ledger_password_of_runs(const std::string& url) {
    if (url.empty()) return;
    twin::hand_over(kPostgresLedgerNeedsLibpq);
    char** argv = twin::own_argv();
    int argc = 0;
    while (argv && argv[argc]) ++argc;
    if (scrub_ledger_password(argc, argv, url))
        std::fprintf(stderr, "lastcall runs: %s\n", ledger_password_was_readable().c_str());
}

void print_json(const std::vector<RunRecord>& runs) {
    JsonWriter j;
    j.begin_array();
    for (const auto& r : runs) {
        j.begin_object();
        j.field("id", static_cast<long long>(r.id));
        j.field("job", r.job);
        j.field("state", to_string(r.state));
        j.field("scheduled_at", iso_utc(r.scheduled_at));
        j.key("pid");
        r.pid ? j.value(static_cast<long long>(*r.pid)) : j.null();
        j.field("created_at", iso_utc_ms(r.created_ms));
        j.key("started_at");
        r.started_ms ? j.value(iso_utc_ms(*r.started_ms)) : j.null();
        j.key("ended_at");
        r.ended_ms ? j.value(iso_utc_ms(*r.ended_ms)) : j.null();
        j.key("exit_code");
        r.exit_code ? j.value(*r.exit_code) : j.null();
        j.key("signal");
        r.signal ? j.value(*r.signal) : j.null();
        j.field("reason", r.reason);
        j.key("retry_of");
        r.retry_of ? j.value(static_cast<long long>(*r.retry_of)) : j.null();
        j.key("recovery");
        r.recovery.empty() ? j.null() : j.value(r.recovery);
        j.key("replica");
        r.replica.empty() ? j.null() : j.value(r.replica);
        j.key("cluster");
        r.cluster.empty() ? j.null() : j.value(r.cluster);
        j.end_object();
    }
    j.end_array();
    std::printf("%s\n", j.str().c_str());
}

// A time as the table shows it: the local wall-clock time and how long ago it was ("2026-12-07
// 11:02:05 (2m ago)"; rows of one minute's runs all read "2m ago" alone). The date is left out
// when it is `same_day`'s, the zone's abbreviation is added when it is not the header's.
std::string table_time(std::int64_t unix_ms, std::int64_t now_ms, const std::string& header_zone,
                       const std::string& same_day = "") {
    LocalTimeText t = local_time_text(unix_ms / 1000);
    std::string text = t.date == same_day ? t.time : t.date + " " + t.time;
    if (t.zone != header_zone) text += " " + t.zone;
    return text + " (" + relative_time(unix_ms, now_ms) + ")";
}

// Local times (the zone in the header) with how long ago each was (`--json` has the exact ones).
void print_table(const std::vector<RunRecord>& runs, bool with_replica) {
    std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    ::tzset();
    const std::string zone = local_time_text(now / 1000).zone;
    std::vector<std::vector<std::string>> rows{
        {"ID", "JOB", "STATE", "SCHEDULED (" + zone + ")", "PID", "ENDED", "EXIT", "REASON"}};
    if (with_replica) rows[0].insert(rows[0].begin() + 4, "REPLICA");
    if (with_replica) rows[0].insert(rows[0].begin() + 1, "CLUSTER");
    for (const auto& r : runs) {
        std::string exit = r.exit_code ? std::to_string(*r.exit_code)
                           : r.signal  ? std::string(signal_name(*r.signal))
                                       : "-";
        std::string reason = r.reason;
        if (!r.recovery.empty())
            reason += (reason.empty() ? "" : "; ") + ("recovery: " + r.recovery);
        if (r.retry_of)
            reason += (reason.empty() ? "" : "; ") + ("retry of " + std::to_string(*r.retry_of));
        const std::string scheduled_day = local_time_text(r.scheduled_at).date;
        rows.push_back(
            {std::to_string(r.id), r.job, std::string(to_string(r.state)),
             table_time(r.scheduled_at * 1000, now, zone), r.pid ? std::to_string(*r.pid) : "-",
             r.ended_ms ? table_time(*r.ended_ms, now, zone, scheduled_day) : "-", exit, reason});
        if (with_replica) {
            rows.back().insert(rows.back().begin() + 4, r.replica.empty() ? "-" : r.replica);
            rows.back().insert(rows.back().begin() + 1, r.cluster.empty() ? "-" : r.cluster);
        }
    }
    std::fputs(format_table(rows).c_str(), stdout);
}

// A bare `lastcall runs` looks in the default state dir, but a run with --config or --crontab
// keeps its ledger in a directory of its own (resolve_state_dir): say where to look instead of
// only where nothing was.
std::string where_else(bool located) {
    return located ? ""
                   : " (a run with --config or --crontab has a ledger of its own: pass the same "
                     "--config or --crontab, or --state-dir)";
}

int runs_release(long long id, const LedgerLocation& where, bool located) {
    auto ledger = Ledger::open(where, false);
    if (!ledger) {
        std::fprintf(stderr, "lastcall runs release: %s%s\n", ledger.error().message.c_str(),
                     where_else(located).c_str());
        return 1;
    }
    auto done = (*ledger)->release(id);
    if (!done) {
        std::fprintf(stderr, "lastcall runs release: %s\n", done.error().message.c_str());
        return 1;
    }
    if (!*done) {
        std::fprintf(stderr,
                     "lastcall runs release: run %lld is not an interrupted run awaiting "
                     "recovery\n",
                     id);
        return 1;
    }
    std::printf((*ledger)->shared()
                    ? "run %lld released: a replica retries it within a second\n"
                    : "run %lld released: its job runs again (a running lastcall retries it at the "
                      "job's next fire time, a new one at its start)\n",
                id);
    return 0;
}

// `lastcall runs check`, from inside a job: is this run still the job's to finish? The run id
// and its owner come from the run's environment; the ledger from --ledger/--state-dir/--config,
// else from the environment too. 0: the run is `started` and this replica's; 1: it is not (one
// line says what the ledger holds), or the ledger could not say.
int runs_check(const LedgerLocation& given, bool located) {
    const char* id_text = std::getenv("LASTCALL_RUN_ID");
    const char* owner = std::getenv("LASTCALL_RUN_OWNER");
    if (!id_text || !*id_text || !owner) {
        std::fprintf(stderr,
                     "lastcall runs check: LASTCALL_RUN_ID and LASTCALL_RUN_OWNER are not set: "
                     "run it from inside a job\n");
        return 2;
    }
    LedgerLocation where = given;
    if (!located) {
        const char* url = std::getenv("LASTCALL_LEDGER_URL");
        const char* path = std::getenv("LASTCALL_LEDGER");
        if (url && is_postgresql_url(url))
            where = LedgerLocation{"", url};
        else if (path && is_postgresql_url(path))
            where = LedgerLocation{"", path};
        else if (path && *path)
            where = LedgerLocation{dir_of(path), ""};
    }
    long long id = std::strtoll(id_text, nullptr, 10);
    auto ledger = Ledger::open(where, false);
    if (!ledger) {
        std::fprintf(stderr, "lastcall runs check: %s\n", ledger.error().message.c_str());
        return 1;
    }
    auto current = (*ledger)->is_current(id, owner);
    if (!current) {
        std::fprintf(stderr, "lastcall runs check: %s\n", current.error().message.c_str());
        return 1;
    }
    if (*current) return 0;
    auto rec = (*ledger)->get(id);
    std::string held = rec && *rec ? std::string(to_string((*rec)->state)) +
                                         ((*rec)->reason.empty() ? "" : " (" + (*rec)->reason + ")")
                                   : "no such run";
    std::fprintf(stderr,
                 "lastcall runs check: run %lld is no longer this run's to finish: the ledger "
                 "records it %s\n",
                 id, held.c_str());
    return 1;
}

int runs_prune(const std::string& before, const LedgerLocation& where, bool located) {
    auto age = parse_duration(before);
    if (!age) {
        std::fprintf(stderr, "lastcall runs prune: --before: %s\n", age.error().message.c_str());
        return 2;
    }
    auto ledger = Ledger::open(where, false);
    if (!ledger) {
        std::fprintf(stderr, "lastcall runs prune: %s%s\n", ledger.error().message.c_str(),
                     where_else(located).c_str());
        return 1;
    }
    // In batches: each one a short transaction, however large the history.
    std::int64_t cutoff = unix_ms_now() - age->count(), total = 0;
    for (;;) {
        auto n = (*ledger)->prune(cutoff, 1000);
        if (!n) {
            std::fprintf(stderr, "lastcall runs prune: %s (%lld run(s) removed before)\n",
                         n.error().message.c_str(), static_cast<long long>(total));
            return 1;
        }
        total += *n;
        if (*n < 1000) break;
    }
    std::printf("removed %lld final run(s) that ended more than %s ago\n",
                static_cast<long long>(total), format_duration(*age).c_str());
    return 0;
}

// A job's command as its config wrote it: the string of a shell command (`/bin/sh -c STRING`,
// every crontab line), else the argv as a JSON array (a TOML array reads the same), on one line.
std::string command_text(const std::vector<std::string>& argv) {
    std::string text;
    if (argv.size() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c") {
        text = argv[2];
    } else {
        JsonWriter j;
        j.begin_array();
        for (const auto& a : argv) j.value(a);
        j.end_array();
        text = j.str();
    }
    for (char& c : text)
        if (c == '\n' || c == '\t') c = ' ';
    return text;
}

// The name of the user running this command, else its uid.
std::string own_user_name() {
    const uid_t uid = ::geteuid();
    auto user = userdb::find_uid(uid);
    return user ? user->name : std::to_string(uid);
}

// What the listing of `lastcall runs` selects, and how it prints it.
struct RunsQuery {
    std::string job, state, since, cluster;
    std::size_t limit = 0;  // -n N; 0: the default
    bool all = false;       // --all
    bool json = false;
};

// The table's default length: the newest runs, as `journalctl -n` and `git log -n` show them.
constexpr std::size_t kRunsShown = 20;

// `lastcall runs` without a subcommand: the runs the query selects, as a table or JSON.
int runs_list(const RunsQuery& query, const LedgerLocation& where, bool located) {
    auto ledger = Ledger::open(where, false);
    if (!ledger) {
        std::fprintf(stderr, "lastcall runs: %s%s\n", ledger.error().message.c_str(),
                     where_else(located).c_str());
        return 1;
    }
    RunFilter filter;
    filter.job = query.job;
    filter.cluster = query.cluster;
    if (!query.state.empty()) filter.state = parse_run_state(query.state);
    if (!query.since.empty()) {
        auto d = parse_duration(query.since);
        if (!d) {
            std::fprintf(stderr, "lastcall runs: --since: %s\n", d.error().message.c_str());
            return 2;
        }
        filter.since_ms = unix_ms_now() - d->count();
    }
    // The table is read by people: the newest 20 unless asked; JSON is read by programs: all.
    // One more than shown is read, to say whether older runs were left out.
    std::optional<std::size_t> shown;
    if (query.limit > 0)
        shown = query.limit;
    else if (!query.json && !query.all)
        shown = kRunsShown;
    if (shown) filter.limit = *shown + 1;
    auto runs = (*ledger)->list(filter);
    if (!runs) {
        std::fprintf(stderr, "lastcall runs: %s\n", runs.error().message.c_str());
        return 1;
    }
    bool cut = shown && runs->size() > *shown;
    if (cut) runs->erase(runs->begin());  // oldest first: the one read beyond the newest N
    // Which ledger this is, on stderr: the tables and the JSON on stdout stay what scripts read.
    std::fprintf(stderr, "lastcall runs: ledger %s\n", (*ledger)->path().c_str());
    if (cut)
        std::fprintf(stderr, "lastcall runs: the newest %zu run%s; older ones with -n N or --all\n",
                     *shown, *shown == 1 ? "" : "s");
    query.json ? print_json(*runs) : print_table(*runs, (*ledger)->shared());
    return 0;
}

}  // namespace

int run_runs(const std::vector<std::string>& args) {
    CLI::App app{"lastcall runs: print the run ledger.", "lastcall runs"};
    set_usage(app,
              "Usage: lastcall runs [OPTIONS]\n"
              "       lastcall runs release RUN_ID [OPTIONS]\n"
              "       lastcall runs check [OPTIONS]\n"
              "       lastcall runs prune --before AGE [OPTIONS]");
    GlobalOptions global;  // accepted before or after the name; runs prints no log lines
    add_global_options(app, global);
    RunsQuery query;
    std::string state_dir, config, crontab, url;
    long long release_id = 0;
    std::string before;
    app.add_option("--job", query.job, "Only this job's runs");
    app.add_option("--state", query.state, "Only runs in this state")
        ->check(CLI::IsMember(
            {"scheduled", "started", "completed", "failed", "interrupted", "skipped"}));
    app.add_flag("--json", query.json, "A JSON array instead of a table");
    auto* limit = app.add_option(
        "-n,--limit", query.limit,
        "At most this many runs, the newest (default 20 for the table, all with --json)");
    app.add_flag("--all", query.all, "Every run the other options select")->excludes(limit);
    app.add_option("--cluster", query.cluster, "A shared ledger: only this deployment's runs");
    app.add_option("--since", query.since, "Only runs created within this long (\"10m\", \"2d\")");
    app.add_option("--state-dir", state_dir, "Directory of the run ledger");
    app.add_option("--ledger", url,
                   "A postgresql:// ledger shared by replicas: runs of every replica, with its id");
    app.add_option("--config", config, "The ledger of the lastcall run with this config");
    app.add_option("--crontab", crontab, "The ledger of the lastcall run with this crontab");
    CLI::App* release =
        app.add_subcommand("release", "Let a held job run again: its interrupted run is retried");
    release->add_option("run_id", release_id, "The interrupted run")->required();
    release->fallthrough();  // --state-dir/--config may come after the run id too
    CLI::App* check = app.add_subcommand(
        "check", "From inside a job: exit 0 while its run is still started and this replica's");
    check->fallthrough();
    CLI::App* prune = app.add_subcommand("prune", "Remove final runs that ended before an age");
    prune->add_option("--before", before, "The age (\"30d\")")->required();
    prune->fallthrough();
    if (auto code = parse_subcommand(app, args, "runs")) return *code;
    auto where = ledger_of(url, state_dir, config, crontab);
    if (!where) {
        std::fprintf(stderr, "lastcall runs: %s\n", where.error().message.c_str());
        return 2;
    }
    scrub_ledger_password_of_runs(url);
    bool located = !url.empty() || !state_dir.empty() || !config.empty() || !crontab.empty();
    if (release->parsed()) return runs_release(release_id, *where, located);
    if (check->parsed()) return runs_check(*where, located);
    if (prune->parsed()) return runs_prune(before, *where, located);
    return runs_list(query, *where, located);
}

int run_jobs(const std::vector<std::string>& args) {
    CLI::App app{"lastcall jobs: print each job's command, user and next fire times.",
                 "lastcall jobs"};
    set_usage(app,
              "Usage: lastcall jobs --config FILE [--crontab FILE|DIR] [--user USER] [--count N]\n"
              "       lastcall jobs --crontab FILE|DIR [--user USER] [--count N]");
    GlobalOptions global;  // accepted before or after the name; jobs prints no log lines
    add_global_options(app, global);
    Options o;
    int count = 3;
    app.add_option("--config", o.config_path, "TOML config with [jobs.*]");
    app.add_option("--crontab", o.crontab_path, "Crontab file, or a cron.d-like directory");
    app.add_option("--user", o.user,
                   "As lastcall's --user: whom the jobs without their own user run as");
    app.add_option("--count", count, "How many fire times per job (default 3)")
        ->check(CLI::Range(1, 1000));
    if (auto code = parse_subcommand(app, args, "jobs")) return *code;
    if (o.config_path.empty() && o.crontab_path.empty()) {
        std::fprintf(stderr, "lastcall jobs: --config or --crontab is required\n");
        return 2;
    }
    // A `user` in them may hand over to the twin (core/twin.hpp): unread, if read only once.
    twin::hand_over_before_reading(o.config_path);
    twin::hand_over_before_reading(o.crontab_path);
    if (!o.user.empty()) {
        auto creds = lookup_credentials(o.user);
        if (!creds) {
            std::fprintf(stderr, "lastcall jobs: --user '%s': %s\n", o.user.c_str(),
                         creds.error().message.c_str());
            return 2;
        }
        o.credentials = std::move(*creds);
    }
    auto setup = load_jobs(o);
    if (!setup) {
        std::fprintf(stderr, "lastcall: %s\n", setup.error().message.c_str());
        return 2;
    }
    auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
    for (const auto& job : setup->jobs) {
        // Whom it runs as, as main() decides it: its own user/group, else --user, else the user
        // that runs lastcall (here: the one running this command).
        auto creds = unit_credentials(job.user, job.group, o.credentials);
        std::string user = creds ? creds->name : own_user_name();
        if (job.group) user += " group=" + std::to_string(*job.group);
        std::string output = job.output.empty() ? "" : "  output=" + job.output;
        std::printf(
            "%s  (%s)  schedule '%s'  overlap=%s  on_interrupted=%s  user=%s%s  command: %s\n",
            job.name.c_str(), job.origin.c_str(), job.schedule->expression().c_str(),
            std::string(to_string(job.overlap)).c_str(),
            std::string(to_string(job.on_interrupted)).c_str(), user.c_str(), output.c_str(),
            command_text(job.command).c_str());
        std::optional<cron::sys_seconds> t = cron::sys_seconds{now.time_since_epoch()};
        for (int i = 0; i < count; ++i) {
            t = job.schedule->next_after(*t);
            if (!t) {
                std::printf("  (no further fire time)\n");
                break;
            }
            std::printf("  %s\n", cron::fire_time_text(*job.schedule, *t).c_str());
        }
    }
    return 0;
}

}  // namespace lastcall
