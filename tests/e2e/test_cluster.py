# SPDX-License-Identifier: Apache-2.0
"""Cluster-wide jobs (issue 20): three replicas run each fire time exactly once, and `lastcall
runs --ledger` shows every replica's runs. A real PostgreSQL (clustertest.py); synchronisation on
ledger rows and lastcall's exit."""
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
        # Each ran to its end, was skipped because the previous run was still running (a
        # sanitized build slower than a second), or was still running when the replicas were
        # stopped (the last ones): never run twice, never lost, each ending recorded.
        def ended(r):
            return (r["state"] == "completed" or
                    (r["state"] == "skipped" and "concurrency = forbid" in r["reason"]) or
                    (r["state"] == "interrupted" and r["reason"].startswith("stopped by the shutdown")))
        self.assertTrue(all(ended(r) for r in rows if r["scheduled_at"] <= first + 30), rows)
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
        url = clustertest.SERVER.url(self.db, password="s3cret")  # trust auth: the password is not checked
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
