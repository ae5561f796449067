# SPDX-License-Identifier: Apache-2.0
"""What the cluster tests share (issue 20: replicas of lastcall share one PostgreSQL ledger and
each scheduled run happens once): the server and a test case that starts replicas.

A real PostgreSQL 15 runs for each test module (pgserver.py: initdb and pg_ctl in a temporary
directory, a Unix socket only); each test has its own database. Synchronisation: job lines on the
FIFO, ledger rows (polled with psql: the ledger is the record under test), lastcall's exit
(waitpid). Bounds that come from the issue (lease + 5 s) are asserted as the issue states them;
no other duration is."""
import json
import os
import signal
import subprocess
import time

from lctest import LastcallTestCase
from pgserver import PgServer

SERVER = None
SKIP = None


def start_server():
    """A test module's setUpModule: the server, or the reason the tests are skipped."""
    global SERVER, SKIP
    try:
        SERVER = PgServer()
    except FileNotFoundError as e:
        SKIP = str(e)


def stop_server():
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


