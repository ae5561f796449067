// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

#include "lastcall/jobs/ledger.hpp"

using namespace lastcall;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/lastcall-ledger-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

Ledger open_ledger(const std::string& dir) {
    auto l = Ledger::open(dir, true);
    if (!l) FAIL(l.error().message);
    return std::move(*l);
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

TEST_CASE("a run moves scheduled -> started -> completed and the watermark follows it",
          "[ledger]") {
    TempDir dir;
    Ledger l = open_ledger(dir.path);
    auto id = l.add("backup", 1000, RunState::Scheduled, "");
    REQUIRE(id);
    CHECK(*l.watermark("backup") == std::nullopt);
    REQUIRE(*l.start(*id, 4242));
    CHECK(*l.watermark("backup") == std::nullopt);  // never at start
    REQUIRE(*l.complete(*id, {0, {}}));
    auto rec = *l.get(*id);
    REQUIRE(rec);
    CHECK(rec->state == RunState::Completed);
    CHECK(rec->pid == 4242);
    CHECK(rec->exit_code == 0);
    CHECK(rec->started_ms);
    CHECK(rec->ended_ms);
    CHECK(*l.watermark("backup") == 1000);
}

TEST_CASE("an interrupted run stays interrupted when a late exit 0 tries to complete it",
          "[ledger]") {
    TempDir dir;
    Ledger l = open_ledger(dir.path);
    auto id = *l.add("report", 2000, RunState::Scheduled, "");
    REQUIRE(*l.start(id, 100));
    REQUIRE(*l.finish(id, RunState::Interrupted, {}, "grace expired at shutdown"));
    auto late = l.complete(id, {0, {}});
    REQUIRE(late);
    CHECK_FALSE(*late);  // refused
    CHECK_FALSE(*l.finish(id, RunState::Failed, {{}, 9}, "killed"));
    auto rec = *l.get(id);
    CHECK(rec->state == RunState::Interrupted);
    CHECK(rec->reason == "grace expired at shutdown");
    CHECK(*l.watermark("report") == std::nullopt);
}

TEST_CASE("the database refuses to rewrite a terminal state even with hand-written SQL",
          "[ledger]") {
    TempDir dir;
    {
        Ledger l = open_ledger(dir.path);
        auto id = *l.add("j", 1, RunState::Scheduled, "");
        REQUIRE(*l.start(id, 1));
        REQUIRE(*l.finish(id, RunState::Failed, {3, {}}, "exited with code 3"));
    }
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(Ledger::path_in(dir.path).c_str(), &db) == SQLITE_OK);
    int rc = sqlite3_exec(db, "UPDATE runs SET state = 'completed'", nullptr, nullptr, nullptr);
    CHECK(rc != SQLITE_OK);
    sqlite3_close(db);
    Ledger l = open_ledger(dir.path);
    CHECK((*l.get(1))->state == RunState::Failed);
}

TEST_CASE("the watermark never moves backwards", "[ledger]") {
    TempDir dir;
    Ledger l = open_ledger(dir.path);
    auto later = *l.add("j", 500, RunState::Scheduled, "");
    auto earlier = *l.add("j", 400, RunState::Scheduled, "");
    REQUIRE(*l.start(later, 1));
    REQUIRE(*l.start(earlier, 2));
    REQUIRE(*l.complete(later, {0, {}}));
    REQUIRE(*l.complete(earlier, {0, {}}));
    CHECK(*l.watermark("j") == 500);
}

TEST_CASE("runs a previous owner left unfinished become interrupted at the next open", "[ledger]") {
    TempDir dir;
    {
        Ledger l = open_ledger(dir.path);
        auto a = *l.add("j", 1, RunState::Scheduled, "");
        auto b = *l.add("j", 2, RunState::Scheduled, "");
        REQUIRE(*l.start(b, 7));
        (void)a;
        auto c = *l.add("j", 3, RunState::Scheduled, "");
        REQUIRE(*l.start(c, 8));
        REQUIRE(*l.complete(c, {0, {}}));
    }
    Ledger l = open_ledger(dir.path);
    auto fixed = l.interrupt_unfinished("lastcall stopped before the run ended");
    REQUIRE(fixed);
    CHECK(fixed->size() == 2);
    auto pending = *l.awaiting_recovery();
    REQUIRE(pending.size() == 2);
    REQUIRE(l.set_recovery(pending[0].id, kRecoveryHeld));
    CHECK((*l.held_run("j"))->id == pending[0].id);
    CHECK(*l.release(pending[0].id));
    CHECK_FALSE(*l.held_run("j"));
    CHECK_FALSE(*l.release(3));  // completed runs have nothing to release
}

TEST_CASE("a second owner of the same state dir is refused", "[ledger]") {
    TempDir dir;
    Ledger first = open_ledger(dir.path);
    auto second = Ledger::open(dir.path, true);
    REQUIRE_FALSE(second);
    CHECK_THAT(second.error().message, Catch::Contains("in use by another lastcall"));
    auto reader = Ledger::open(dir.path, false);  // the runs command needs no lock
    CHECK(reader);
}
