// SPDX-License-Identifier: Apache-2.0
// The supervisor's whole shutdown on a fake host: the Teardown lastcall runs (its state machine,
// the main unit, the root's pass, the one kill at the grace, the record), with a ServiceManager
// and a JobScheduler attached as the supervisor attaches them. Time moves only when the test
// advances the fake clock, a process exits only when the test says so, and nothing is forked,
// signalled for real, or slept on.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "fake_host.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/jobs/scheduler.hpp"
#include "lastcall/services/service_manager.hpp"
#include "lastcall/services/services.hpp"
#include "lastcall/supervisor/teardown.hpp"
#include "temp_dir.hpp"

using namespace lastcall;
using namespace std::chrono_literals;
using lastcall::test::FakeHost;

namespace {

const int kExit0 = W_EXITCODE(0, 0);
const int kTermed = SIGTERM;  // a wait status: killed by SIGTERM

// db, and web that depends on it; a job "backup" every minute; a main command "app".
constexpr const char* kServices = R"(
[services.db]
command = ["db"]

[services.web]
command = ["web"]
depends_on = ["db"]
)";

constexpr const char* kJobs = R"(
[jobs.backup]
schedule = "* * * * *"
command = ["backup"]
)";

// What the supervisor sets up for `lastcall --config ... -- app`: the teardown over the host,
// the services and the scheduler attached, the root unit made, the main command spawned, and
// one run of the job started.
struct Run {
    explicit Run(std::chrono::milliseconds grace = 10s, std::chrono::milliseconds drain_delay = 0ms,
                 Scope kill_scope = Scope::Tree) {
        ShutdownConfig config;
        config.grace = grace;
        config.drain_delay = drain_delay;
        host.host_settings.grace = grace;
        host.host_settings.drain_delay = drain_delay;
        host.kill_scope = kill_scope;
        teardown.emplace(config, host.clock(), host, components);
        host.attach(*teardown);

        auto specs = parse_services_toml(kServices, "test.toml");
        REQUIRE(specs);
        REQUIRE(order_by_dependencies(*specs));
        services.emplace(std::move(*specs), ServiceManagerOptions{});
        auto jobs = parse_jobs_toml(kJobs, "test.toml");
        REQUIRE(jobs);
        auto ledger = Ledger::open({dir.path, ""}, true);
        REQUIRE(ledger);
        scheduler.emplace(std::move(jobs->jobs), std::move(*ledger), LedgerWorker::Mode::OnLoop);
        components = {&*services, &*scheduler};
        REQUIRE(services->attach_host(host));
        REQUIRE(scheduler->attach_host(host));
        host.run_posted();
        teardown->make_root_unit();
        main = host.start_main("app");

        host.set_wall(std::chrono::floor<std::chrono::minutes>(host.wall_now()) + 1min);
        auto runs = host.spawned_argv0("backup");
        REQUIRE(runs.size() == 1);
        backup = runs[0];
        db = *host.live("db");
        web = *host.live("web");
    }
    ~Run() { host.detach(); }

    Shutdown& shutdown() { return teardown->shutdown(); }
    RunRecord backup_run() {
        auto reader = Ledger::open({dir.path, ""}, false);
        REQUIRE(reader);
        auto r = (*reader)->get(1);
        REQUIRE(r);
        REQUIRE(*r);
        return **r;
    }
    // Every process that got `sig` ends of it, as a process with the default handler would.
    void obey(int sig) {
        for (pid_t pid : {main, db, web, backup})
            if (host.proc(pid).alive && host.got(pid, sig)) host.exit(pid, sig);
    }
    // The process's last record in the teardown's book (the report's rows).
    const ProcessRecord* record(pid_t pid) const {
        const ProcessRecord* found = nullptr;
        for (const auto& r : teardown->book().records())
            if (r.pid == pid) found = &r;
        return found;
    }
    // The end of a forced shutdown: the backup run was recorded interrupted before the kill
    // (nothing after it passes for a success), the killed die, the tree is empty, and the
    // verdict says forced.
    void check_forced_end() {
        CHECK(backup_run().state == RunState::Interrupted);
        host.reap_killed();
        CHECK(shutdown().state() == State::Stopped);
        CHECK(shutdown().forced());
        CHECK(verdict_from(teardown->force_facts()) == Verdict::Forced);
    }
    bool forced_by(ForceKind kind) const {
        for (const auto& f : teardown->force_facts())
            if (f.kind == kind) return true;
        return false;
    }

    lastcall::test::TempDir dir{"teardown"};
    FakeHost host;
    std::vector<SupervisorComponent*> components;
    std::optional<Teardown> teardown;
    std::optional<ServiceManager> services;
    std::optional<JobScheduler> scheduler;
    pid_t main = 0, db = 0, web = 0, backup = 0;
};

}  // namespace

TEST_CASE(
    "a SIGTERM stops the services in reverse dependency order, then the main command and the "
    "job runs, and ends clean",
    "[teardown]") {
    Run run;
    CHECK(run.host.deliver(SIGTERM) == SignalOutcome::Started);
    run.host.advance(0ms);  // the services' stop, on the loop's next turn
    // Intake closed, readiness off: no new work, and the ordered stop holds the tree's signal.
    CHECK_FALSE(run.host.admission().is_open());
    CHECK(run.host.readiness_offs == 1);
    CHECK(run.shutdown().state() == State::Draining);
    CHECK(run.host.got(run.web, SIGTERM));
    CHECK_FALSE(run.host.got(run.db, SIGTERM));
    CHECK_FALSE(run.host.got(run.main, SIGTERM));
    CHECK_FALSE(run.host.got(run.backup, SIGTERM));

    run.host.advance(300ms);
    run.host.exit(run.web, kTermed);
    run.host.advance(1ms);  // the services' stop poll
    CHECK(run.host.got(run.db, SIGTERM));
    CHECK_FALSE(run.host.got(run.main, SIGTERM));
    run.host.exit(run.db, kTermed);
    run.host.advance(1s);  // the ordered stop is done: the drain is released

    CHECK(run.shutdown().state() == State::Stopping);
    CHECK(run.host.count(run.main, SIGTERM) == 1);
    CHECK(run.host.count(run.backup, SIGTERM) == 1);
    run.obey(SIGTERM);

    CHECK(run.shutdown().state() == State::Stopped);
    CHECK_FALSE(run.shutdown().forced());
    CHECK(verdict_from(run.teardown->force_facts()) == Verdict::Clean);
    for (pid_t pid : {run.main, run.db, run.web, run.backup})
        CHECK_FALSE(run.host.got(pid, SIGKILL));
    CHECK(run.backup_run().state == RunState::Interrupted);
}

TEST_CASE(
    "a service that ignores its stop signal holds the rest back only until half the grace, "
    "and the grace ends in one kill, reported forced",
    "[teardown]") {
    Run run(10s);
    run.host.deliver(SIGTERM);
    run.host.advance(0ms);
    CHECK(run.host.got(run.web, SIGTERM));  // web ignores it

    run.host.advance(4999ms);
    CHECK(run.shutdown().state() == State::Draining);
    CHECK_FALSE(run.host.got(run.main, SIGTERM));
    run.host.advance(1ms);  // half of the grace: every other unit gets its stop signal now
    CHECK(run.shutdown().state() == State::Stopping);
    CHECK(run.host.count(run.db, SIGTERM) == 1);
    CHECK(run.host.count(run.main, SIGTERM) == 1);
    CHECK(run.host.count(run.backup, SIGTERM) == 1);
    CHECK(run.host.count(run.web, SIGTERM) == 1);  // each process has it once
    run.host.exit(run.main, kTermed);
    run.host.exit(run.db, kTermed);
    // The backup run ignores it too.

    run.host.advance(4999ms);
    CHECK_FALSE(run.host.got(run.web, SIGKILL));
    CHECK_FALSE(run.host.got(run.backup, SIGKILL));
    run.host.advance(1ms);  // the grace is over
    CHECK(run.shutdown().state() == State::Forcing);
    CHECK(run.host.got(run.web, SIGKILL));
    CHECK(run.host.got(run.backup, SIGKILL));
    run.check_forced_end();
    CHECK(run.forced_by(ForceKind::EnteredForcing));
}

TEST_CASE("a second SIGTERM kills the main command, the services and the job runs at once",
          "[teardown]") {
    Run run;
    run.host.deliver(SIGTERM);
    run.host.advance(200ms);  // past the 100 ms that coalesce a burst of signals
    CHECK(run.host.deliver(SIGTERM) == SignalOutcome::Escalated);
    CHECK(run.shutdown().state() == State::Forcing);
    for (pid_t pid : {run.main, run.db, run.web, run.backup}) CHECK(run.host.got(pid, SIGKILL));
    // The services and the main command never had their stop signal but web: killed, not exited.
    CHECK_FALSE(run.host.got(run.db, SIGTERM));
    CHECK_FALSE(run.host.got(run.main, SIGTERM));
    run.check_forced_end();
}

TEST_CASE(
    "what the main command left behind gets the stop signal once from the root's pass, and "
    "the kill at the grace",
    "[teardown]") {
    Run run(4s);
    pid_t daemon = run.host.fork_child(run.main);  // a setsid daemon, in no unit's scope
    run.host.new_group(daemon);
    run.host.exit(run.main, kExit0);  // the command ends by itself: the teardown begins
    CHECK(run.shutdown().state() == State::Draining);
    run.host.advance(0ms);
    run.host.exit(run.web, kTermed);
    run.host.advance(1ms);
    REQUIRE(run.host.got(run.db, SIGTERM));
    run.host.exit(run.db, kTermed);
    run.host.advance(1s);
    CHECK(run.shutdown().state() == State::Stopping);
    CHECK(run.host.count(daemon, SIGTERM) == 1);
    CHECK(run.host.count(run.backup, SIGTERM) == 1);
    run.host.exit(run.backup, kTermed);
    run.host.advance(3s);  // the grace ends with the daemon still there
    CHECK(run.host.count(daemon, SIGTERM) == 1);
    CHECK(run.host.got(daemon, SIGKILL));
    run.host.reap_killed();
    CHECK(run.shutdown().state() == State::Stopped);
    const ProcessRecord* rec = run.record(daemon);
    REQUIRE(rec);
    CHECK(rec->stop_signal == SIGTERM);
    CHECK(rec->killed);
}

TEST_CASE(
    "a process that outlives SIGKILL is named in the record, and the teardown gives up on it at "
    "the force limit",
    "[teardown]") {
    Run run(2s);
    run.host.deliver(SIGTERM);
    run.host.advance(200ms);
    run.host.deliver(SIGTERM);  // escalated: SIGKILL to everything
    // Every process dies of it but web, stuck in uninterruptible sleep.
    for (pid_t pid : {run.main, run.db, run.backup}) run.host.exit(pid, SIGKILL);
    CHECK(run.shutdown().state() == State::Forcing);
    run.host.advance(ShutdownConfig{}.force_limit);
    CHECK(run.shutdown().state() == State::Stopped);
    CHECK(run.teardown->gave_up());
    CHECK(run.forced_by(ForceKind::Abandoned));
    const ProcessRecord* web = run.record(run.web);
    REQUIRE(web);
    REQUIRE(web->survived);
    CHECK(web->survived->wchan == "fake_wchan");
}

TEST_CASE("a drain delay holds every stop signal back, with intake closed from the first moment",
          "[teardown]") {
    Run run(10s, 2s);
    run.host.deliver(SIGTERM);
    CHECK_FALSE(run.host.admission().is_open());
    CHECK(run.host.readiness_offs == 1);
    run.host.advance(1999ms);
    for (pid_t pid : {run.main, run.db, run.web, run.backup})
        CHECK(run.host.proc(pid).signals.empty());
    run.host.advance(1ms);  // the delay is over: the ordered stop begins
    CHECK(run.host.got(run.web, SIGTERM));
    CHECK_FALSE(run.host.got(run.main, SIGTERM));
}

TEST_CASE(
    "with kill scope child the main command alone gets the stop signal, and what it forked is "
    "killed at the grace",
    "[teardown]") {
    Run run(4s, 0ms, Scope::Child);
    pid_t worker = run.host.fork_child(run.main);  // in the main command's group
    run.host.deliver(SIGTERM);
    run.host.advance(0ms);
    run.host.exit(run.web, kTermed);
    run.host.advance(1ms);
    run.host.exit(run.db, kTermed);
    run.host.advance(1s);
    CHECK(run.shutdown().state() == State::Stopping);
    CHECK(run.host.count(run.main, SIGTERM) == 1);
    CHECK_FALSE(run.host.got(worker, SIGTERM));
    CHECK_FALSE(run.host.got(run.backup, SIGTERM));
    run.host.exit(run.main, kTermed);
    run.host.advance(3s);  // the grace: whatever the kill scope, nothing is left behind
    CHECK(run.host.got(worker, SIGKILL));
    CHECK(run.host.got(run.backup, SIGKILL));
    run.check_forced_end();
}
