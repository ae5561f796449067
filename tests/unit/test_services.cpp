// SPDX-License-Identifier: Apache-2.0
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <vector>

#include "lastcall/cli/up.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/services/service_status.hpp"
#include "lastcall/services/services.hpp"
#include "lastcall/shutdown/shutdown.hpp"

using namespace lastcall;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> names(const std::vector<ServiceSpec>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(s.name);
    return out;
}

std::string error_of(std::string_view toml) {
    auto r = parse_services_toml(toml, "x.toml");
    REQUIRE_FALSE(r);
    return r.error().message;
}

}  // namespace

TEST_CASE("backoff doubles per quick exit up to the cap", "[services][backoff]") {
    FakeClock clock;
    Backoff b(BackoffPolicy{100ms, 1000ms, 2.0, 10s});
    std::vector<long long> delays;
    for (int i = 0; i < 6; ++i) {
        MonoTime started = clock.now();
        clock.advance(50ms);  // a quick crash
        delays.push_back(b.next_delay(started, clock.now()).count());
    }
    CHECK(delays == std::vector<long long>{100, 200, 400, 800, 1000, 1000});
}

TEST_CASE("backoff starts over after an instance ran for the stable period",
          "[services][backoff]") {
    FakeClock clock;
    Backoff b(BackoffPolicy{100ms, 10s, 3.0, 5s});
    MonoTime t = clock.now();
    clock.advance(10ms);
    CHECK(b.next_delay(t, clock.now()) == 100ms);
    t = clock.now();
    clock.advance(10ms);
    CHECK(b.next_delay(t, clock.now()) == 300ms);
    t = clock.now();
    clock.advance(5s);  // stable: ran exactly reset_after
    CHECK(b.next_delay(t, clock.now()) == 100ms);
    CHECK(b.consecutive() == 1);
}

TEST_CASE("restart policies decide on the wait status", "[services]") {
    int ok = W_EXITCODE(0, 0), failed = W_EXITCODE(3, 0), killed = SIGKILL;
    CHECK_FALSE(should_restart(RestartPolicy::No, failed));
    CHECK_FALSE(should_restart(RestartPolicy::OnFailure, ok));
    CHECK(should_restart(RestartPolicy::OnFailure, failed));
    CHECK(should_restart(RestartPolicy::OnFailure, killed));
    CHECK(should_restart(RestartPolicy::Always, ok));
}

TEST_CASE("service state table: only the documented transitions exist", "[services][state]") {
    using S = ServiceState;
    using E = ServiceEvent;
    CHECK(service_transition(S::Pending, E::Spawned) == S::Starting);
    CHECK(service_transition(S::Starting, E::ReadyPassed) == S::Ready);
    CHECK(service_transition(S::Ready, E::ReadyPassed) == std::nullopt);
    CHECK(service_transition(S::Ready, E::ExitedRestart) == S::Backoff);
    CHECK(service_transition(S::Starting, E::ExitedFinal) == S::Exited);
    CHECK(service_transition(S::Backoff, E::Spawned) == S::Starting);
    CHECK(service_transition(S::Backoff, E::RestartRefused) == S::Stopped);
    CHECK(service_transition(S::Pending, E::StopRequested) == S::Stopped);
    CHECK(service_transition(S::Ready, E::StopRequested) == S::Stopping);
    CHECK(service_transition(S::Exited, E::StopRequested) == S::Stopping);
    CHECK(service_transition(S::Stopping, E::ExitedRestart) == std::nullopt);
    CHECK(service_transition(S::Stopping, E::TreeGone) == S::Stopped);
    CHECK(service_transition(S::Starting, E::LimitReached) == S::Failed);
    CHECK(service_transition(S::Pending, E::DependencyFailed) == S::Failed);
    CHECK(service_transition(S::Backoff, E::DependencyFailed) == std::nullopt);
    CHECK(service_transition(S::Failed, E::StopRequested) == S::Stopping);
    // Failed is never started again.
    CHECK(service_transition(S::Failed, E::Spawned) == std::nullopt);
    // Stopped is final: nothing, not even a spawn, leaves it.
    for (E e : {E::Spawned, E::ReadyPassed, E::ExitedRestart, E::ExitedFinal, E::RestartRefused,
                E::StopRequested, E::TreeGone, E::LimitReached, E::DependencyFailed})
        CHECK(service_transition(S::Stopped, e) == std::nullopt);
}

TEST_CASE("services config: every key parsed", "[services][config]") {
    auto r = parse_services_toml(R"(
[jobs.backup]
schedule = "@daily"

[services.db]
command = ["postgres", "-D", "/data"]
env = { PGPORT = 5432, DEBUG = true }
workdir = "/tmp"
restart = "always"
backoff = { initial = "250ms", max = "10s", factor = 3, reset_after = "1m" }
ready = { tcp = "127.0.0.1:5432", interval = "50ms" }
stop_signal = "INT"
grace = "3s"

[services.web]
command = "exec web --port 80"
depends_on = ["db"]
ready = { exec = ["curl", "-f", "localhost"] }
main = true
)",
                                 "x.toml");
    REQUIRE(r);
    REQUIRE(names(*r) == std::vector<std::string>{"db", "web"});
    const ServiceSpec& db = (*r)[0];
    CHECK(db.argv == std::vector<std::string>{"postgres", "-D", "/data"});
    CHECK(db.env == std::vector<std::string>{"DEBUG=true", "PGPORT=5432"});
    CHECK(db.restart == RestartPolicy::Always);
    CHECK(db.backoff.initial == 250ms);
    CHECK(db.backoff.max == 10s);
    CHECK(db.backoff.factor == 3.0);
    CHECK(db.backoff.reset_after == 60s);
    CHECK(db.ready.kind == ReadyCheck::Kind::Tcp);
    CHECK(db.ready.host == "127.0.0.1");
    CHECK(db.ready.port == 5432);
    CHECK(db.ready.interval == 50ms);
    CHECK(db.stop_signal == SIGINT);
    CHECK(db.grace == 3s);
    CHECK(db.origin == "x.toml:5");
    const ServiceSpec& web = (*r)[1];
    CHECK(web.argv == std::vector<std::string>{"/bin/sh", "-c", "exec web --port 80"});
    CHECK(web.ready.kind == ReadyCheck::Kind::Exec);
    CHECK(web.main);
}

TEST_CASE("services config: errors name file, line and key", "[services][config]") {
    CHECK(error_of("[services.a]\ncommand = 'x'\nrestart = 'sometimes'\n") ==
          "x.toml:3: services.a.restart: expected \"no\", \"on-failure\" or \"always\", not "
          "\"sometimes\"");
    CHECK(error_of("[services.a]\ncommand = 'x'\ncolour = 'red'\n") ==
          "x.toml:3: services.a.colour: unknown key");
    CHECK(error_of("[services.a]\nrestart = 'no'\n") == "x.toml:1: services.a.command: missing");
    CHECK(error_of("[services.a]\ncommand = ['', '-x']\n") ==
          "x.toml:2: services.a.command: the program name is empty");
    CHECK(error_of("[services.a]\ncommand = 'x'\ngrace = '5'\n")
              .starts_with("x.toml:3: services.a.grace: invalid duration '5'"));
    CHECK(error_of("[services.a]\ncommand = 'x'\nready = { file = 'f', tcp = '1.2.3.4:5' }\n") ==
          "x.toml:3: services.a.ready: expected exactly one of file, tcp, exec");
    CHECK(error_of("[services.a]\ncommand = 'x'\nready = { tcp = 'localhost' }\n") ==
          "x.toml:3: services.a.ready.tcp: expected ADDRESS:PORT");
    // Refused at load: a name passed and left the service (and its dependents) waiting forever.
    CHECK(error_of("[services.a]\ncommand = 'x'\nready = { tcp = 'localhost:80' }\n") ==
          "x.toml:3: services.a.ready.tcp: 'localhost' is not a numeric IPv4 or IPv6 address "
          "(names are not looked up)");
    CHECK(parse_services_toml("[services.a]\ncommand = 'x'\nready = { tcp = '[::1]:80' }\n",
                              "x.toml"));
    CHECK(error_of("[services.a]\ncommand = 'x'\nstop_signal = 'NOPE'\n")
              .starts_with("x.toml:3: services.a.stop_signal: "));
    CHECK(error_of("[services.a]\ncommand = 'x'\nmain = true\n[services.b]\ncommand = 'y'\n"
                   "main = true\n") ==
          "x.toml:4: services.b.main: only one service can be main (another is at x.toml:1)");
    CHECK(error_of("[services]\na = 1\n") == "x.toml:2: services.a: expected a table [services.a]");
    CHECK(error_of("[services.a]\ncommand = [\n").starts_with("x.toml:"));
}

TEST_CASE("a relative ready file is the service's, resolved against its workdir",
          "[services][config]") {
    auto r = parse_services_toml(
        "[services.a]\ncommand = 'x'\nworkdir = '/srv/a'\n"
        "ready = { file = 'ready.flag' }\n"
        "[services.b]\ncommand = 'y'\nready = { file = 'b.flag' }\n"
        "[services.c]\ncommand = 'z'\nworkdir = '/srv/c'\n"
        "ready = { file = '/run/c.flag' }\n",
        "x.toml");
    REQUIRE(r);
    CHECK((*r)[0].ready.file == "/srv/a/ready.flag");
    CHECK((*r)[1].ready.file == "b.flag");  // no workdir: lastcall's directory is the service's
    CHECK((*r)[2].ready.file == "/run/c.flag");
}

TEST_CASE("services config: dependency order, unknown names and cycles", "[services][config]") {
    auto r = parse_services_toml(R"(
[services.web]
command = "w"
depends_on = ["api"]
[services.api]
command = "a"
depends_on = ["db", "cache"]
[services.cache]
command = "c"
[services.db]
command = "d"
)",
                                 "x.toml");
    REQUIRE(r);
    CHECK(names(*r) == std::vector<std::string>{"db", "cache", "api", "web"});

    CHECK(error_of("[services.a]\ncommand = 'x'\ndepends_on = ['ghost']\n") ==
          "x.toml:3: services.a.depends_on: unknown service 'ghost'");
    CHECK(error_of("[services.a]\ncommand = 'x'\n\ndepends_on = ['a']\n") ==
          "x.toml:4: services.a.depends_on: depends on itself");
    CHECK(error_of("[services.a]\ncommand = 'x'\ndepends_on = ['b']\n"
                   "[services.b]\ncommand = 'y'\ndepends_on = ['c']\n"
                   "[services.c]\ncommand = 'z'\ndepends_on = ['a']\n") ==
          "x.toml:9: services.c.depends_on: dependency cycle a -> b -> c -> a");
}

TEST_CASE("services config: a 100,000-long depends_on chain is ordered without recursion",
          "[services][config]") {
    // Each service depends on the next; the recursive resolution this replaces needed one stack
    // frame per link and died of SIGSEGV.
    constexpr std::size_t n = 100000;
    std::vector<ServiceSpec> chain(n);
    for (std::size_t i = 0; i < n; ++i) {
        chain[i].name = "s" + std::to_string(i);
        chain[i].origin = "x.toml:" + std::to_string(i + 1);
        if (i + 1 < n) chain[i].depends_on = {"s" + std::to_string(i + 1)};
    }
    REQUIRE(order_by_dependencies(chain));
    CHECK(chain.front().name == "s99999");
    CHECK(chain.back().name == "s0");

    // Closed into a cycle: the error names its start and end, not 100,000 names.
    std::vector<ServiceSpec> cycle(n);
    for (std::size_t i = 0; i < n; ++i) {
        cycle[i].name = "s" + std::to_string(i);
        cycle[i].depends_on = {"s" + std::to_string((i + 1) % n)};
        cycle[i].depends_on_origin = "x.toml:" + std::to_string(i + 1);
    }
    auto st = order_by_dependencies(cycle);
    REQUIRE_FALSE(st);
    CHECK(st.error().message.starts_with(
        "x.toml:100000: services.s99999.depends_on: dependency cycle s0 -> s1 -> "));
    CHECK(st.error().message.ends_with("-> s99999 -> s0"));
    CHECK(st.error().message.find("(99985 more)") != std::string::npos);
    CHECK(st.error().message.size() < 400);
}

TEST_CASE("Procfile: entries, comments, and errors with the line number", "[services][procfile]") {
    auto r =
        parse_procfile("# dev\nweb: npm run dev\n\nworker:  node worker.js --x=1:2\n", "Procfile");
    REQUIRE(r);
    REQUIRE(r->size() == 2);
    CHECK((*r)[0].name == "web");
    CHECK((*r)[0].command == "npm run dev");
    CHECK((*r)[1].command == "node worker.js --x=1:2");
    CHECK((*r)[1].line == 4);

    CHECK(parse_procfile("web: x\nthis line has no colon\n", "Procfile").error().message ==
          "Procfile:2: expected 'name: command', found no ':'");
    CHECK(parse_procfile("web: x\nweb: y\n", "Procfile").error().message ==
          "Procfile:2: process 'web' is already defined on line 1");
    CHECK(parse_procfile("web:\n", "Procfile").error().message ==
          "Procfile:1: process 'web' has no command");
    CHECK(parse_procfile("my web: x\n", "Procfile").error().message ==
          "Procfile:1: invalid process name 'my web' (use letters, digits, '_', '-', '.')");
}

TEST_CASE("a Procfile name with control characters is shown escaped in its error",
          "[services][procfile]") {
    // The error goes to the reader's terminal: the file's ESC [2J must not clear it.
    CHECK(parse_procfile("w\x1b[2J: x\n", "Procfile").error().message ==
          "Procfile:1: invalid process name 'w\\x1b[2J' (use letters, digits, '_', '-', '.')");
}

TEST_CASE("Procfile selection with --only and --except", "[services][procfile]") {
    std::vector<ProcfileEntry> e{{"web", "w", 1}, {"worker", "k", 2}, {"css", "c", 3}};
    CHECK(names(*procfile_services(e, "Procfile", {"worker"}, {})) ==
          std::vector<std::string>{"worker"});
    CHECK(names(*procfile_services(e, "Procfile", {}, {"css"})) ==
          std::vector<std::string>{"web", "worker"});
    CHECK(procfile_services(e, "Procfile", {"nope"}, {}).error().message ==
          "--only: no process 'nope' in Procfile");
    auto all = procfile_services(e, "Procfile", {}, {});
    REQUIRE(all);
    CHECK((*all)[0].main);
    CHECK((*all)[0].argv == std::vector<std::string>{"/bin/sh", "-c", "exec w"});
}

TEST_CASE(".env: quoting, export and comments", "[services][dotenv]") {
    auto r = parse_dotenv(
        "# c\nexport A=1\nB='x # y'\nC=\"line\\nnext \\\"q\\\"\"\nD=plain # comment\nE=\n", ".env");
    REQUIRE(r);
    CHECK(*r == std::vector<std::string>{"A=1", "B=x # y", "C=line\nnext \"q\"", "D=plain", "E="});
    CHECK(parse_dotenv("A=1\nnot a pair\n", ".env").error().message ==
          ".env:2: expected KEY=value");
    CHECK(parse_dotenv("A=\"open\n", ".env").error().message ==
          ".env:1: A: unterminated double quote");
}

TEST_CASE("status file round trip", "[services][status]") {
    StatusFile f;
    f.lastcall_pid = 42;
    f.services = {{"web", 100, "ready", 2, 1700000000}, {"worker", -1, "backoff", 5, 0}};
    auto back = parse_status(render_status(f), "s");
    REQUIRE(back);
    CHECK(back->lastcall_pid == 42);
    REQUIRE(back->services.size() == 2);
    CHECK(back->services[0].pid == 100);
    CHECK(back->services[0].since == 1700000000);
    CHECK(back->services[1].pid == -1);
    CHECK(back->services[1].state == "backoff");
    CHECK(back->services[1].restarts == 5);
    CHECK_FALSE(parse_status("hello\n", "s"));
}

TEST_CASE("a config path with a newline cannot forge a line of the status file",
          "[services][status]") {
    // A file name may hold any byte but '/' and NUL: written as it was, the rest of this one
    // became a "service" line, and `lastcall status` listed a service that does not exist.
    StatusFile f;
    f.lastcall_pid = 42;
    f.config = "/srv/weird/y\nservice fake 1 ready 0 0\\n\\";
    f.services = {{"web", 100, "ready", 0, 0}};
    auto back = parse_status(render_status(f), "s");
    REQUIRE(back);
    CHECK(back->config == f.config);
    REQUIRE(back->services.size() == 1);
    CHECK(back->services[0].name == "web");
}

namespace {

struct RecordingActions : ShutdownActions {
    std::vector<std::string> calls;
    void state_changed(State, State to, Event) override {
        calls.push_back("state " + std::string(to_string(to)));
    }
    void readiness_off() override { calls.push_back("readiness off"); }
    void start_pre_stop() override { calls.push_back("pre-stop"); }
    void signal_tree(int) override { calls.push_back("signal tree"); }
    void kill_tree() override { calls.push_back("kill tree"); }
};

}  // namespace

TEST_CASE("a drain hold keeps the tree unsignalled until released", "[services][shutdown]") {
    FakeClock clock;
    ShutdownConfig config;
    config.grace = 2000ms;
    // Without a hold the drain ends at once: the hold is taken from inside the state change, as
    // the services component does from its state_changed(Running -> Draining).
    struct Holder : RecordingActions {
        Shutdown* sd = nullptr;
        void state_changed(State from, State to, Event e) override {
            RecordingActions::state_changed(from, to, e);
            if (to == State::Draining) sd->hold_drain();
        }
    } holder;
    Shutdown h(config, clock, holder);
    holder.sd = &h;
    h.on_signal(SIGTERM);
    CHECK(h.state() == State::Draining);
    // While held, the next deadline is the hold's limit (half of the grace), not an immediate
    // wakeup.
    CHECK(h.next_deadline() == clock.now() + 1000ms);
    clock.advance(500ms);
    h.on_timer();
    CHECK(h.state() == State::Draining);
    h.release_drain();
    CHECK(h.state() == State::Stopping);
    CHECK(holder.calls == std::vector<std::string>{"state draining", "readiness off",
                                                   "state stopping", "signal tree"});
}

TEST_CASE("a drain hold cannot stretch the grace budget", "[services][shutdown]") {
    FakeClock clock;
    struct Holder : RecordingActions {
        Shutdown* sd = nullptr;
        void state_changed(State from, State to, Event e) override {
            RecordingActions::state_changed(from, to, e);
            if (to == State::Draining) sd->hold_drain();
        }
    } holder;
    ShutdownConfig config;
    config.grace = 1000ms;
    Shutdown h(config, clock, holder);
    holder.sd = &h;
    h.on_signal(SIGTERM);
    clock.advance(1000ms);
    h.on_timer();
    CHECK(h.state() == State::Forcing);
    CHECK(holder.calls.back() == "kill tree");
}

TEST_CASE("a Procfile line that is one simple command is exec'd, a compound one is not",
          "[procfile]") {
    using V = std::vector<std::string>;
    CHECK(procfile_argv("node server.js --port $PORT") ==
          V{"/bin/sh", "-c", "exec node server.js --port $PORT"});
    CHECK(procfile_argv("bundle exec puma -C 'config/puma;x.rb' > log") ==
          V{"/bin/sh", "-c", "exec bundle exec puma -C 'config/puma;x.rb' > log"});
    for (const char* compound :
         {"cd app; npm start", "a && b", "a | b", "sleep 1 &", "(cd x && y)",
          "PORT=5000 node server.js", "if true; then x; fi", "exec node x", "{ a; }", "exit 4",
          "cd /srv", "wait", ". ./env.sh", ": nothing", "trap '' TERM"}) {
        INFO(compound);
        CHECK(procfile_argv(compound) == V{"/bin/sh", "-c", compound});
    }
}

TEST_CASE("a config that is not UTF-8 is refused with its line before the TOML parser sees it",
          "[services][config]") {
    // The bytes the config fuzzer found: toml++ reached an unreachable point on them.
    auto r =
        parse_services_toml("[services.a]\ncommand = \"x\"\nuser = \xd8\"nobody\"\n", "f.toml");
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "f.toml:3: not valid UTF-8 (a TOML file must be UTF-8)");
    auto j =
        parse_jobs_toml("[jobs.b]\n# caf\xc3\xa9 is fine, \xed\xa0\x80 is a surrogate\n", "j.toml");
    REQUIRE_FALSE(j);
    CHECK(j.error().message == "j.toml:2: not valid UTF-8 (a TOML file must be UTF-8)");
}

TEST_CASE("non-ASCII text in strings and comments is kept; outside them it is a clear error",
          "[services][config]") {
    auto r = parse_services_toml(
        "# caf\xc3\xa9\n[services.a] # \xe2\x80\x94 dash\n"
        "command = \"echo d\xc3\xa9j\xc3\xa0\"\n"
        "env = { G = '\xd2\x93', M = \"\"\"\\\n   \xc3\xa9t\xc3\xa9\"\"\" }\n",
        "u.toml");
    REQUIRE(r);
    CHECK((*r)[0].argv.back() == "echo d\xc3\xa9j\xc3\xa0");
    CHECK((*r)[0].env == std::vector<std::string>{"G=\xd2\x93", "M=\xc3\xa9t\xc3\xa9"});
    auto lit = parse_services_toml(
        "[services.'b']\ncommand = 'C:\\p \"q\" \xc3\xa9'\n"
        "env = { L = \'\'\'a\\b\xc3\xa9\'\'\'\'\' }\n",
        "l.toml");
    REQUIRE(lit);
    CHECK((*lit)[0].name == "b");
    CHECK((*lit)[0].argv.back() == "C:\\p \"q\" \xc3\xa9");
    CHECK((*lit)[0].env == std::vector<std::string>{"L=a\\b\xc3\xa9''"});
    auto bad = parse_services_toml("[services.a\xd2\x93]\ncommand = \"x\"\n", "k.toml");
    REQUIRE_FALSE(bad);
    CHECK(bad.error().message ==
          "k.toml:1: a character outside ASCII is allowed only in a string or a comment");
}
