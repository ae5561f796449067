// SPDX-License-Identifier: Apache-2.0
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

#include "lastcall/jobs/config.hpp"

using namespace lastcall;

TEST_CASE("a [jobs.*] table loads with its defaults, in file order", "[config]") {
    auto c = parse_jobs_toml(R"(state_dir = "/srv/state"
[services.web]
command = ["web"]

[jobs.zeta]
schedule = "@every 1s"
command = ["/bin/echo", "hi"]

[jobs.alpha]
schedule = "0 3 * * *"
command = "backup > /dev/null"
timeout = "30s"
overlap = "queue"
on_interrupted = "hold"
output = "/srv/out/backup.tar"
verify = "tar tf \"$1\""
)",
                             "jobs.toml");
    REQUIRE(c);
    CHECK(c->state_dir == "/srv/state");
    REQUIRE(c->jobs.size() == 2);
    CHECK(c->jobs[0].name == "zeta");  // file order, not toml++'s sorted order
    CHECK(c->jobs[0].overlap == Overlap::Skip);
    CHECK(c->jobs[0].on_interrupted == OnInterrupted::Retry);
    CHECK(c->jobs[0].command == std::vector<std::string>{"/bin/echo", "hi"});
    const JobSpec& a = c->jobs[1];
    CHECK(a.origin == "jobs.toml:9");
    CHECK(a.command == std::vector<std::string>{"/bin/sh", "-c", "backup > /dev/null"});
    CHECK(a.timeout == std::chrono::seconds(30));
    CHECK(a.overlap == Overlap::Queue);
    CHECK(a.on_interrupted == OnInterrupted::Hold);
    CHECK(a.verify == std::vector<std::string>{"/bin/sh", "-c", "tar tf \"$1\"", "verify"});
    CHECK(staging_path_for(a.output, 42) == "/srv/out/.backup.tar.42.lastcall-staging");
    CHECK(is_staging_name_of(a.output, ".backup.tar.42.lastcall-staging"));
    CHECK(is_staging_name_of(a.output, ".backup.tar.lastcall-staging"));  // before per-run names
    CHECK_FALSE(is_staging_name_of(a.output, ".backup.tar.x.lastcall-staging"));
    CHECK_FALSE(is_staging_name_of(a.output, ".other.tar.42.lastcall-staging"));
    CHECK_FALSE(is_staging_name_of(a.output, "backup.tar"));
}

TEST_CASE("job config errors name the file, the line and the key", "[config]") {
    auto err = [](const char* text) {
        auto c = parse_jobs_toml(text, "c.toml");
        REQUIRE_FALSE(c);
        return c.error().message;
    };
    CHECK_THAT(err("[jobs.a]\ncommand = \"x\"\n"),
               Catch::StartsWith("c.toml:1: jobs.a.schedule: missing"));
    CHECK_THAT(err("[jobs.a]\nschedule = \"* * * *\"\ncommand = \"x\"\n"),
               Catch::StartsWith("c.toml:2: jobs.a.schedule: "));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = []\n"),
               Catch::StartsWith("c.toml:3: jobs.a.command: must not be empty"));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\ntimeout = \"soon\"\n"),
               Catch::StartsWith("c.toml:4: jobs.a.timeout: "));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\noutput = \"rel/p\"\n"),
               Catch::StartsWith("c.toml:4: jobs.a.output: must be an absolute path"));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\noutput = \"/o\"\n"
                   "overlap = \"allow\"\n"),
               Catch::StartsWith("c.toml:5: jobs.a.overlap: \"allow\" cannot be combined"));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nverify = \"true\"\n"),
               Catch::StartsWith("c.toml:1: jobs.a.verify: needs `output`"));
    CHECK_THAT(err("colour = \"blue\"\n"), Catch::StartsWith("c.toml:1: colour: unknown key"));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n[jobs.a.extra]\n"),
               Catch::Contains("jobs.a.extra: unknown key"));
    CHECK_THAT(err("[jobs]\nx = 1\n"), Catch::StartsWith("c.toml:2: jobs.x: expected a table"));
    CHECK_THAT(err("[jobs.a\n"), Catch::StartsWith("c.toml:1: "));
}

TEST_CASE("crontab lines: 5, 6 or 7 fields or a macro, then the command with its spacing",
          "[config][cron]") {
    auto c = parse_crontab(
        "# comment\n\nMAILTO=ops\n*/5 * * * * echo  two   spaces\n"
        "30 0 3 * * * * /usr/bin/nightly --full\n@every 90s  tick\n"
        "@daily daily-job\n",
        "crontab");
    REQUIRE(c);
    REQUIRE(c->size() == 4);
    CHECK((*c)[0].name == crontab_entry_name("*/5 * * * *", "echo  two   spaces"));
    CHECK_THAT((*c)[0].name, Catch::StartsWith("echo-"));
    CHECK_THAT((*c)[1].name, Catch::StartsWith("nightly-"));
    CHECK((*c)[0].command == std::vector<std::string>{"/bin/sh", "-c", "echo  two   spaces"});
    CHECK((*c)[0].env == std::vector<std::string>{"MAILTO=ops"});
    CHECK((*c)[0].schedule->expression().find("*/5 * * * *") != std::string::npos);
    CHECK((*c)[1].command.back() == "/usr/bin/nightly --full");
    CHECK((*c)[2].command.back() == "tick");
    CHECK((*c)[2].schedule->interval() == std::chrono::seconds(90));
    CHECK((*c)[3].command.back() == "daily-job");
}

namespace {

std::chrono::sys_seconds at_utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
    using namespace std::chrono;
    return sys_days{year{y} / month{mo} / day{d}} + hours{h} + minutes{mi} + seconds{s};
}

std::vector<std::string_view> words_of(std::string_view line) {
    std::vector<std::string_view> out;
    for (std::size_t i = line.find_first_not_of(" \t"); i != std::string_view::npos;) {
        std::size_t e = std::min(line.find_first_of(" \t", i), line.size());
        out.push_back(line.substr(i, e - i));
        i = line.find_first_not_of(" \t", e);
    }
    return out;
}

}  // namespace

TEST_CASE("a crontab line is split into schedule and command as supercronic's examples are",
          "[config][cron]") {
    // supercronic's README, its crontab_test.go, cronexpr's README (6 fields end in a year) and
    // issue 41's lines. `fires`: the first fire time after 2026-06-01T00:00:00Z, in UTC.
    struct Example {
        const char* line;
        std::size_t fields;  // words of the schedule (1: a macro)
        const char* schedule;
        const char* command;
        std::optional<std::chrono::sys_seconds> fires;
    };
    const Example table[] = {
        {"*/1 * * * * echo \"hello\"", 5, "*/1 * * * *", "echo \"hello\"",
         at_utc(2026, 6, 1, 0, 1)},
        {"*/2 * * * * * * ls 2>/dev/null", 7, "*/2 * * * * * *", "ls 2>/dev/null",
         at_utc(2026, 6, 1, 0, 0, 2)},
        {"@hourly echo \"$SOME_HOURLY_JOB\"", 1, "@hourly", "echo \"$SOME_HOURLY_JOB\"",
         at_utc(2026, 6, 1, 1)},
        {"* * * * * foo some # qux", 5, "* * * * *", "foo some # qux", at_utc(2026, 6, 1, 0, 1)},
        {"1 1 1 1 1 bar", 5, "1 1 1 1 1", "bar", at_utc(2027, 1, 1, 1, 1)},  // the 1st OR Monday
        {"* * * * * * with year", 6, "* * * * * *", "with year", at_utc(2026, 6, 1, 0, 1)},
        {"* * * * * * * with seconds", 7, "* * * * * * *", "with seconds",
         at_utc(2026, 6, 1, 0, 0, 1)},
        {"@daily with shorthand", 1, "@daily", "with shorthand", at_utc(2026, 6, 2)},
        {"*/2 * * * * will run", 5, "*/2 * * * *", "will run", at_utc(2026, 6, 1, 0, 2)},
        {"* * * * *        \twith plenty of whitespace", 5, "* * * * *",
         "with plenty of whitespace", at_utc(2026, 6, 1, 0, 1)},
        {"*\t*\t*\t*\t*\ttabs everywhere", 5, "*\t*\t*\t*\t*", "tabs everywhere",
         at_utc(2026, 6, 1, 0, 1)},
        {"* * * * * 2050 cmd", 6, "* * * * * 2050", "cmd", at_utc(2050, 1, 1)},
        {"* * * * * 1980 cmd", 6, "* * * * * 1980", "cmd", std::nullopt},  // never again
        {"* * * * Mon cmd", 5, "* * * * Mon", "cmd", at_utc(2026, 6, 1, 0, 1)},
        {"*/5 * * * * * * echo hi", 7, "*/5 * * * * * *", "echo hi", at_utc(2026, 6, 1, 0, 0, 5)},
        {"0 3 * * * 2027 echo", 6, "0 3 * * * 2027", "echo", at_utc(2027, 1, 1, 3)},
        {"* * * * * echo", 5, "* * * * *", "echo", at_utc(2026, 6, 1, 0, 1)},
        {"0 3 * * * 2150 echo", 5, "0 3 * * *", "2150 echo", at_utc(2026, 6, 1, 3)},  // no year
    };
    for (const auto& e : table) {
        INFO(e.line);
        CHECK(cron::crontab_schedule_words(words_of(e.line)) == e.fields);
        auto jobs = parse_crontab(std::string("CRON_TZ=UTC\n") + e.line + "\n", "crontab");
        REQUIRE(jobs);
        REQUIRE(jobs->size() == 1);
        const JobSpec& job = jobs->front();
        CHECK(job.schedule->expression() == std::string("CRON_TZ=UTC ") + e.schedule);
        CHECK(job.command == std::vector<std::string>{"/bin/sh", "-c", e.command});
        CHECK(job.schedule->next_after(at_utc(2026, 6, 1)) == e.fires);
    }
}

TEST_CASE("a crontab line that fits no form is an error naming the file, the line and its text",
          "[config][cron]") {
    // supercronic's failure cases, then lines whose longer reading has the shape of a schedule
    // but a value lastcall cannot take: an error of that reading, never a shorter one.
    const std::pair<const char*, const char*> table[] = {
        {"* foo ", "expected a schedule and a command (in '* foo')"},
        {"FOO", "expected a schedule and a command (in 'FOO')"},
        {"* some * * *  more", "hour field: 'some' is not a number (in '* some * * *  more')"},
        {"* some * * *  ", "expected a schedule and a command (in '* some * * *')"},
        {"0 0 12 * * 5L * cmd arg", "day-of-week field: '5L'"},
        {"0 0 0 * * * 2024-2020 cmd", "year field: range '2024-2020' is reversed"},
        {"0 0 29 2 * 2027 leap", "year field: '2027' has no date that the other fields allow"},
    };
    for (const auto& [line, message] : table) {
        INFO(line);
        auto jobs = parse_crontab(std::string("MAILTO=x\n") + line + "\n", "tab");
        REQUIRE_FALSE(jobs);
        CHECK_THAT(jobs.error().message,
                   Catch::StartsWith(std::string("tab:2: schedule: ")) && Catch::Contains(message));
    }
}

TEST_CASE("a crontab line is not retried at the next start unless its comment asks",
          "[config][cron]") {
    auto c = parse_crontab(
        "* * * * * plain\n# on_interrupted: retry\n# name: opted\n* * * * * retried\n"
        "* * * * * plain-again\n",
        "tab");
    REQUIRE(c);
    REQUIRE(c->size() == 3);
    CHECK((*c)[0].on_interrupted == OnInterrupted::None);
    CHECK((*c)[1].on_interrupted == OnInterrupted::Retry);
    CHECK((*c)[1].name == "opted");
    CHECK((*c)[2].on_interrupted == OnInterrupted::None);
    auto bad = parse_crontab("# on_interrupted: sometimes\n* * * * * x\n", "tab");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::StartsWith("tab:1: on_interrupted: expected"));
}

TEST_CASE("a bad crontab line names the file and the line", "[config]") {
    auto c = parse_crontab("0 3 * * * ok\n61 * * * * bad\n", "tab");
    REQUIRE_FALSE(c);
    CHECK_THAT(c.error().message, Catch::StartsWith("tab:2: schedule: minute"));
    auto d = parse_crontab("* * * * *\n", "tab");
    REQUIRE_FALSE(d);
    CHECK_THAT(d.error().message, Catch::StartsWith("tab:1: schedule: "));
}

TEST_CASE(
    "a crontab's NAME=VALUE line is read as cron and supercronic read it: blanks around the '=', "
    "a quoted value unquoted",
    "[config][cron]") {
    auto c = parse_crontab(
        "GREETING = hello world\nQUOTED=\"a b \"\nSINGLE = 'x'\nEMPTY=\n* * * * * echo\n", "tab");
    REQUIRE(c);
    REQUIRE(c->size() == 1);
    CHECK((*c)[0].env ==
          std::vector<std::string>{"GREETING=hello world", "QUOTED=a b ", "SINGLE=x", "EMPTY="});
}

TEST_CASE("a crontab's SHELL line is the shell of the entries after it, as cron's is",
          "[config][cron]") {
    // supercronic's own example (crontab_test.go), then an empty SHELL: the default again.
    const char* tab =
        "* * * * * foo\nSHELL=some\n1 1 1 1 1 bar\nKEY=VAL\nSHELL = \"/bin/bash\"\n"
        "* * * * * baz\nSHELL=\n* * * * * qux\n";
    auto jobs = parse_crontab(tab, "tab");
    REQUIRE(jobs);
    std::vector<std::vector<std::string>> commands;
    std::vector<std::string> baz_env;
    for (const JobSpec& job : *jobs) {
        commands.push_back(job.command);
        if (job.command.back() == "baz") baz_env = job.env;
    }
    using Argv = std::vector<std::string>;
    CHECK(commands == std::vector<Argv>{Argv{"/bin/sh", "-c", "foo"}, Argv{"some", "-c", "bar"},
                                        Argv{"/bin/bash", "-c", "baz"},
                                        Argv{"/bin/sh", "-c", "qux"}});
    // It is in their environment too, as cron sets it.
    CHECK(baz_env == Argv{"KEY=VAL", "SHELL=/bin/bash"});
}

TEST_CASE(
    "a CRON_TZ line sets the zone of the entries after it and is in their environment; a TZ "
    "line is only their environment",
    "[config][cron]") {
    auto c = parse_crontab(
        "CRON_TZ = \"Asia/Tokyo\"\n0 3 * * * tokyo\nCRON_TZ=\nTZ=Asia/Tokyo\n0 3 * * * local\n",
        "tab");
    REQUIRE(c);
    REQUIRE(c->size() == 2);
    CHECK((*c)[0].schedule->zone().name() == "Asia/Tokyo");
    CHECK((*c)[0].env == std::vector<std::string>{"CRON_TZ=Asia/Tokyo"});
    CHECK((*c)[1].schedule->zone().name() != "Asia/Tokyo");
    CHECK((*c)[1].env == std::vector<std::string>{"CRON_TZ=", "TZ=Asia/Tokyo"});
}

TEST_CASE("a CRON_TZ line naming no zone is an error naming the file and that line",
          "[config][cron]") {
    for (const char* tab : {"CRON_TZ=Mars/Olympus\n\n0 3 * * * x\n",
                            "CRON_TZ=Asia/Tokyo # a comment is no part of cron's syntax\n"}) {
        auto c = parse_crontab(tab, "tab");
        REQUIRE_FALSE(c);
        CHECK_THAT(c.error().message, Catch::StartsWith("tab:1: CRON_TZ: "));
        CHECK(c.error().message.find('\n') == std::string::npos);
    }
}

TEST_CASE("crontab entries keep their names when lines are inserted above them", "[config]") {
    auto before = parse_crontab("0 3 * * * /usr/bin/backup --all\n*/5 * * * * poll\n", "tab");
    auto after = parse_crontab(
        "MAILTO=x\n# a new job\n15 * * * * report\n0 3 * * * /usr/bin/backup --all\n"
        "*/5 * * * * poll\n",
        "tab");
    REQUIRE(before);
    REQUIRE(after);
    CHECK((*before)[0].name == (*after)[1].name);
    CHECK((*before)[1].name == (*after)[2].name);
    CHECK((*before)[0].name != (*before)[1].name);
}

TEST_CASE("a '# name:' comment names the next crontab entry; a duplicate name is an error",
          "[config]") {
    auto c = parse_crontab("# name: nightly-backup\n0 3 * * * backup\n0 4 * * * other\n", "tab");
    REQUIRE(c);
    CHECK((*c)[0].name == "nightly-backup");
    CHECK((*c)[1].name != "nightly-backup");
    auto dup = parse_crontab("* * * * * same\n* * * * * same\n", "tab");
    REQUIRE_FALSE(dup);
    CHECK_THAT(dup.error().message, Catch::StartsWith("tab:2: name: "));
    auto bad = parse_crontab("# name: no spaces allowed\n* * * * * x\n", "tab");
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.error().message, Catch::StartsWith("tab:1: name: 'no spaces allowed'"));
}

TEST_CASE("the system crontab format has a user column, and the entry runs as that user",
          "[config]") {
    auto c = parse_crontab(
        "SHELL=/bin/sh\n17 * * * * root cd / && run-parts --report /etc/cron.hourly\n"
        "*/2 * * * * nobody /usr/bin/true\n",
        "/etc/crontab", CrontabFormat::System);
    REQUIRE(c);
    REQUIRE(c->size() == 2);
    REQUIRE((*c)[0].user);
    CHECK((*c)[0].user->uid == 0);
    CHECK((*c)[0].command.back() == "cd / && run-parts --report /etc/cron.hourly");
    REQUIRE((*c)[1].user);
    CHECK((*c)[1].user->uid == 65534);
    auto unknown = parse_crontab("* * * * * no-such-user-xyz true\n", "f", CrontabFormat::System);
    REQUIRE_FALSE(unknown);
    CHECK_THAT(unknown.error().message, Catch::StartsWith("f:1: user: 'no-such-user-xyz'"));
    CHECK(crontab_format_of("/etc/crontab") == CrontabFormat::System);
    CHECK(crontab_format_of("/srv/image/etc/crontab") == CrontabFormat::System);
    CHECK(crontab_format_of("/etc/cron.d/php") == CrontabFormat::System);
    CHECK(crontab_format_of("/app/crontab") == CrontabFormat::User);
}

TEST_CASE("a shared ledger, its lease and each job's concurrency come from the config",
          "[config]") {
    auto c = parse_jobs_toml(R"(ledger = "postgresql://app@db.internal/jobs"
lease = "10s"
[jobs.a]
schedule = "@every 1m"
command = "x"
concurrency = "forbid"
[jobs.b]
schedule = "@every 1m"
command = "x"
concurrency = "replace"
[jobs.c]
schedule = "@every 1m"
command = "x"
concurrency = "allow"
[jobs.d]
schedule = "@every 1m"
command = "x"
overlap = "replace"
)",
                             "c.toml");
    REQUIRE(c);
    CHECK(c->ledger == "postgresql://app@db.internal/jobs");
    CHECK(c->lease == std::chrono::seconds(10));
    CHECK(c->jobs[0].overlap == Overlap::Skip);  // forbid is skip in lastcall's words
    CHECK(c->jobs[1].overlap == Overlap::Replace);
    CHECK(c->jobs[2].overlap == Overlap::Allow);
    CHECK(c->jobs[3].overlap == Overlap::Replace);
    auto plain = parse_jobs_toml("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n", "c.toml");
    REQUIRE(plain);
    CHECK(plain->ledger.empty());  // SQLite in the state dir
    CHECK_FALSE(plain->lease);
}

TEST_CASE("shared ledger settings that cannot work are refused with the key", "[config]") {
    auto err = [](const char* text) {
        auto c = parse_jobs_toml(text, "c.toml");
        REQUIRE_FALSE(c);
        return c.error().message;
    };
    CHECK_THAT(err("ledger = \"mysql://db/jobs\"\n"),
               Catch::StartsWith("c.toml:1: ledger: expected a postgresql:// URL"));
    CHECK_THAT(err("lease = \"1s\"\n"), Catch::StartsWith("c.toml:1: lease: must be at least 3s"));
    CHECK_THAT(err("lease = \"soon\"\n"), Catch::StartsWith("c.toml:1: lease: "));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nconcurrency = \"queue\"\n"),
               Catch::StartsWith("c.toml:4: jobs.a.concurrency: expected \"forbid\""));
    CHECK_THAT(err("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\noverlap = \"skip\"\n"
                   "concurrency = \"forbid\"\n"),
               Catch::Contains("give `overlap` or `concurrency`, not both"));
}

TEST_CASE("a relative state dir option is made absolute against the working directory",
          "[jobs][config]") {
    char cwd[4096];
    REQUIRE(::getcwd(cwd, sizeof cwd));
    std::string here(cwd);
    // Two lastcalls started from two directories with `--state-dir state` have two ledgers, and
    // their runs' LASTCALL_LEDGER differ: a restart of one must not take the other's runs for
    // its own leftovers.
    CHECK(resolve_state_dir("state", "", "") == (here == "/" ? "/state" : here + "/state"));
    CHECK(resolve_state_dir("/var/lib/x", "/from/config", "") == "/var/lib/x");
    CHECK(resolve_state_dir("", "/from/config", "") == "/from/config");
}
