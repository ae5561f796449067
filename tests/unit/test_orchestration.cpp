// SPDX-License-Identifier: Apache-2.0
// The orchestration of units of work (ServiceManager, JobScheduler) on a fake host: restart
// back-off, dependency order, the parallel stop, per-unit graces, a job's timeout escalation and
// refusals once draining, with time advanced by the test and exits delivered by it. No process is
// forked and nothing sleeps.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>

#include "fake_host.hpp"
#include "lastcall/core/event_loop.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "lastcall/services/service_manager.hpp"
#include "lastcall/services/services.hpp"
#include "stallable_ledger.hpp"
#include "temp_dir.hpp"

using namespace lastcall;
using namespace std::chrono_literals;
using lastcall::test::FakeHost;

namespace {

const int kExit0 = W_EXITCODE(0, 0);
const int kExit1 = W_EXITCODE(1, 0);
const int kTermed = SIGTERM;  // a wait status: killed by SIGTERM

// How many of `members` have had `sig`.
long had(const FakeHost& host, const std::vector<pid_t>& members, int sig) {
    return std::count_if(members.begin(), members.end(), [&](pid_t p) { return host.got(p, sig); });
}

// Each of `members` had SIGTERM exactly once, and none was killed.
void check_stopped_once_each(const FakeHost& host, const std::vector<pid_t>& members) {
    for (pid_t p : members) {
        CHECK(host.count(p, SIGTERM) == 1);
        CHECK_FALSE(host.got(p, SIGKILL));
    }
}

std::vector<ServiceSpec> services(const std::string& toml) {
    auto r = parse_services_toml(toml, "test.toml");
    REQUIRE(r);
    REQUIRE(order_by_dependencies(*r));
    return std::move(*r);
}

// A ServiceManager attached to a fake host, as the supervisor would attach it.
struct Services {
    explicit Services(const std::string& toml, std::chrono::milliseconds grace = 10s)
        : manager(services(toml), ServiceManagerOptions{}) {
        host.host_settings.grace = grace;
        host.deliver_to(&manager);
        REQUIRE(manager.attach_host(host));
        host.run_posted();
    }
    // What the supervisor does on the first trigger: intake closes, then Running -> Draining.
    void begin_shutdown() {
        host.admission().close();
        manager.state_changed(State::Running, State::Draining);
        host.run_posted();
    }
    pid_t pid(const std::string& argv0) {
        auto p = host.live(argv0);
        REQUIRE(p);
        return *p;
    }
    ServiceState state(const std::string& name) { return *manager.state_of(name); }

    FakeHost host;
    ServiceManager manager;
};

}  // namespace

TEST_CASE("a crashing service restarts after a back-off that doubles per quick exit",
          "[orchestration][services]") {
    Services s(R"(
[services.web]
command = ["web"]
restart = "always"
backoff = { initial = "1s", factor = 2, max = "30s", reset_after = "1m" }
restart_limit = { burst = 100, interval = "1s" }
)");
    REQUIRE(s.host.spawned_argv0("web").size() == 1);
    s.host.exit(s.pid("web"), kExit1);
    CHECK(s.state("web") == ServiceState::Backoff);
    s.host.advance(999ms);
    CHECK(s.host.spawned_argv0("web").size() == 1);
    s.host.advance(1ms);
    CHECK(s.host.spawned_argv0("web").size() == 2);  // 1 s after the first exit

    s.host.exit(s.pid("web"), kExit1);
    s.host.advance(1999ms);
    CHECK(s.host.spawned_argv0("web").size() == 2);
    s.host.advance(1ms);
    CHECK(s.host.spawned_argv0("web").size() == 3);  // 2 s after the second quick exit
    CHECK(s.state("web") == ServiceState::Ready);
}

TEST_CASE("a service that keeps failing stops restarting at its restart limit",
          "[orchestration][services]") {
    Services s(R"(
[services.web]
command = ["web"]
restart = "on-failure"
backoff = { initial = "100ms", factor = 1 }
restart_limit = { burst = 3, interval = "10s" }
)");
    for (int i = 0; i < 3; ++i) {
        s.host.exit(s.pid("web"), kExit1);
        s.host.advance(100ms);
    }
    CHECK(s.host.spawned_argv0("web").size() == 3);
    CHECK(s.state("web") == ServiceState::Failed);
    s.host.advance(1min);
    CHECK(s.host.spawned_argv0("web").size() == 3);
}

TEST_CASE("a service starts only once what it depends on is ready", "[orchestration][services]") {
    Services s(R"(
[services.db]
command = ["db"]
ready = { exec = ["db-ready"], interval = "1s" }

[services.web]
command = ["web"]
depends_on = ["db"]
)");
    CHECK(s.host.spawned_argv0("web").empty());
    s.host.advance(0ms);  // the first probe is due at once
    auto probe = s.host.live("db-ready");
    REQUIRE(probe);
    s.host.exit(*probe, kExit1);  // not ready yet
    CHECK(s.host.spawned_argv0("web").empty());
    s.host.advance(1s);
    probe = s.host.live("db-ready");
    REQUIRE(probe);
    s.host.exit(*probe, kExit0);
    CHECK(s.state("db") == ServiceState::Ready);
    CHECK(s.host.spawned_argv0("web").size() == 1);
}

// A service that restarts 1 s after each exit, with a grace of 3 s; its first instance forked a
// daemon and crashed.
const char* const kRestartingWeb = R"(
[services.web]
command = ["web"]
restart = "always"
grace = "3s"
backoff = { initial = "1s" }
)";
struct CrashedWithDaemon : Services {
    CrashedWithDaemon() : Services(kRestartingWeb) {
        daemon = host.fork_child(pid("web"));
        host.exit(pid("web"), kExit1);
    }
    pid_t daemon = 0;
};

// The services' part of the shutdown report.
std::string services_report(Services& s) {
    JsonWriter w;
    w.begin_object();
    s.manager.contribute_report(w);
    w.end_object();
    return w.str();
}

TEST_CASE(
    "what a crashed instance left behind is stopped, and killed at its grace, before "
    "the next instance starts",
    "[orchestration][services]") {
    CrashedWithDaemon s;  // a daemon that ignores SIGTERM and holds the old port
    pid_t daemon = s.daemon;
    CHECK(s.host.count(daemon, SIGTERM) == 1);
    s.host.advance(1s);  // the back-off is over, but the old instance's daemon still runs
    CHECK(s.host.spawned_argv0("web").size() == 1);
    s.host.advance(2s);  // the service's grace since the exit: its scope is killed
    CHECK(s.host.proc(daemon).killed);
    CHECK(s.host.spawned_argv0("web").size() == 1);
    s.host.reap_killed();
    s.host.advance(100ms);
    CHECK(s.host.spawned_argv0("web").size() == 2);
    CHECK(s.state("web") == ServiceState::Ready);
    CHECK(s.host.count(daemon, SIGTERM) == 1);
}

TEST_CASE("a leftover that outlives its SIGKILL is not sent the stop signal a second time",
          "[orchestration][services]") {
    // Stuck in uninterruptible sleep: the service restarts beside it after 1 s, and the
    // shutdown's stop must not count it as a new member.
    CrashedWithDaemon s;
    s.host.advance(3s);  // the grace: killed, but it does not die
    REQUIRE(s.host.proc(s.daemon).killed);
    s.host.advance(1100ms);
    REQUIRE(s.host.spawned_argv0("web").size() == 2);
    s.begin_shutdown();
    s.host.advance(100ms);
    CHECK(s.host.count(s.daemon, SIGTERM) == 1);
}

TEST_CASE("leftovers that obey the stop signal do not delay a restart beyond its back-off",
          "[orchestration][services]") {
    CrashedWithDaemon s;
    pid_t daemon = s.daemon;
    s.host.exit(daemon, kTermed);
    s.host.advance(999ms);
    CHECK(s.host.spawned_argv0("web").size() == 1);
    s.host.advance(1ms);
    CHECK(s.host.spawned_argv0("web").size() == 2);
    CHECK_FALSE(s.host.proc(daemon).killed);
}

TEST_CASE("a shutdown while a crashed instance's leftovers are being stopped stops them once",
          "[orchestration][services]") {
    CrashedWithDaemon s;
    pid_t daemon = s.daemon;
    s.begin_shutdown();
    s.host.advance(1s);
    CHECK(s.host.spawned_argv0("web").size() == 1);  // no restart once draining
    CHECK(s.host.count(daemon, SIGTERM) == 1);
    CHECK_FALSE(s.host.proc(daemon).killed);
    s.host.advance(2s);  // still the grace counted from the exit, not a new one
    CHECK(s.host.proc(daemon).killed);
    s.host.reap_killed();
    s.host.advance(100ms);
    CHECK(s.state("web") == ServiceState::Stopped);
    CHECK(s.host.drain_releases == 1);
    // A kill during the shutdown is the shutdown's: forced.
    CHECK_THAT(services_report(s), Catch::Contains(R"("forced":true,"leftovers_killed":0)"));
}

// A service that does not restart, with a grace of 3 s: its instance forked a daemon and
// exited, and at the grace, while lastcall ran, the daemon was killed.
struct LeftoverKilledWhileRunning : Services {
    LeftoverKilledWhileRunning()
        : Services(R"(
[services.web]
command = ["web"]
restart = "no"
grace = "3s"
)") {
        pid_t leader = pid("web");
        daemon = host.fork_child(leader);
        host.exit(leader, kExit0);
        host.advance(3s);
    }
    pid_t daemon = 0;
};

TEST_CASE(
    "a kill of what an exited instance left behind, while running, is not a forced stop of "
    "the service",
    "[orchestration][services]") {
    LeftoverKilledWhileRunning s;
    REQUIRE(s.host.proc(s.daemon).killed);
    s.host.reap_killed();
    s.host.advance(100ms);
    CHECK(s.state("web") == ServiceState::Exited);
    s.begin_shutdown();
    s.host.advance(100ms);
    CHECK_THAT(services_report(s), Catch::Contains(R"("forced":false,"leftovers_killed":1)"));
}

TEST_CASE(
    "a shutdown that begins while leftovers killed during the run are still dying does not "
    "make the service's stop forced",
    "[orchestration][services]") {
    LeftoverKilledWhileRunning s;
    REQUIRE(s.host.proc(s.daemon).killed);
    s.begin_shutdown();  // before the kernel has finished the kill
    s.host.reap_killed();
    s.host.advance(100ms);
    CHECK(s.host.count(s.daemon, SIGKILL) == 1);
    CHECK_THAT(services_report(s), Catch::Contains(R"("forced":false,"leftovers_killed":1)"));
}

TEST_CASE(
    "a dependency stops at once when its dependent's leftovers were already killed during the "
    "run",
    "[orchestration][services]") {
    // web's crashed instance left a daemon in uninterruptible sleep, killed at web's grace
    // while lastcall ran; it does not die. At the shutdown web has nothing more to do, and db
    // must not wait for the order's hold limit.
    Services s(R"(
[services.db]
command = ["db"]
[services.web]
command = ["web"]
depends_on = ["db"]
restart = "no"
grace = "3s"
)");
    pid_t db = s.pid("db");
    pid_t daemon = s.host.fork_child(s.pid("web"));
    s.host.exit(s.pid("web"), kExit1);
    s.host.advance(3s);  // web's grace: the daemon is killed, and stays
    REQUIRE(s.host.proc(daemon).killed);
    s.begin_shutdown();
    s.host.advance(200ms);
    CHECK(s.host.got(db, SIGTERM));
}

TEST_CASE("a restart due after the shutdown began is refused", "[orchestration][services]") {
    Services s(R"(
[services.web]
command = ["web"]
restart = "always"
backoff = { initial = "1s" }
)");
    s.host.exit(s.pid("web"), kExit1);
    REQUIRE(s.state("web") == ServiceState::Backoff);
    s.begin_shutdown();
    s.host.advance(1min);
    CHECK(s.host.spawned_argv0("web").size() == 1);
    CHECK(s.state("web") == ServiceState::Stopped);
    CHECK(s.host.admission().stats().of(EntryPath::Restart).registered == 0);
    CHECK(s.host.admission().stats().of(EntryPath::Restart).refused == 1);
}

TEST_CASE("the admission refuses a service start once intake is closed, and says so",
          "[orchestration][services]") {
    Services s(R"(
[services.web]
command = ["web"]
restart = "always"
backoff = { initial = "1s" }
)");
    s.host.exit(s.pid("web"), kExit1);
    // Intake closed, but the state change has not reached the manager yet (the race the
    // admission closes): the due restart is refused by the admission itself.
    s.host.admission().close();
    s.host.advance(1s);
    CHECK(s.host.spawned_argv0("web").size() == 1);
    CHECK(s.host.admission().stats().of(EntryPath::Restart).refused == 1);
}

TEST_CASE("services that nothing depends on get their stop signal at the same time",
          "[orchestration][services]") {
    Services s(R"(
[services.a]
command = ["a"]
[services.b]
command = ["b"]
[services.c]
command = ["c"]
)",
               5s);
    pid_t a = s.pid("a"), b = s.pid("b"), c = s.pid("c");
    s.begin_shutdown();
    CHECK(s.host.drain_holds == 1);
    s.host.advance(0ms);
    REQUIRE(s.host.when(a, SIGTERM));
    CHECK(s.host.when(a, SIGTERM) == s.host.when(b, SIGTERM));
    CHECK(s.host.when(b, SIGTERM) == s.host.when(c, SIGTERM));
    // Each needs 2 s to stop: all are gone after 2 s, none was killed.
    s.host.advance(2s);
    for (pid_t p : {a, b, c}) s.host.exit(p, kTermed);
    for (pid_t p : {a, b, c}) {
        CHECK(s.host.count(p, SIGTERM) == 1);
        CHECK_FALSE(s.host.got(p, SIGKILL));
    }
    CHECK(s.host.drain_releases == 1);
    CHECK(s.host.forces.empty());
}

TEST_CASE("a service is stopped only after the services that depend on it have exited",
          "[orchestration][services]") {
    Services s(R"(
[services.a]
command = ["a"]
[services.b]
command = ["b"]
depends_on = ["a"]
)");
    pid_t a = s.pid("a"), b = s.pid("b");
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(s.host.got(b, SIGTERM));
    CHECK_FALSE(s.host.got(a, SIGTERM));
    s.host.advance(3s);
    CHECK_FALSE(s.host.got(a, SIGTERM));
    s.host.exit(b, kTermed);
    CHECK(s.host.when(a, SIGTERM) == s.host.now());
    s.host.exit(a, kTermed);
    CHECK(s.host.drain_releases == 1);
}

TEST_CASE("a service's own grace ends in a kill of its scope, capped by the global grace",
          "[orchestration][services]") {
    Services s(R"(
[services.quick]
command = ["quick"]
grace = "1s"
[services.slow]
command = ["slow"]
grace = "1h"
)",
               5s);
    pid_t quick = s.pid("quick"), slow = s.pid("slow");
    pid_t worker = s.host.fork_child(slow);  // a worker of slow's, in its scope
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(s.host.got(worker, SIGTERM));
    s.host.advance(999ms);
    CHECK_FALSE(s.host.got(quick, SIGKILL));
    s.host.advance(1ms);
    CHECK(s.host.got(quick, SIGKILL));
    CHECK_FALSE(s.host.got(slow, SIGKILL));
    s.host.advance(4s);  // 5 s: the global grace caps slow's hour
    CHECK(s.host.got(slow, SIGKILL));
    CHECK(s.host.got(worker, SIGKILL));
    s.host.reap_killed();
    CHECK(s.state("quick") == ServiceState::Stopped);
    CHECK(s.state("slow") == ServiceState::Stopped);
    REQUIRE(s.host.forces.size() == 2);
    CHECK(s.host.forces[0].source == "service quick: grace");
    CHECK(s.host.forces[1].source == "service slow: grace");
    CHECK(s.host.forces[1].count == 2);
    CHECK(s.host.drain_releases == 1);
}

// A service "app" with a 2 s grace and the kill_scope given, running.
struct ScopedApp : Services {
    explicit ScopedApp(const std::string& scope)
        : Services("[services.app]\ncommand = [\"app\"]\nkill_scope = \"" + scope +
                   "\"\ngrace = \"2s\"\n") {
        app = pid("app");
    }
    pid_t app = 0;
};

TEST_CASE(
    "a service with kill_scope = child: only its leader gets the stop signal, the rest is killed "
    "at its grace",
    "[orchestration][services]") {
    ScopedApp s("child");
    pid_t app = s.app;
    pid_t worker = s.host.fork_child(app);  // in app's group and scope
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(s.host.count(app, SIGTERM) == 1);
    CHECK(s.host.proc(worker).signals.empty());
    // Out of reach of the stop signal, the worker is the service's still: the tree's pass (at
    // the hold's limit) leaves it to the service's kill.
    CHECK(s.host.units().claimed(s.host.info(worker)));
    s.host.exit(app, kTermed);  // the leader obeys; the worker stays
    s.host.advance(1999ms);
    CHECK(s.state("app") == ServiceState::Stopping);
    CHECK(s.host.proc(worker).signals.empty());
    s.host.advance(1ms);
    CHECK(s.host.count(worker, SIGKILL) == 1);
    CHECK_FALSE(s.host.got(worker, SIGTERM));
    s.host.reap_killed();
    CHECK(s.state("app") == ServiceState::Stopped);
    REQUIRE(s.host.forces.size() == 1);
    CHECK(s.host.forces[0].source == "service app: grace");
    CHECK(s.host.drain_releases == 1);
}

TEST_CASE(
    "a service with kill_scope = group: its leader's process group gets the stop signal, a "
    "process in a group of its own only the kill at the grace",
    "[orchestration][services]") {
    ScopedApp s("group");
    pid_t app = s.app;
    pid_t worker = s.host.fork_child(app);  // in app's group
    pid_t daemon = s.host.fork_child(app);
    s.host.new_group(daemon);  // left app's group (setsid)
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(s.host.count(app, SIGTERM) == 1);
    CHECK(s.host.count(worker, SIGTERM) == 1);
    CHECK(s.host.proc(daemon).signals.empty());
    s.host.exit(worker, kTermed);
    s.host.exit(app, kTermed);
    s.host.advance(2s);
    CHECK(s.host.count(daemon, SIGKILL) == 1);
    CHECK_FALSE(s.host.got(daemon, SIGTERM));
}

TEST_CASE("a service's kill_scope counts from its current instance's leader after a restart",
          "[orchestration][services]") {
    Services s(R"(
[services.app]
command = ["app"]
restart = "always"
kill_scope = "child"
backoff = { initial = "1s" }
)");
    pid_t first = s.pid("app");
    s.host.exit(first, kExit1);
    s.host.advance(1s);  // the back-off: the next instance starts
    pid_t second = s.pid("app");
    REQUIRE(second != first);
    pid_t worker = s.host.fork_child(second);
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(s.host.count(second, SIGTERM) == 1);
    CHECK(s.host.proc(worker).signals.empty());
}

TEST_CASE("a service's kill_scope is tree, group or child", "[orchestration][services]") {
    auto r = parse_services_toml("[services.app]\ncommand = [\"app\"]\nkill_scope = \"process\"\n",
                                 "test.toml");
    REQUIRE_FALSE(r);
    CHECK(r.error().message ==
          "test.toml:3: services.app.kill_scope: expected \"tree\", \"group\" or \"child\", not "
          "\"process\"");
    auto d = parse_services_toml("[services.app]\ncommand = [\"app\"]\n", "test.toml");
    REQUIRE(d);
    CHECK((*d)[0].kill_scope == StopReach::Tree);
}

// A service "app" with a 3 s grace, already sent its stop signal by the shutdown; its TERM
// trap then starts `helper`.
struct StoppingApp : Services {
    StoppingApp() : Services("[services.app]\ncommand = [\"app\"]\ngrace = \"3s\"\n") {
        app = pid("app");
        begin_shutdown();
        host.advance(0ms);
        helper = host.fork_child(app);
    }
    pid_t app = 0;
    pid_t helper = 0;
};

TEST_CASE("a process born after the stop signal is not signalled again before the kill",
          "[orchestration][services]") {
    StoppingApp s;
    pid_t app = s.app, cleanup = s.helper;
    s.host.advance(2900ms);
    CHECK(s.host.count(app, SIGTERM) == 1);
    CHECK(s.host.proc(cleanup).signals.empty());
    s.host.exit(cleanup, kExit0);
    s.host.exit(app, kExit0);
    CHECK(s.state("app") == ServiceState::Stopped);
    CHECK(s.host.forces.empty());
}

TEST_CASE(
    "a helper that a crashed instance's leftover starts in its cleanup is not signalled "
    "again by the shutdown",
    "[orchestration][services]") {
    CrashedWithDaemon s;  // the daemon had SIGTERM at the crash; its trap starts a helper
    pid_t helper = s.host.fork_child(s.daemon);
    s.begin_shutdown();
    s.host.advance(100ms);
    CHECK(s.host.count(s.daemon, SIGTERM) == 1);
    CHECK(s.host.proc(helper).signals.empty());
}

TEST_CASE("every process of a stopping service is its own, not the tree pass's",
          "[orchestration][services]") {
    // At the hold's limit the supervisor signals the rest of the tree and asks each component
    // whether a process is its own. A cleanup helper whose parent has exited (reparented to
    // lastcall) is still the service's: a member of its scope born after its stop signal.
    StoppingApp s;
    pid_t app = s.app, helper = s.helper;
    pid_t grandchild = s.host.fork_child(helper);
    s.host.exit(app, kExit0);  // the trap started the helper and exited
    s.host.advance(100ms);
    CHECK(s.host.units().claimed(s.host.info(helper)));
    CHECK(s.host.units().claimed(s.host.info(grandchild)));
    CHECK(s.host.proc(helper).signals.empty());
}

TEST_CASE("a dependency waits for the leftovers of an exited main service to be gone",
          "[orchestration][services]") {
    Services s(R"(
[services.db]
command = ["db"]

[services.web]
command = ["web"]
depends_on = ["db"]
main = true
grace = "3s"
)");
    pid_t db = s.pid("db");
    pid_t web = s.pid("web");
    pid_t leftover = s.host.fork_child(web);
    s.host.exit(web, W_EXITCODE(5, 0));
    s.begin_shutdown();
    s.host.advance(100ms);
    CHECK(s.host.got(leftover, SIGTERM));
    CHECK_FALSE(s.host.got(db, SIGTERM));
    s.host.exit(leftover, kTermed);
    s.host.advance(100ms);
    CHECK(s.host.got(db, SIGTERM));
}

// A service "app" with the given grace (under a 60 s global one) and 40 processes of its own
// besides it; each signal then takes 10 ms on the fake clock (a fork storm's thousands of
// members on a slow machine, in miniature). `members` lists app and its 40.
struct CrowdedApp {
    Services s;
    std::vector<pid_t> members;
    explicit CrowdedApp(const std::string& grace)
        : s("[services.app]\ncommand = [\"app\"]\ngrace = \"" + grace + "\"\n", 60s) {
        members.push_back(s.pid("app"));
        for (int i = 0; i < 40; ++i) members.push_back(s.host.fork_child(members[0]));
        s.host.signal_cost = 10ms;
    }
};

TEST_CASE("a service's stop pass cut by its budget goes on until every member had the stop signal",
          "[orchestration][services]") {
    // 10 ms per signal, two per member (the stop signal and SIGCONT): one 250 ms budget reaches
    // a dozen of the 41.
    CrowdedApp app("30s");
    auto& [s, members] = app;
    s.begin_shutdown();
    s.host.advance(0ms);
    CHECK(had(s.host, members, SIGTERM) < 41);
    s.host.advance(2s);  // the service's polls, every 20 ms, well within its grace
    CHECK(had(s.host, members, SIGTERM) == 41);
    check_stopped_once_each(s.host, members);
}

TEST_CASE("a service's stop pass that outlasts its grace is cut there, and the kill is on time",
          "[orchestration][services]") {
    // 10 ms per signal: the pass over 41 members outlasts the 100 ms grace, not its own 250 ms
    // budget. Running on, it held the loop (and the grace's kill) until the budget was spent.
    CrowdedApp crowded("100ms");
    auto& s = crowded.s;
    pid_t app = crowded.members.front();
    MonoTime start = s.host.now();
    s.begin_shutdown();
    s.host.advance(0ms);
    s.host.advance(1s);
    REQUIRE(s.host.when(app, SIGKILL));
    // The budget is looked at every 16 signals: the kill comes within 16 signals of the grace.
    CHECK(*s.host.when(app, SIGKILL) - start <= 100ms + 16 * 10ms);
}

TEST_CASE("a main service's exit asks for the shutdown after the current event, with its code",
          "[orchestration][services]") {
    Services s(R"(
[services.web]
command = ["web"]
main = true
)");
    s.host.exit(s.pid("web"), W_EXITCODE(3, 0));
    CHECK(s.host.shutdown_requested == 3);
    CHECK(s.state("web") == ServiceState::Exited);
}

TEST_CASE("a service whose command cannot start fails its dependents",
          "[orchestration][services]") {
    FakeHost host;
    host.fail_spawns = 1;
    ServiceManager manager(services(R"(
[services.db]
command = ["db"]
[services.web]
command = ["web"]
depends_on = ["db"]
)"),
                           ServiceManagerOptions{});
    host.deliver_to(&manager);
    REQUIRE(manager.attach_host(host));
    CHECK(manager.state_of("db") == ServiceState::Exited);
    CHECK(manager.state_of("web") == ServiceState::Failed);
    CHECK(host.admission().stats().of(EntryPath::ServiceStart).rolled_back == 1);
}

// ---- jobs ----

namespace {

struct Jobs {
    explicit Jobs(const std::string& toml) {
        auto cfg = parse_jobs_toml(toml, "test.toml");
        REQUIRE(cfg);
        auto ledger = Ledger::open({dir.path, ""}, true);
        REQUIRE(ledger);
        scheduler.emplace(std::move(cfg->jobs), std::move(*ledger), LedgerWorker::Mode::OnLoop);
        host.deliver_to(&*scheduler);
        REQUIRE(scheduler->attach_host(host));
        auto r = Ledger::open({dir.path, ""}, false);
        REQUIRE(r);
        reader = std::move(*r);
    }
    RunRecord run(std::int64_t id) {
        auto r = reader->get(id);
        REQUIRE(r);
        REQUIRE(*r);
        return **r;
    }
    // The wall clock reaches the next minute: a `* * * * *` job fires.
    void next_minute() { host.next_minute(); }
    // The next minute comes, and the `* * * * *` job `argv0` starts its one run: its leader.
    pid_t start_run(const std::string& argv0) {
        next_minute();
        auto runs = host.spawned_argv0(argv0);
        REQUIRE(runs.size() == 1);
        return runs[0];
    }
    // What the supervisor does at the first trigger and when the tree's stop signal goes out.
    void stop_tree() {
        host.admission().close();
        scheduler->state_changed(State::Running, State::Draining);
        scheduler->state_changed(State::Draining, State::Stopping);
    }
    // The same, and the leader exits 0 leaving a process behind (a background writer): it.
    pid_t leave_writer(const std::string& argv0) {
        pid_t leader = start_run(argv0);
        pid_t writer = host.fork_child(leader);
        host.exit(leader, W_EXITCODE(0, 0));
        return writer;
    }

    lastcall::test::TempDir dir{"orch"};
    FakeHost host;
    std::optional<JobScheduler> scheduler;
    std::unique_ptr<Ledger> reader;
};

// A job that runs every minute and times out after 30 s.
constexpr const char* kBackupJob = R"(
[jobs.backup]
schedule = "* * * * *"
command = ["backup"]
timeout = "30s"
)";

}  // namespace

TEST_CASE("a job that outlives its timeout gets SIGTERM, then SIGKILL 5 s later, and fails",
          "[orchestration][jobs]") {
    Jobs j(kBackupJob);
    pid_t leader = j.start_run("backup");
    pid_t daemon = j.host.fork_child(leader);  // a setsid grandchild, in the run's scope
    CHECK(j.run(1).state == RunState::Started);
    j.host.advance(29999ms);
    CHECK_FALSE(j.host.got(leader, SIGTERM));
    j.host.advance(1ms);
    CHECK(j.host.got(leader, SIGTERM));
    CHECK(j.host.got(daemon, SIGTERM));
    j.host.advance(4999ms);
    CHECK_FALSE(j.host.got(leader, SIGKILL));
    j.host.advance(1ms);
    CHECK(j.host.got(leader, SIGKILL));
    CHECK(j.host.got(daemon, SIGKILL));
    CHECK(j.host.count(leader, SIGTERM) == 1);
    j.host.reap_killed();
    auto r = j.run(1);
    CHECK(r.state == RunState::Failed);
    CHECK_THAT(r.reason, Catch::StartsWith("timeout: ran past its 30s timeout"));
}

TEST_CASE("a run whose leader exits is judged only once what it left behind has exited",
          "[orchestration][jobs]") {
    // A background writer (bash's process substitution, `cmd &`) still working: the run was
    // recorded completed at the leader's exit, and its artifact changed afterwards.
    Jobs j(kBackupJob);
    pid_t writer = j.leave_writer("backup");
    CHECK(j.run(1).state == RunState::Started);
    j.host.exit(writer, kExit0);
    CHECK(j.run(1).state == RunState::Completed);
}

TEST_CASE("a run still finishing when the shutdown's stop signal comes is interrupted",
          "[orchestration][jobs]") {
    // Its writer dies of the tree's SIGTERM, cut short: the leader's exit 0 must not make the
    // cut artifact `completed`.
    Jobs j(kBackupJob);
    pid_t writer = j.leave_writer("backup");
    j.stop_tree();
    j.host.exit(writer, kTermed);
    auto r = j.run(1);
    CHECK(r.state == RunState::Interrupted);
    CHECK_THAT(r.reason, Catch::Contains("what its leader left behind had not ended"));
}

TEST_CASE("a job's timeout stops what its leader left behind, and the run fails",
          "[orchestration][jobs]") {
    Jobs j(kBackupJob);
    pid_t leader = j.start_run("backup");
    pid_t daemon = j.host.fork_child(leader);  // ignores SIGTERM
    j.host.advance(10s);
    j.host.exit(leader, kExit0);
    j.host.advance(20s);  // the run's 30 s timeout
    CHECK(j.host.count(daemon, SIGTERM) == 1);
    j.host.advance(5s);
    CHECK(j.host.got(daemon, SIGKILL));
    j.host.reap_killed();
    auto r = j.run(1);
    CHECK(r.state == RunState::Failed);
    CHECK(r.reason ==
          "timeout: ran past its 30s timeout (what its leader left behind had not ended; the "
          "leader exited with code 0)");
}

TEST_CASE("a run still finishing counts for its job's overlap policy", "[orchestration][jobs]") {
    Jobs j(kBackupJob);  // overlap = "skip" by default
    pid_t leader = j.start_run("backup");
    pid_t writer = j.host.fork_child(leader);
    j.host.exit(leader, kExit0);
    j.next_minute();
    CHECK(j.host.spawned_argv0("backup").size() == 1);
    j.host.exit(writer, kExit0);
    j.next_minute();
    CHECK(j.host.spawned_argv0("backup").size() == 2);
}

TEST_CASE("a job run's stop pass cut by its budget goes on until every member had SIGTERM",
          "[orchestration][jobs]") {
    Jobs j(kBackupJob);
    std::vector<pid_t> members{j.start_run("backup")};
    for (int i = 0; i < 40; ++i) members.push_back(j.host.fork_child(members[0]));
    j.host.signal_cost = 10ms;  // one 250 ms budget reaches a dozen of the 41
    j.host.advance(30s);
    CHECK(had(j.host, members, SIGTERM) < 41);
    j.host.advance(2s);  // the kill comes 5 s after the timeout
    CHECK(had(j.host, members, SIGTERM) == 41);
    check_stopped_once_each(j.host, members);
}

TEST_CASE("a job due once draining has begun is recorded skipped, not started",
          "[orchestration][jobs]") {
    Jobs j(R"(
[jobs.report]
schedule = "* * * * *"
command = ["report"]
)");
    j.host.admission().close();
    j.scheduler->state_changed(State::Running, State::Draining);
    j.next_minute();
    CHECK(j.host.spawned_argv0("report").empty());
    auto r = j.run(1);
    CHECK(r.state == RunState::Skipped);
    CHECK(r.reason == "shutting down");
}

TEST_CASE(
    "a run still in flight when the grace runs out is interrupted, and a late exit 0 "
    "cannot complete it",
    "[orchestration][jobs]") {
    Jobs j(R"(
[jobs.sync]
schedule = "* * * * *"
command = ["sync"]
)");
    j.host.host_settings.grace = 10s;
    j.next_minute();
    pid_t leader = j.host.spawned_argv0("sync").at(0);
    j.stop_tree();
    j.host.advance(10s);
    j.scheduler->before_force(Event::GraceExpired);
    j.host.exit(leader, kExit0);
    auto r = j.run(1);
    CHECK(r.state == RunState::Interrupted);
    CHECK(r.reason == "grace expired at shutdown");
}

// ---- jobs on a shared ledger ----

namespace {

// A scheduler on a shared ledger with a 3 s lease (2 s to lose it, a kill 500 ms after its stop
// signal), as replica "a".
struct SharedJobs {
    explicit SharedJobs(const std::string& toml) {
        auto cfg = parse_jobs_toml(toml, "test.toml");
        REQUIRE(cfg);
        auto real = Ledger::open({dir.path, ""}, true, {"a", "a/1", 3000, "", ""});
        REQUIRE(real);
        auto cut = std::make_unique<StallableLedger>(std::move(*real), true);
        ledger = cut.get();
        scheduler.emplace(std::move(cfg->jobs), std::move(cut), LedgerWorker::Mode::OnLoop);
        host.deliver_to(&*scheduler);
        REQUIRE(scheduler->attach_host(host));
        auto r = Ledger::open({dir.path, ""}, false, {"b", "b/1", 3000, "", ""});
        REQUIRE(r);
        other = std::move(*r);
    }
    RunRecord run(std::int64_t id) {
        auto r = other->get(id);
        REQUIRE(r);
        REQUIRE(*r);
        return **r;
    }
    void next_minute() { host.next_minute(); }

    lastcall::test::TempDir dir{"orch"};
    FakeHost host;
    StallableLedger* ledger = nullptr;
    std::optional<JobScheduler> scheduler;
    std::unique_ptr<Ledger> other;  // another replica on the same ledger
};

}  // namespace

TEST_CASE("a replica that cannot renew a run's lease for 2/3 of it stops the run, never completed",
          "[orchestration][jobs][cluster]") {
    SharedJobs j(R"(
[jobs.sync]
schedule = "* * * * *"
command = ["sync"]
)");
    j.next_minute();
    pid_t leader = j.host.spawned_argv0("sync").at(0);
    CHECK(j.run(1).state == RunState::Started);
    j.host.advance(1s);  // a renewal: the lease runs from here
    j.ledger->down = true;
    j.host.advance(1999ms);
    CHECK_FALSE(j.host.got(leader, SIGTERM));  // still inside 2/3 of the lease
    j.host.advance(1s);
    CHECK(j.host.got(leader, SIGTERM));
    CHECK(j.host.count(leader, SIGTERM) == 1);
    j.host.advance(500ms);
    CHECK(j.host.got(leader, SIGKILL));          // gone before the lease (3 s) can expire elsewhere
    j.host.exit(leader, kExit0);                 // whatever its exit says, it is no result
    CHECK(j.run(1).state == RunState::Started);  // nothing could be written yet
    j.ledger->down = false;
    j.host.advance(1s);  // the next tick writes what was owed
    auto r = j.run(1);
    CHECK(r.state == RunState::Interrupted);
    CHECK_THAT(r.reason, Catch::StartsWith("lease lost: the ledger was unreachable for"));
    CHECK_FALSE(*j.other->watermark("sync"));
}

TEST_CASE("a run another replica took over is stopped, and its exit 0 records nothing",
          "[orchestration][jobs][cluster]") {
    SharedJobs j(R"(
[jobs.feed]
schedule = "* * * * *"
command = ["feed"]
)");
    j.next_minute();
    pid_t leader = j.host.spawned_argv0("feed").at(0);
    // Replica b claims a later fire time with concurrency = replace: run 1 is interrupted.
    auto now = std::chrono::floor<std::chrono::seconds>(j.host.wall_now()).time_since_epoch();
    auto taken = j.other->claim({"feed", now.count() + 1, {}, Concurrency::Replace, ""});
    REQUIRE(taken);
    REQUIRE(taken->replaced == std::vector<std::int64_t>{1});
    j.host.advance(1s);  // the renewal finds the run no longer this replica's
    CHECK(j.host.got(leader, SIGTERM));
    j.host.exit(leader, kExit0);
    auto r = j.run(1);
    CHECK(r.state == RunState::Interrupted);
    CHECK_THAT(r.reason, Catch::StartsWith("replaced by run 2"));
}

TEST_CASE("a fire time another replica already claimed is neither run nor recorded here",
          "[orchestration][jobs][cluster]") {
    SharedJobs j(R"(
[jobs.report]
schedule = "* * * * *"
command = ["report"]
)");
    auto minute = std::chrono::floor<std::chrono::minutes>(j.host.wall_now()) + 1min;
    auto won = j.other->claim(
        {"report",
         std::chrono::duration_cast<std::chrono::seconds>(minute.time_since_epoch()).count(),
         {},
         Concurrency::Allow,
         ""});
    REQUIRE(won->outcome == Claim::Outcome::Started);
    j.next_minute();
    CHECK(j.host.spawned_argv0("report").empty());
    CHECK(j.other->list({})->size() == 1);
}

TEST_CASE(
    "with the shared ledger unreachable in the drain, the interruption is retried until "
    "the end and then reported not recorded",
    "[orchestration][jobs][cluster]") {
    SharedJobs j(R"(
[jobs.sync]
schedule = "* * * * *"
command = ["sync"]
)");
    j.host.host_settings.grace = 2s;
    j.next_minute();
    pid_t leader = j.host.spawned_argv0("sync").at(0);
    j.ledger->down = true;
    j.host.admission().close();
    j.scheduler->state_changed(State::Running, State::Draining);
    j.scheduler->state_changed(State::Draining, State::Stopping);
    j.host.advance(2s);
    j.scheduler->before_force(Event::GraceExpired);
    j.host.exit(leader, W_EXITCODE(0, SIGKILL));
    j.scheduler->finished(137);
    JsonWriter w;
    w.begin_object();
    j.scheduler->contribute_report(w);
    w.end_object();
    CHECK_THAT(w.str(),
               Catch::Contains(R"("unrecorded":[{"id":1,"job":"sync","state":"interrupted")"));
    CHECK(j.run(1).state == RunState::Started);  // the lease's expiry lets another replica say it
}

TEST_CASE(
    "the report names each started run whose record did not land, and counts per job the "
    "skipped fire times whose rows did not",
    "[orchestration][jobs]") {
    auto cfg = parse_jobs_toml(R"(
[jobs.sync]
schedule = "* * * * *"
command = ["sync"]
)",
                               "test.toml");
    REQUIRE(cfg);
    lastcall::test::TempDir dir{"orch"};
    FakeHost host;
    host.host_settings.grace = 2s;
    auto real = Ledger::open({dir.path, ""}, true);
    REQUIRE(real);
    auto cut = std::make_unique<StallableLedger>(std::move(*real), false);
    StallableLedger* ledger = cut.get();
    JobScheduler scheduler(std::move(cfg->jobs), std::move(cut), LedgerWorker::Mode::OnLoop);
    host.deliver_to(&scheduler);
    REQUIRE(scheduler.attach_host(host));
    auto minute = [&] { return iso_utc(host.next_minute()); };
    minute();
    pid_t leader = host.spawned_argv0("sync").at(0);
    ledger->down = true;
    // Three fire times while the run still runs (overlap = skip): each a skipped row that fails.
    std::string first = minute();
    minute();
    std::string last = minute();
    host.admission().close();
    scheduler.state_changed(State::Running, State::Draining);
    scheduler.state_changed(State::Draining, State::Stopping);
    host.advance(2s);
    scheduler.before_force(Event::GraceExpired);
    host.exit(leader, SIGKILL);
    scheduler.settle_records();
    JsonWriter w;
    w.begin_object();
    scheduler.contribute_report(w);
    w.end_object();
    CHECK_THAT(w.str(),
               Catch::Contains(R"("unrecorded":[{"id":1,"job":"sync","state":"interrupted")"));
    CHECK_THAT(
        w.str(),
        Catch::Contains(
            R"("unrecorded_fire_times":[{"job":"sync","state":"skipped","count":3,"first_fire_time":")" +
            first + R"(","last_fire_time":")" + last + R"(","error":")"));
    scheduler.finished(137);
}

// ---- the loop ----

TEST_CASE("a task posted from an event handler runs after the handler, in the same turn",
          "[orchestration][loop]") {
    auto loop = EventLoop::create();
    REQUIRE(loop);
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
    UniqueFd rd(fds[0]), wr(fds[1]);
    std::vector<std::string> order;
    REQUIRE(loop->watch(rd.get(), EPOLLIN, [&](auto) {
        char c;
        [[maybe_unused]] auto n = ::read(rd.get(), &c, 1);
        loop->post([&] {
            order.push_back("posted");
            loop->post([&] { order.push_back("posted by a posted task"); });
        });
        order.push_back("handler");
    }));
    REQUIRE(::write(wr.get(), "x", 1) == 1);
    REQUIRE(loop->run_once());
    CHECK(order == std::vector<std::string>{"handler", "posted"});
    // A task posted by a posted task waits for the next turn, which does not block on epoll.
    REQUIRE(loop->run_once());
    CHECK(order == std::vector<std::string>{"handler", "posted", "posted by a posted task"});
}
