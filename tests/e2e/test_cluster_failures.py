# SPDX-License-Identifier: Apache-2.0
"""Cluster-wide jobs (issue 20), when things fail: a replica killed (its run interrupted within
lease + 5 s, retried once or held), the database down for 10 s, one replica stopped mid-run. A
real PostgreSQL (clustertest.py); synchronisation on job lines (FIFO), ledger rows and
lastcall's exit. The outage's 10 s and the issue's lease + 5 s are the only durations."""
import json
import os
import signal
import subprocess
import time
import unittest

import clustertest
from clustertest import ClusterTestCase
from lctest import LASTCALL


def setUpModule():
    clustertest.start_server()


def tearDownModule():
    clustertest.stop_server()


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
        clustertest.SERVER.stop()
        time.sleep(10)  # the outage is the thing under test: 10 s, as the issue says
        clustertest.SERVER.start()
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
        # The fire times of the outage were not run, and each replica's report counts them.
        self.assertTrue(all(self.report(n)["jobs"]["unclaimed"] > 0 for n in ("a", "b", "c")))
        for run_id in in_flight:
            self.assertTrue(by_id[run_id]["state"] == "completed" or run_id in uncertain,
                            by_id[run_id])


class ShutdownTest(ClusterTestCase):
    # The job's line is written once its background sleep runs `sleep`: a SIGTERM between dash's
    # fork and the exec would hit the copy of the shell's trap, and the sleep would survive to
    # the SIGKILL (test_endings.py's SLEEPING).
    def test_sigterm_to_one_replica_records_its_run_interrupted_and_the_others_go_on(self):
        cfg = self.config("""
[jobs.work]
schedule = "@every 10s"
concurrency = "forbid"
command = '''
if [ -n "$LASTCALL_RETRY_OF" ]; then echo retry $LASTCALL_RUN_ID $REPLICA > $EVENTS; exit 0; fi
trap 'sleep 0.2; exit 0' TERM
sleep 100 & until read c < /proc/$!/comm && [ x$c = xsleep ]; do :; done
echo started $LASTCALL_RUN_ID $REPLICA > $EVENTS
wait
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
        r = clustertest.SERVER.psql(self.db, f"UPDATE lastcall.runs SET state = 'completed' WHERE id = {run_id}",
                        check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("a terminal run state is final", r.stderr)
        # The other replica goes on: it retries the interrupted run (on_interrupted = retry).
        line = self.fifo.readline(timeout=30).split()
        self.assertEqual((line[0], line[2]), ("retry", other))
        self.stop_replica(other)
        self.assertEqual(self.rows(f"id = {run_id}")[0]["state"], "interrupted")
        self.assertNoLeftovers()


if __name__ == "__main__":
    unittest.main()
