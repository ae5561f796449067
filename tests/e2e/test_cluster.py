# SPDX-License-Identifier: Apache-2.0
"""Cluster-wide jobs (issue 20): replicas of lastcall share one PostgreSQL ledger and each
scheduled run happens once.

A real PostgreSQL 15 runs for the module (pgserver.py: initdb and pg_ctl in a temporary
directory, a Unix socket only); each test has its own database. Synchronisation: job lines on the
FIFO, ledger rows (polled with psql: the ledger is the record under test), lastcall's exit
(waitpid). Bounds that come from the issue (lease + 5 s) are asserted as the issue states them;
no other duration is."""
import json
import os
import signal
import subprocess
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, wait_exit

try:
    from pgserver import PgServer
    SERVER = None
    SKIP = None
except ImportError as e:  # pragma: no cover
    SKIP = str(e)


def setUpModule():
    global SERVER, SKIP
    try:
        SERVER = PgServer()
    except FileNotFoundError as e:
        SKIP = str(e)


def tearDownModule():
    if SERVER:
        SERVER.close()


class ClusterTestCase(LastcallTestCase):
    def setUp(self):
        if SKIP:
            self.skipTest(SKIP)
        super().setUp()
        self.db = SERVER.new_database()
        self.url = SERVER.url(self.db)
        self.replicas = {}

    def tearDown(self):
        for run in self.replicas.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.wait()
        super().tearDown()

    def config(self, text):
        path = os.path.join(self.dir, "lastcall.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_replica(self, name, cfg, *extra):
        env = dict(self.env, REPLICA=name)
        run = self.start(["--config", cfg, "--ledger", self.url, "--replica-id", name,
                          "--report", os.path.join(self.dir, f"report-{name}.json"), *extra],
                         env=env)
        self.replicas[name] = run
        return run

    def stop_replica(self, name):
        run = self.replicas[name]
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())

    def report(self, name):
        with open(os.path.join(self.dir, f"report-{name}.json")) as f:
            return json.load(f)

    def rows(self, where="true"):
        return SERVER.rows(self.db, where)

    def wait_for_rows(self, where, count=1, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                rows = self.rows(where)
            except subprocess.CalledProcessError:  # the schema is not created yet
                rows = []
            if len(rows) >= count:
                return rows
            time.sleep(0.05)
        raise TimeoutError(f"fewer than {count} ledger rows with {where} within {timeout}s: "
                           f"{self.rows()}")

    def assertOneRowPerFireTime(self, rows):
        first_runs = [r for r in rows if r["retry_of"] is None]
        times = [r["scheduled_at"] for r in first_runs]
        self.assertEqual(len(times), len(set(times)), f"a fire time ran twice: {first_runs}")
        return sorted(times)


class ExactlyOnceTest(ClusterTestCase):
    def test_three_replicas_run_each_second_of_a_30s_window_exactly_once(self):
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
command = "echo $LASTCALL_RUN_ID $REPLICA >> $TICKS"
""")
        ticks = os.path.join(self.dir, "ticks")
        self.env["TICKS"] = ticks
        for name in ("r1", "r2", "r3"):
            self.start_replica(name, cfg)
        self.wait_for_rows("job = 'tick'", 3)
        first = min(r["scheduled_at"] for r in self.rows())
        # 30 s of fire times after the first one, all three replicas up throughout.
        self.wait_for_rows(f"job = 'tick' AND scheduled_at >= {first + 30}", 1, timeout=60)
        for name in ("r1", "r2", "r3"):
            self.stop_replica(name)
        rows = self.rows("job = 'tick'")
        times = self.assertOneRowPerFireTime(rows)
        window = [t for t in times if first <= t <= first + 30]
        self.assertEqual(window, list(range(first, first + 31)),
                         "a fire time was missed while replicas were up")
        self.assertTrue(all(r["state"] == "completed" for r in rows if r["scheduled_at"] <= first + 30),
                        rows)
        # Each run id ran once, by the replica the ledger names.
        with open(ticks) as f:
            ran = [line.split() for line in f]
        ids = [int(i) for i, _ in ran]
        self.assertEqual(len(ids), len(set(ids)), "a run ran twice")
        by_id = {r["id"]: r["replica"] for r in rows}
        for run_id, replica in ran:
            self.assertEqual(by_id[int(run_id)], replica)
        # Work spread over more than one replica is not promised; one run per time is.
        self.assertNoLeftovers()


class LeaseTest(ClusterTestCase):
    JOB = """
lease = "3s"
[jobs.long]
schedule = "@every 10s"
concurrency = "forbid"
on_interrupted = "{policy}"
command = '''
if [ -n "$LASTCALL_RETRY_OF" ]; then echo retry $LASTCALL_RUN_ID $LASTCALL_RETRY_OF $REPLICA > $EVENTS; exit 0; fi
echo started $LASTCALL_RUN_ID $REPLICA > $EVENTS
exec sleep 100
'''
"""

    def kill_the_running_replica(self, policy):
        cfg = self.config(self.JOB.format(policy=policy))
        for name in ("a", "b"):
            self.start_replica(name, cfg)
        _, run_id, owner = self.fifo.readline(timeout=30).split()
        killed = time.monotonic()
        os.kill(self.replicas[owner].proc.pid, signal.SIGKILL)
        self.replicas[owner].wait()
        survivor = "b" if owner == "a" else "a"
        return int(run_id), owner, survivor, killed

    def test_a_killed_replicas_run_is_interrupted_within_the_lease_and_retried_once(self):
        run_id, owner, survivor, killed = self.kill_the_running_replica("retry")
        # The dead replica's job went with it (pdeathsig): nothing of it runs on.
        row = self.wait_for_rows(f"id = {run_id} AND state = 'interrupted'", timeout=30)[0]
        self.assertLessEqual(time.monotonic() - killed, 3 + 5,
                             "interrupted later than lease + 5 s after the kill")
        self.assertEqual(row["reason"], f"lease expired: replica {owner} stopped renewing it")
        line = self.fifo.readline(timeout=30).split()
        self.assertEqual(line[0], "retry")
        self.assertEqual((int(line[2]), line[3]), (run_id, survivor))
        retries = self.wait_for_rows(f"retry_of = {run_id} AND state = 'completed'")
        self.stop_replica(survivor)
        self.assertEqual(len(self.rows(f"retry_of = {run_id}")), 1, "retried more than once")
        self.assertEqual(retries[0]["replica"], survivor)
        self.assertEqual(self.rows(f"id = {run_id}")[0]["recovery"], "retried")
        self.assertNoLeftovers()

    def test_a_held_run_of_a_killed_replica_is_rerun_by_nobody_until_released(self):
        run_id, owner, survivor, _ = self.kill_the_running_replica("hold")
        self.wait_for_rows(f"id = {run_id} AND recovery = 'held'", timeout=30)
        # The next fire time is recorded skipped, by one replica, and nothing retries the run.
        skipped = self.wait_for_rows("job = 'long' AND state = 'skipped' AND reason LIKE 'held:%'",
                                     timeout=30)
        self.assertIn(f"run {run_id}", skipped[0]["reason"])
        self.assertEqual(self.rows(f"retry_of = {run_id}"), [])
        r = subprocess.run([LASTCALL, "runs", "release", str(run_id), "--ledger", self.url],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        line = self.fifo.readline(timeout=30).split()
        self.assertEqual((line[0], int(line[2]), line[3]), ("retry", run_id, survivor))
        self.wait_for_rows(f"retry_of = {run_id} AND state = 'completed'")
        self.stop_replica(survivor)
        self.assertEqual(len(self.rows(f"retry_of = {run_id}")), 1)


class OutageTest(ClusterTestCase):
    def test_a_10s_database_outage_loses_no_record_and_runs_nothing_unclaimed(self):
        # Each run takes 2 s: the runs in flight when the database goes away end during the
        # outage, and their records can only be written once it is back.
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
concurrency = "allow"
command = "echo $LASTCALL_RUN_ID >> $TICKS; sleep 2"
""")
        ticks = os.path.join(self.dir, "ticks")
        self.env["TICKS"] = ticks
        for name in ("a", "b", "c"):
            self.start_replica(name, cfg)
        self.wait_for_rows("job = 'tick' AND state = 'completed'", 3)
        in_flight = [r["id"] for r in self.rows("state = 'started'")]
        SERVER.stop()
        time.sleep(10)  # the outage is the thing under test: 10 s, as the issue says
        SERVER.start()
        after = max(r["scheduled_at"] for r in self.rows())
        self.wait_for_rows(f"job = 'tick' AND scheduled_at > {after} AND state = 'completed'", 3)
        for name in ("a", "b", "c"):
            self.stop_replica(name)
        rows = self.rows("job = 'tick'")
        self.assertOneRowPerFireTime(rows)
        self.assertTrue(all(r["state"] not in ("scheduled", "started") for r in rows), rows)
        # Every run that ran has its row (no replica ran a time it could not claim), once.
        with open(ticks) as f:
            ids = [int(line) for line in f]
        self.assertEqual(len(ids), len(set(ids)))
        by_id = {r["id"]: r for r in rows}
        self.assertTrue(set(ids) <= set(by_id), f"runs without a row: {set(ids) - set(by_id)}")
        # The runs that ended during the outage: recorded once it was back, or reported
        # uncertain by their replica; never lost silently.
        uncertain = {u["id"] for name in ("a", "b", "c")
                     for u in self.report(name)["jobs"]["unrecorded"]
                     if u["error"].startswith("uncertain")}
        self.assertTrue(in_flight, "no run was in flight when the database went away")
        for run_id in in_flight:
            self.assertTrue(by_id[run_id]["state"] == "completed" or run_id in uncertain,
                            by_id[run_id])


class ShutdownTest(ClusterTestCase):
    def test_sigterm_to_one_replica_records_its_run_interrupted_and_the_others_go_on(self):
        cfg = self.config("""
[jobs.work]
schedule = "@every 10s"
concurrency = "forbid"
command = '''
if [ -n "$LASTCALL_RETRY_OF" ]; then echo retry $LASTCALL_RUN_ID $REPLICA > $EVENTS; exit 0; fi
trap 'sleep 0.2; exit 0' TERM
echo started $LASTCALL_RUN_ID $REPLICA > $EVENTS
sleep 100 & wait
'''
""")
        for name in ("a", "b"):
            self.start_replica(name, cfg, "--grace", "10s")
        _, run_id, owner = self.fifo.readline(timeout=30).split()
        other = "b" if owner == "a" else "a"
        self.stop_replica(owner)
        row = self.rows(f"id = {run_id}")[0]
        self.assertEqual(row["state"], "interrupted", row)  # its exit 0 came after the stop
        self.assertEqual(row["replica"], owner)
        self.assertIn(int(run_id), [r["id"] for r in self.report(owner)["jobs"]["interrupted_runs"]])
        # The database itself refuses a late completion, whoever writes it.
        r = SERVER.psql(self.db, f"UPDATE lastcall.runs SET state = 'completed' WHERE id = {run_id}",
                        check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("a terminal run state is final", r.stderr)
        # The other replica goes on: it retries the interrupted run (on_interrupted = retry).
        line = self.fifo.readline(timeout=30).split()
        self.assertEqual((line[0], line[2]), ("retry", other))
        self.stop_replica(other)
        self.assertEqual(self.rows(f"id = {run_id}")[0]["state"], "interrupted")
        self.assertNoLeftovers()


class RunsCommandTest(ClusterTestCase):
    def test_runs_lists_every_replicas_runs_with_the_replica_and_never_the_password(self):
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
command = "true"
""")
        self.start_replica("alpha", cfg)
        self.wait_for_rows("job = 'tick' AND state = 'completed'")
        self.stop_replica("alpha")
        url = SERVER.url(self.db, password="s3cret")  # trust auth: the password is not checked
        r = subprocess.run([LASTCALL, "runs", "--ledger", url, "--json"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        runs = json.loads(r.stdout)
        self.assertTrue(runs and all(x["replica"] == "alpha" for x in runs), runs)
        self.assertNotIn("s3cret", r.stderr + r.stdout)
        table = subprocess.run([LASTCALL, "runs", "--ledger", url], capture_output=True,
                               text=True, timeout=30)
        self.assertIn("REPLICA", table.stdout.splitlines()[0])
        self.assertIn("alpha", table.stdout)

    def test_an_unreachable_ledger_stops_lastcall_at_start_with_the_reason(self):
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
command = "true"
""")
        r = subprocess.run([LASTCALL, "--config", cfg, "--ledger",
                            "postgresql://app:s3cret@/db?host=/nonexistent-lastcall"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("run ledger: postgresql://app@/nonexistent-lastcall/db", r.stderr)
        self.assertNotIn("s3cret", r.stderr)

    def test_queue_overlap_is_refused_with_a_shared_ledger(self):
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
overlap = "queue"
command = "true"
""")
        r = subprocess.run([LASTCALL, "--config", cfg, "--ledger", self.url],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("\"queue\" needs one machine", r.stderr)


if __name__ == "__main__":
    unittest.main()
