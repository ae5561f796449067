// SPDX-License-Identifier: Apache-2.0
// One suite, both ledgers: every TEMPLATE_TEST_CASE runs against SQLite in a temporary state dir
// and against a real PostgreSQL (pg_server.hpp). Where the PostgreSQL server binaries are not
// installed the PostgreSQL half is skipped with a message saying so.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "lastcall/jobs/ledger.hpp"
#include "pg_server.hpp"

using namespace lastcall;
using lastcall::testing::PgServer;

namespace {

LedgerIdentity replica(const std::string& name, std::int64_t lease_ms = 0) {
    return {name, name + "/instance", lease_ms, "", ""};
}

struct Sqlite {
    static constexpr const char* kName = "sqlite";
    std::string dir;
    Sqlite() {
        char tmpl[] = "/tmp/lastcall-ledger-XXXXXX";
        dir = ::mkdtemp(tmpl);
    }
    ~Sqlite() { std::filesystem::remove_all(dir); }
    bool available() const { return true; }
    // A writer of this ledger. SQLite's state dir has one owner at a time; the other replicas
    // of a test share the file through readers' connections (exclusive = false), which is all
    // the claim protocol needs.
    std::unique_ptr<Ledger> open(LedgerIdentity id = replica("a"), bool exclusive = true) {
        auto l = Ledger::open({dir, ""}, exclusive, std::move(id));
        if (!l) FAIL(l.error().message);
        return std::move(*l);
    }
    std::unique_ptr<Ledger> another(LedgerIdentity id) { return open(std::move(id), false); }
    // Hand-written SQL against the database, as any other client could send it.
    bool sql(const std::string& statement) {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(Ledger::path_in(dir).c_str(), &db) == SQLITE_OK);
        int rc = sqlite3_exec(db, statement.c_str(), nullptr, nullptr, nullptr);
        sqlite3_close(db);
        return rc == SQLITE_OK;
    }
};

struct Postgres {
    static constexpr const char* kName = "postgresql";
    std::string url, db;
    Postgres() {
        if (PgServer* s = PgServer::get()) {
            url = s->new_database();
            db = url.substr(14, url.find('?') - 14);  // postgresql:///DB?host=...
        }
    }
    bool available() const {
        if (!url.empty()) return true;
        WARN("PostgreSQL half skipped: " << (PgServer::why().empty() ? "createdb failed"
                                                                     : PgServer::why()));
        return false;
    }
    std::unique_ptr<Ledger> open(LedgerIdentity id = replica("a"), bool exclusive = true) {
        auto l = Ledger::open({"", url}, exclusive, std::move(id));
        if (!l) FAIL(l.error().message);
        return std::move(*l);
    }
    std::unique_ptr<Ledger> another(LedgerIdentity id) { return open(std::move(id), true); }
    bool sql(const std::string& statement) { return PgServer::get()->psql(db, statement) == 0; }
};

ClaimRequest fire(const std::string& job, std::int64_t at, Concurrency c = Concurrency::Allow) {
    ClaimRequest r;
    r.job = job;
    r.scheduled_at = at;
    r.concurrency = c;
    return r;
}

}  // namespace

TEST_CASE("the run model allows only forward moves and terminal states are final", "[ledger]") {
    CHECK(run_transition(RunState::Scheduled, RunState::Started));
    CHECK(run_transition(RunState::Started, RunState::Completed));
    CHECK(run_transition(RunState::Started, RunState::Interrupted));
    CHECK_FALSE(run_transition(RunState::Scheduled, RunState::Completed));
    CHECK_FALSE(run_transition(RunState::Started, RunState::Scheduled));
    for (RunState from : kAllRunStates) {
        if (!is_terminal(from)) continue;
        for (RunState to : kAllRunStates) CHECK_FALSE(run_transition(from, to));
    }
    for (RunState s : kAllRunStates) CHECK(parse_run_state(to_string(s)) == s);
}

TEMPLATE_TEST_CASE("a run moves scheduled -> started -> completed and the watermark follows it",
                   "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto l = db.open();
    auto id = l->add("backup", 1000, RunState::Scheduled, "");
    REQUIRE(id);
    CHECK(*l->watermark("backup") == std::nullopt);
    REQUIRE(*l->start(*id));
    REQUIRE(l->set_pid(*id, 4242));
    CHECK(*l->watermark("backup") == std::nullopt);  // never at start
    REQUIRE(*l->complete(*id, {0, {}}));
    auto rec = *l->get(*id);
    REQUIRE(rec);
    CHECK(rec->state == RunState::Completed);
    CHECK(rec->pid == 4242);
    CHECK(rec->exit_code == 0);
    CHECK(rec->started_ms);
    CHECK(rec->ended_ms);
    CHECK(rec->replica == "a");
    CHECK(*l->watermark("backup") == 1000);
}

TEMPLATE_TEST_CASE("a run that failed to spawn records no pid, not pid 0", "[ledger]", Sqlite,
                   Postgres) {
    // `started` is written before the spawn; a spawn that fails leaves the run without a
    // process. Its row said pid 0, which `lastcall jobs` printed as if it were one.
    TestType db;
    if (!db.available()) return;
    auto l = db.open();
    auto id = l->add("backup", 1000, RunState::Scheduled, "");
    REQUIRE(id);
    REQUIRE(*l->start(*id));
    REQUIRE(*l->finish(*id, RunState::Failed, {}, "spawn: no such file"));
    auto rec = *l->get(*id);
    REQUIRE(rec);
    CHECK(rec->state == RunState::Failed);
    CHECK(rec->pid == std::nullopt);
    // The same for a claimed fire time (a shared ledger's start).
    ClaimRequest req;
    req.job = "report";
    req.scheduled_at = 2000;
    auto claim = l->claim(req);
    REQUIRE(claim);
    REQUIRE(claim->outcome == Claim::Outcome::Started);
    auto claimed = *l->get(claim->id);
    REQUIRE(claimed);
    CHECK(claimed->pid == std::nullopt);
    REQUIRE(l->set_pid(claim->id, 4242));
    CHECK((*l->get(claim->id))->pid == 4242);
}

TEMPLATE_TEST_CASE("an interrupted run stays interrupted when a late exit 0 tries to complete it",
                   "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto l = db.open();
    auto id = *l->add("report", 2000, RunState::Scheduled, "");
    REQUIRE(*l->start(id));
    REQUIRE(*l->finish(id, RunState::Interrupted, {}, "grace expired at shutdown"));
    auto late = l->complete(id, {0, {}});
    REQUIRE(late);
    CHECK_FALSE(*late);  // refused
    CHECK_FALSE(*l->finish(id, RunState::Failed, {{}, 9}, "killed"));
    auto rec = *l->get(id);
    CHECK(rec->state == RunState::Interrupted);
    CHECK(rec->reason == "grace expired at shutdown");
    CHECK(*l->watermark("report") == std::nullopt);
}

TEMPLATE_TEST_CASE("the database refuses to rewrite a terminal state even with hand-written SQL",
                   "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    std::int64_t id = 0;
    {
        auto l = db.open();
        id = *l->add("j", 1, RunState::Scheduled, "");
        REQUIRE(*l->start(id));
        REQUIRE(*l->finish(id, RunState::Failed, {3, {}}, "exited with code 3"));
    }
    bool pg = std::string(TestType::kName) == "postgresql";
    std::string runs = pg ? "lastcall.runs" : "runs";
    CHECK_FALSE(db.sql("UPDATE " + runs + " SET state = 'completed'"));
    auto l = db.open();
    CHECK((*l->get(id))->state == RunState::Failed);
}

TEMPLATE_TEST_CASE("the database refuses a run state that moves backwards", "[ledger]", Sqlite,
                   Postgres) {
    TestType db;
    if (!db.available()) return;
    auto l = db.open();
    auto claimed = *l->claim(fire("j", 10));
    REQUIRE(claimed.outcome == Claim::Outcome::Started);
    bool pg = std::string(TestType::kName) == "postgresql";
    std::string runs = pg ? "lastcall.runs" : "runs";
    CHECK_FALSE(db.sql("UPDATE " + runs +
                       " SET state = 'scheduled' WHERE id = " + std::to_string(claimed.id)));
    CHECK((*l->get(claimed.id))->state == RunState::Started);
}

TEMPLATE_TEST_CASE("the watermark never moves backwards", "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto l = db.open();
    auto later = *l->add("j", 500, RunState::Scheduled, "");
    auto earlier = *l->add("j", 400, RunState::Scheduled, "");
    REQUIRE(*l->start(later));
    REQUIRE(*l->start(earlier));
    REQUIRE(*l->complete(later, {0, {}}));
    REQUIRE(*l->complete(earlier, {0, {}}));
    CHECK(*l->watermark("j") == 500);
    bool pg = std::string(TestType::kName) == "postgresql";
    CHECK_FALSE(db.sql(std::string("UPDATE ") +
                       (pg ? "lastcall.cluster_watermarks" : "watermarks") +
                       " SET scheduled_at = 1"));
    CHECK(*l->watermark("j") == 500);
}

TEMPLATE_TEST_CASE("runs a previous owner left unfinished become interrupted at the next open",
                   "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    std::int64_t c = 0;
    {
        auto l = db.open();
        (void)*l->add("j", 1, RunState::Scheduled, "");
        auto b = *l->add("j", 2, RunState::Scheduled, "");
        REQUIRE(*l->start(b));
        c = *l->add("j", 3, RunState::Scheduled, "");
        REQUIRE(*l->start(c));
        REQUIRE(*l->complete(c, {0, {}}));
    }
    auto l = db.open();
    auto fixed = l->interrupt_unfinished("lastcall stopped before the run ended");
    REQUIRE(fixed);
    CHECK(fixed->size() == 2);
    auto pending = *l->awaiting_recovery();
    REQUIRE(pending.size() == 2);
    REQUIRE(l->set_recovery(pending[0].id, kRecoveryHeld));
    CHECK((*l->held_run("j"))->id == pending[0].id);
    CHECK(*l->release(pending[0].id));
    CHECK_FALSE(*l->held_run("j"));
    CHECK_FALSE(*l->release(c));  // completed runs have nothing to release
}

TEMPLATE_TEST_CASE("one fire time is claimed by exactly one replica", "[ledger][claim]", Sqlite,
                   Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    auto first = a->claim(fire("report", 600));
    auto second = b->claim(fire("report", 600));
    REQUIRE(first);
    REQUIRE(second);
    CHECK(first->outcome == Claim::Outcome::Started);
    CHECK(second->outcome == Claim::Outcome::Lost);  // records nothing, runs nothing
    auto runs = *a->list({});
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].state == RunState::Started);
    CHECK(runs[0].replica == "a");
    CHECK(runs[0].lease_until_ms);
    // The next fire time is free for anyone.
    CHECK(b->claim(fire("report", 660))->outcome == Claim::Outcome::Started);
}

TEMPLATE_TEST_CASE("concurrency forbid records a fire time skipped while any replica runs the job",
                   "[ledger][claim]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    auto running = *a->claim(fire("sync", 60, Concurrency::Forbid));
    REQUIRE(running.outcome == Claim::Outcome::Started);
    auto next = *b->claim(fire("sync", 120, Concurrency::Forbid));
    CHECK(next.outcome == Claim::Outcome::Skipped);
    CHECK_THAT(next.reason, Catch::Contains("concurrency = forbid"));
    // The other replica's claim of the same time loses to the skipped row: one row per time.
    CHECK(a->claim(fire("sync", 120, Concurrency::Forbid))->outcome == Claim::Outcome::Lost);
    CHECK((*a->get(next.id))->state == RunState::Skipped);
    REQUIRE(*a->complete(running.id, {0, {}}));
    CHECK(b->claim(fire("sync", 180, Concurrency::Forbid))->outcome == Claim::Outcome::Started);
}

TEMPLATE_TEST_CASE("concurrency replace interrupts the active run of another replica",
                   "[ledger][claim]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    auto old = *a->claim(fire("feed", 60, Concurrency::Replace));
    auto now = *b->claim(fire("feed", 120, Concurrency::Replace));
    REQUIRE(now.outcome == Claim::Outcome::Started);
    REQUIRE(now.replaced == std::vector<std::int64_t>{old.id});
    auto rec = *a->get(old.id);
    CHECK(rec->state == RunState::Interrupted);
    CHECK_THAT(rec->reason, Catch::Contains("replaced by run " + std::to_string(now.id)));
    CHECK(rec->recovery == kRecoveryNone);  // its successor runs: it is never retried
    CHECK(b->awaiting_recovery()->empty());
    // Replica a learns it at its next renewal: the run is no longer its own.
    CHECK(a->renew({old.id})->empty());
    CHECK_FALSE(*a->complete(old.id, {0, {}}));
}

TEST_CASE(
    "a lease that lapsed while no replica reached the ledger gets a fresh period instead of "
    "expiring",
    "[ledger][lease]") {
    Postgres db;
    if (!db.available()) return;
    // Every replica was cut off (the database down): replica a's lease lapsed meanwhile, and the
    // first replica back must not call a run interrupted whose owner could not say it ended.
    // (Leases of 1 and 2 ms: every lease the same length in a real cluster, short here.)
    auto a = db.open(replica("a", 1));
    auto b = db.another(replica("b", 2));
    REQUIRE(b->heartbeat());  // the last anyone reached it, before the outage
    auto run = *a->claim(fire("backup", 3600));
    REQUIRE(run.outcome == Claim::Outcome::Started);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 1 ms lease
    CHECK(b->expire_leases()->empty());
    // The owner writes what it owes on its first tick back: its record stands.
    CHECK(*a->complete(run.id, {0, {}}));
    CHECK((*b->get(run.id))->state == RunState::Completed);
}

TEMPLATE_TEST_CASE("an expired lease makes the run interrupted, and it is retried exactly once",
                   "[ledger][lease]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    // Replica a claims with a 1 ms lease and never renews it: a replica that died.
    auto dead = db.open(replica("a", 1));
    auto b = db.another(replica("b", 30'000));
    auto c = db.another(replica("c", 30'000));
    auto run = *dead->claim(fire("backup", 3600));
    REQUIRE(run.outcome == Claim::Outcome::Started);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the 1 ms lease
    // The live replicas reached the ledger after the lease lapsed (their ticks' heartbeats):
    // the ledger was there, its replica was not.
    REQUIRE(b->heartbeat());
    auto expired = *b->expire_leases();
    REQUIRE(expired.size() == 1);
    CHECK(expired[0].id == run.id);
    CHECK(expired[0].reason == "lease expired: replica a stopped renewing it");
    CHECK(c->expire_leases()->empty());  // recorded once
    // The dead replica's late success is refused, and its renewal tells it the run is gone.
    CHECK_FALSE(*dead->complete(run.id, {0, {}}));
    CHECK(dead->renew({run.id})->empty());
    // Both live replicas try to retry it: one wins.
    ClaimRequest retry = fire("backup", 3600);
    retry.retry_of = {run.id};
    auto by_b = *b->claim(retry);
    auto by_c = *c->claim(retry);
    CHECK(by_b.outcome == Claim::Outcome::Started);
    CHECK(by_c.outcome == Claim::Outcome::Lost);
    CHECK((*b->get(by_b.id))->retry_of == run.id);
    CHECK((*b->get(run.id))->recovery == kRecoveryRetried);
    CHECK(b->awaiting_recovery()->empty());
}

TEMPLATE_TEST_CASE("a renewed lease keeps the run its replica's", "[ledger][lease]", Sqlite,
                   Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    auto run = *a->claim(fire("j", 60));
    CHECK(*a->renew({run.id}) == std::vector<std::int64_t>{run.id});
    CHECK(b->renew({run.id})->empty());  // not b's lease
    CHECK(b->expire_leases()->empty());
    REQUIRE(a->set_pid(run.id, 99));
    REQUIRE(*a->complete(run.id, {0, {}}));
    CHECK(a->renew({run.id})->empty());  // a completed run holds no lease
}

TEMPLATE_TEST_CASE("a held job's fire time is recorded skipped once, whoever claims it",
                   "[ledger][claim]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    ClaimRequest held = fire("j", 60);
    held.skip_reason = "held: run 1 was interrupted";
    auto first = *a->claim(held);
    auto second = *b->claim(held);
    CHECK(first.outcome == Claim::Outcome::Skipped);
    CHECK(second.outcome == Claim::Outcome::Lost);
    CHECK(a->list({})->size() == 1);
}

TEST_CASE("a second owner of the same state dir is refused", "[ledger]") {
    Sqlite db;
    auto first = db.open();
    auto second = Ledger::open({db.dir, ""}, true);
    REQUIRE_FALSE(second);
    CHECK_THAT(second.error().message, Catch::Contains("in use by another lastcall"));
    auto reader = Ledger::open({db.dir, ""}, false);  // the runs command needs no lock
    CHECK(reader);
}

TEST_CASE("a postgresql ledger's messages never show the URL's password", "[ledger]") {
    // Nothing listens on this socket directory: the connection fails, and says where.
    auto l =
        Ledger::open({"", "postgresql://app:s3cret@/jobs?host=/nonexistent-lastcall-dir"}, true);
    REQUIRE_FALSE(l);
    CHECK_THAT(l.error().message, Catch::Contains("postgresql://app@/nonexistent-lastcall-dir"));
    CHECK(l.error().message.find("s3cret") == std::string::npos);
}

TEST_CASE("a ledger URL that is not postgresql:// is refused with the reason", "[ledger]") {
    auto l = Ledger::open({"", "mysql://db/jobs"}, true);
    REQUIRE_FALSE(l);
    CHECK_THAT(l.error().message, Catch::Contains("not a postgresql:// URL"));
}

TEMPLATE_TEST_CASE("the metrics count a shared ledger's runs per replica, a local one's all",
                   "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto b = db.another(replica("b", 30'000));
    REQUIRE(*a->complete(a->claim(fire("j", 60))->id, {0, {}}));
    REQUIRE(*b->complete(b->claim(fire("j", 120))->id, {0, {}}));
    auto counts = *a->count_runs();
    REQUIRE(counts.size() == 1);
    CHECK(counts[0].state == "completed");
    CHECK(counts[0].runs == (a->shared() ? 1 : 2));
}

TEST_CASE("a final run is final in every column, and only prune removes it", "[ledger][pg]") {
    Postgres db;
    if (!db.available()) return;
    auto a = db.open();
    auto run = *a->claim(fire("backup", 3600));
    REQUIRE(*a->complete(run.id, {0, {}}));
    const std::string id = std::to_string(run.id);
    CHECK_FALSE(db.sql("UPDATE lastcall.runs SET reason = 'rewritten' WHERE id = " + id));
    CHECK_FALSE(db.sql("UPDATE lastcall.runs SET exit_code = 1 WHERE id = " + id));
    CHECK_FALSE(db.sql("UPDATE lastcall.runs SET replica = 'other' WHERE id = " + id));
    CHECK_FALSE(db.sql("DELETE FROM lastcall.runs WHERE id = " + id));
    CHECK((*a->get(run.id))->reason.empty());
    // A run still open is not pruned; a final one that ended before the cutoff is.
    auto open_run = *a->claim(fire("backup", 7200));
    REQUIRE(open_run.outcome == Claim::Outcome::Started);
    CHECK(*a->prune(unix_ms_now() + 1000, 1000) == 1);
    CHECK_FALSE(*a->get(run.id));
    CHECK(*a->get(open_run.id));
}

TEMPLATE_TEST_CASE("prune removes final runs older than the cutoff, a batch at a time", "[ledger]",
                   Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open();
    for (int i = 1; i <= 5; ++i) {
        auto run = *a->claim(fire("backup", 60 * i));
        REQUIRE(*a->finish(run.id, RunState::Failed, {1, {}}, "exit 1"));
    }
    auto future = unix_ms_now() + 1000;
    CHECK(*a->prune(future, 2) == 2);
    CHECK(*a->prune(future, 2) == 2);
    CHECK(*a->prune(future, 2) == 1);
    CHECK(a->list({})->empty());
    CHECK(*a->prune(unix_ms_now() - 60'000, 2) == 0);
}

TEMPLATE_TEST_CASE("a run is current while it is started and its owner's", "[ledger]", Sqlite,
                   Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open(replica("a", 30'000));
    auto run = *a->claim(fire("backup", 3600));
    const std::string owner = a->identity().owner;
    CHECK(*a->is_current(run.id, owner));
    CHECK_FALSE(*a->is_current(run.id, "someone else"));
    REQUIRE(*a->finish(run.id, RunState::Interrupted, {}, "lease lost"));
    CHECK_FALSE(*a->is_current(run.id, owner));
}

TEST_CASE("a ledger whose schema is newer than this lastcall's is refused at open",
          "[ledger][pg]") {
    Postgres db;
    if (!db.available()) return;
    { auto a = db.open(); }
    REQUIRE(db.sql("INSERT INTO lastcall.schema_version VALUES (999, 0)"));
    auto again = Ledger::open({"", db.url}, true, replica("b"));
    REQUIRE_FALSE(again);
    CHECK_THAT(again.error().message, Catch::Contains("schema version 999 is newer"));
}

TEST_CASE("a list keeps the newest runs up to its limit, and those created since a time",
          "[ledger]") {
    Sqlite db;
    auto a = db.open();
    for (int i = 1; i <= 4; ++i) (void)*a->claim(fire("backup", 60 * i));
    RunFilter newest;
    newest.limit = 2;
    auto two = *a->list(newest);
    REQUIRE(two.size() == 2);
    CHECK(two[0].id == 3);
    CHECK(two[1].id == 4);
    RunFilter since;
    since.since_ms = unix_ms_now() + 60'000;
    CHECK(a->list(since)->empty());
}

TEMPLATE_TEST_CASE("a batch of endings records each as its own call would, in one step", "[ledger]",
                   Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open();
    auto r1 = *a->claim(fire("backup", 60));
    auto r2 = *a->claim(fire("backup", 120));
    auto r3 = *a->claim(fire("report", 60));
    REQUIRE(*a->finish(r3.id, RunState::Interrupted, {}, "lease lost"));
    auto done = a->finish_all({{r1.id, RunState::Completed, {0, {}}, "", 4242},
                               {r2.id, RunState::Completed, {0, {}}, "", std::nullopt},
                               {r3.id, RunState::Completed, {0, {}}, "", std::nullopt},
                               {r1.id, RunState::Failed, {1, {}}, "again", std::nullopt}});
    REQUIRE(done);
    CHECK(*done == std::vector<bool>{true, true, false, false});
    CHECK((*a->get(r1.id))->state == RunState::Completed);
    CHECK((*a->get(r1.id))->pid == 4242);  // a run that ended first records its pid with it
    CHECK((*a->get(r3.id))->state == RunState::Interrupted);  // final: refused
    CHECK(**a->watermark("backup") == 120);                   // the latest completed fire time
    CHECK_FALSE(*a->watermark("report"));
}

TEMPLATE_TEST_CASE("the pids of a burst are recorded in one step", "[ledger]", Sqlite, Postgres) {
    TestType db;
    if (!db.available()) return;
    auto a = db.open();
    auto r1 = *a->claim(fire("backup", 60));
    auto r2 = *a->claim(fire("report", 60));
    REQUIRE(a->set_pids({{r1.id, 101}, {r2.id, 102}}));
    CHECK((*a->get(r1.id))->pid == 101);
    CHECK((*a->get(r2.id))->pid == 102);
}
