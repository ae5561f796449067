# SPDX-License-Identifier: Apache-2.0
"""The init never waits on its ledger (issue 38): signals reach the main command at once and a
stop ends within its grace while the ledger's PostgreSQL backend is hung (SIGSTOP) or a TCP proxy
in front of it stops answering; a replica cut off from the database has stopped its run before
another replica's retry starts; a replica frozen inside a claim does not block that job on the
other replicas.

A real PostgreSQL 15 (clustertest.py). The replica under test reaches it through a proxy the test
owns (stallproxy.py, 127.0.0.1 in front of the server's Unix socket), which tells the test when a
request of lastcall is in flight with no answer coming: the moment lastcall's old loop would be
blocked. Synchronisation: the main command's lines on the FIFO (termlog, with the CLOCK_MONOTONIC
time it got each signal), ledger rows, the proxy's events, flock(1) on a file a run's copy holds
for its lifetime and its retry tries at its start, waitpid. The durations asserted are the issue's: a signal reaches the main
command "at once" (asserted as within 2 s, generous for sanitized builds: the old loop was blocked
until the hang ended) and lastcall exits within grace + 1 s of a SIGTERM (plus 1 s of slack for a
slow machine: Popen.wait's polling and a sanitized build's start of the exit path)."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import clustertest
from clustertest import ClusterTestCase
from lctest import LASTCALL, helper
from stallproxy import StallProxy, is_stopped, wait_stopped


def setUpModule():
    clustertest.start_server()


def tearDownModule():
    clustertest.stop_server()


PROMPT = 2.0  # "at once", for a signal to reach the main command
GRACE = 3  # --grace of the replica under test, seconds
SLACK = 1.0  # on top of the grace + 1 s (see the module's docstring)

# A job every second whose runs stay a while: lastcall calls its ledger every second (claims,
# lease renewals), and has runs to stop when the SIGTERM comes. Each run's id goes to $RUNS.
BUSY_JOB = """
[jobs.busy]
schedule = "@every 1s"
concurrency = "allow"
command = "echo $LASTCALL_RUN_ID >> $RUNS; exec sleep 60"
"""


def minimum_lease():
    """The shortest lease lastcall accepts, in seconds, from its own refusal of a 1 s lease (the
    issue lets the minimum be raised, said in the error): the self-stop's arithmetic is tested
    where it is tightest."""
    d = tempfile.mkdtemp(prefix="lctest-lease-")
    cfg = os.path.join(d, "lease.toml")
    with open(cfg, "w") as f:
        f.write('lease = "1s"\n[jobs.x]\nschedule = "@every 1h"\ncommand = "true"\n')
    r = subprocess.run([LASTCALL, "--config", cfg, "--", "true"], capture_output=True, text=True,
                       timeout=30)
    m = re.search(r"lease: must be at least (\d+(?:\.\d+)?)\s*(ms|s|m)\b", r.stderr)
    if r.returncode != 2 or not m:
        raise AssertionError(f"lastcall did not refuse a 1 s lease with its minimum: {r.stderr!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


class NeverWaitsTestCase(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.proxies = []
        self.stopped = []  # pids this test SIGSTOPped: SIGCONT in tearDown, whatever happened

    def tearDown(self):
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        super().tearDown()  # kills the replicas still running
        for proxy in self.proxies:
            proxy.close()
            if proxy.error:
                raise proxy.error

    def proxy(self):
        proxy = StallProxy(os.path.join(clustertest.SERVER.sock, ".s.PGSQL.5432"))
        self.proxies.append(proxy)
        return proxy

    def start_behind(self, proxy, name, cfg, *extra):
        """A replica whose ledger is reached through proxy (application_name lastcall-NAME: its
        backends are found in pg_stat_activity)."""
        url = proxy.url(self.db, application_name=f"lastcall-{name}", sslmode="disable")
        env = dict(self.env, REPLICA=name)
        run = self.start(["--config", cfg, "--ledger", url, "--replica-id", name,
                          "--report", os.path.join(self.dir, f"report-{name}.json"), *extra],
                         env=env)
        self.replicas[name] = run
        return run

    def sigstop(self, pid):
        self.stopped.append(pid)
        os.kill(pid, signal.SIGSTOP)
        wait_stopped(pid)

    def backends(self, name):
        out = clustertest.SERVER.psql(
            self.db, f"SELECT pid FROM pg_stat_activity WHERE application_name = 'lastcall-{name}'")
        return [int(p) for p in out.stdout.split()]

    def wait_until(self, predicate, timeout, what):
        """Polls a state no event announces (the proxy's view of a connection); bounded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.005)
        self.fail(f"{what} within {timeout}s")

    def assertSignalReachesMain(self, run, sig, name, situation):
        """Sends sig to lastcall; termlog writes "NAME <CLOCK_MONOTONIC ns> ..." when it gets it.
        Returns the delay in seconds."""
        sent = time.monotonic_ns()
        run.signal(sig)
        try:
            got = int(self.fifo.expect_prefix(name + " ", timeout=10).split()[0])
        except TimeoutError:
            self.fail(f"{name} sent to lastcall did not reach the main command within 10 s "
                      f"({situation})")
        delay = (got - sent) / 1e9
        self.assertLessEqual(delay, PROMPT, f"{name} reached the main command after {delay:.2f} s "
                                            f"({situation})")
        return delay

    def assertStopsWithinGrace(self, run, situation):
        """SIGTERM: the main command gets it at once, lastcall exits within grace + 1 s and its
        report is written. Returns the report."""
        sent = time.monotonic()
        self.assertSignalReachesMain(run, signal.SIGTERM, "TERM", situation)
        try:
            run.wait(timeout=GRACE + 1 + SLACK + 30)
        except subprocess.TimeoutExpired:
            self.fail(f"lastcall did not exit within {GRACE + 1 + SLACK + 30:.0f} s of a SIGTERM "
                      f"with --grace {GRACE}s ({situation})")
        took = time.monotonic() - sent
        self.assertLessEqual(took, GRACE + 1 + SLACK,
                             f"lastcall exited {took:.2f} s after a SIGTERM, grace {GRACE} s "
                             f"({situation}): {run.output()[-3000:]}")
        path = os.path.join(self.dir, "report-a.json")
        self.assertTrue(os.path.exists(path), f"no report written ({situation})")
        with open(path) as f:
            return json.load(f)  # valid JSON, or the test fails here

    def runs_started(self):
        """Ids of the runs whose command started (the job wrote its id)."""
        try:
            with open(self.env["RUNS"]) as f:
                return {int(line) for line in f if line.strip()}
        except FileNotFoundError:
            return set()


class HungLedgerTest(NeverWaitsTestCase):
    """One replica, a main command that logs each signal (termlog), a job every second; the
    ledger hangs with lastcall's request in flight."""

    def start_busy_replica(self, proxy):
        self.env["RUNS"] = os.path.join(self.dir, "runs")
        cfg = self.config(BUSY_JOB)
        run = self.start_behind(proxy, "a", cfg, "--grace", f"{GRACE}s", "--", helper("termlog"))
        self.fifo.expect("started", timeout=30)
        # Claimed through the proxy and started: the connection is up and in use every second.
        self.wait_for_rows("job = 'busy' AND replica = 'a' AND state = 'started'", 2)
        return run

    def test_sigusr1_and_sigterm_reach_the_main_command_at_once_while_lastcalls_backend_is_stopped(self):
        proxy = self.proxy()
        run = self.start_busy_replica(proxy)
        backends = self.backends("a")
        self.assertTrue(backends, "lastcall has no backend named lastcall-a")
        conns = proxy.connections()
        for pid in backends:
            self.sigstop(pid)
        # lastcall sent a request to its stopped backend: its answer will not come while stopped.
        self.wait_until(lambda: proxy.unanswered(conns), 10,
                        "lastcall sent nothing to its stopped backend")
        situation = f"lastcall's backend {backends} stopped with a request of lastcall in flight"
        self.assertSignalReachesMain(run, signal.SIGUSR1, "USR1", situation)
        report = self.assertStopsWithinGrace(run, situation)
        self.assertEqual(report["jobs"]["replica"], "a")

    def test_sigusr1_and_sigterm_reach_the_main_command_at_once_while_the_ledgers_proxy_answers_nothing(self):
        proxy = self.proxy()
        run = self.start_busy_replica(proxy)
        proxy.black_hole()
        # A request of lastcall went into the hole (or was cut before its answer came back).
        self.assertTrue(proxy.stalled.wait(10), "lastcall sent nothing to the ledger within 10 s")
        situation = "the ledger's proxy answers nothing, with a request of lastcall in flight"
        self.assertSignalReachesMain(run, signal.SIGUSR1, "USR1", situation)
        report = self.assertStopsWithinGrace(run, situation)
        # The runs it started could not be recorded interrupted: the report names each of them
        # (a claim cut before its answer came may have a row lastcall never learnt of: only the
        # runs whose command started are checked).
        still_started = {r["id"] for r in self.rows("job = 'busy' AND state = 'started'")}
        ran = self.runs_started() & still_started
        self.assertTrue(ran, "no run of lastcall was in flight when the ledger went away")
        named = {u["id"] for u in report["jobs"]["unrecorded"]}
        self.assertLessEqual(ran, named, f"runs not recorded and not named in the report: "
                                         f"{sorted(ran - named)}; report: {report['jobs']}")


class NoOverlapTest(NeverWaitsTestCase):
    # a's copy of the run takes an exclusive flock on $LOCK and holds it for its lifetime (fd 9
    # is inherited by the sleep the shell becomes); b's retry tries the lock at its start: if a
    # process of a's copy is still alive it cannot, and says "overlap". An event, not a timing.
    # The job fires in a window of WINDOW seconds only (the seconds field, next in a minute):
    # a's first fire time in it runs (the others are skipped, concurrency = forbid), and once the
    # window is over nothing but the retry can start, so the retry never waits for a slot.
    WINDOW = 8
    JOB = """
lease = "{lease}s"
[jobs.long]
schedule = "{seconds} * * * * *"
concurrency = "forbid"
on_interrupted = "retry"
command = '''
if [ -z "$LASTCALL_RETRY_OF" ]; then
  exec 9>>"$LOCK"
  flock -n 9 || exit 1
  echo started $LASTCALL_RUN_ID $REPLICA > $EVENTS
  exec sleep 100
fi
if ! flock -n "$LOCK" true; then echo overlap $LASTCALL_RUN_ID $LASTCALL_RETRY_OF $REPLICA > $EVENTS; exit 1; fi
echo retry $LASTCALL_RUN_ID $LASTCALL_RETRY_OF $REPLICA > $EVENTS
exec sleep 100
'''
"""

    def test_a_replica_cut_off_from_the_ledger_has_stopped_its_run_before_another_replica_retries_it(self):
        lease = minimum_lease()
        self.env["LOCK"] = os.path.join(self.dir, "job.lock")
        first = int(time.time()) + 3
        last = first + self.WINDOW - 1
        seconds = ",".join(str(t % 60) for t in range(first, last + 1))
        cfg = self.config(self.JOB.format(lease=f"{lease:g}", seconds=seconds))
        proxy = self.proxy()
        a = self.start_behind(proxy, "a", cfg, "--grace", "2s")
        line = self.fifo.readline(timeout=30).split()
        self.assertEqual((line[0], line[2]), ("started", "a"), line)
        run_id = line[1]
        self.start_replica("b", cfg)
        # b is up, and the window is over: every fire time of it has its row (a's run, skipped).
        self.wait_until(lambda: clustertest.SERVER.psql(
            self.db, "SELECT count(*) FROM lastcall.starts WHERE replica = 'b'").stdout.strip() != "0",
            30, "replica b did not record its start")
        self.wait_for_rows(f"job = 'long' AND scheduled_at = {last}")
        proxy.black_hole()  # a partition of a from the database; b still reaches it
        line = self.fifo.readline(timeout=lease * 2 + 30).split()
        if line[0] == "overlap":
            self.fail(f"run {line[1]}, retry of run {line[2]}, started on replica {line[3]} while "
                      f"a process of run {run_id} still ran on replica a: two copies overlapped")
        self.assertEqual(line, ["retry", line[1], run_id, "b"])
        row = self.rows(f"id = {run_id}")[0]
        self.assertEqual((row["state"], row["replica"], row["recovery"]),
                         ("interrupted", "a", "retried"), row)
        self.stop_replica("b")
        a.signal(signal.SIGTERM)
        try:
            a.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("replica a, cut off from the ledger, did not exit within 30 s of a SIGTERM")
        self.assertEqual(self.fifo.drain(), b"")
        self.assertNoLeftovers()


class FrozenClaimTest(NeverWaitsTestCase):
    # Where replica a is frozen: its proxy SIGSTOPs it the moment it sends a claim's statement
    # (the one-statement claim, lastcall.claim_runs_v1; or, in versions before it, the job's
    # lock or the insert of the run), then passes the statement on: whatever a holds on the
    # server then, it holds while frozen. Aimed, not left to chance (a claim is a few
    # milliseconds of each second).
    CLAIM = rb"claim_runs_v\d|pg_advisory_xact_lock|INSERT\s+INTO\s+lastcall\.runs"
    # Less than the server's idle_in_transaction_session_timeout (10 s), which would end a's
    # transaction and free the job on its own.
    FROZEN = 7

    def test_a_replica_frozen_inside_a_claim_does_not_stop_the_others_claiming_that_jobs_fire_times(self):
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
concurrency = "allow"
command = "true"
""")
        proxy = self.proxy()
        for name in ("b", "c"):
            self.start_replica(name, cfg)
        a = self.start_behind(proxy, "a", cfg)
        self.wait_for_rows("job = 'tick'", 2)
        # a is past its start (its row in lastcall.starts): what it sends next is about jobs.
        self.wait_until(lambda: clustertest.SERVER.psql(
            self.db, "SELECT count(*) FROM lastcall.starts WHERE replica = 'a'").stdout.strip() != "0",
            30, "replica a did not record its start")
        self.stopped.append(a.proc.pid)
        proxy.freeze_on(self.CLAIM, a.proc.pid)
        self.assertTrue(proxy.frozen.wait(30), "replica a sent no claim within 30 s")
        before = max(r["scheduled_at"] for r in self.rows("job = 'tick'"))
        # At most one claim that held the job's lock before a's can still commit after `before`
        # was read: two later fire times are the others going on.
        where = (f"job = 'tick' AND retry_of IS NULL AND scheduled_at > {before} "
                 f"AND replica <> 'a'")
        try:
            later = self.wait_for_rows(where, 2, timeout=self.FROZEN)
        except TimeoutError:
            self.fail(f"while replica a was frozen after sending {proxy.frozen_by!r}, replicas b "
                      f"and c claimed {len(self.rows(where))} fire time(s) of job tick after "
                      f"{before} in {self.FROZEN} s")
        self.assertTrue(is_stopped(a.proc.pid), f"a was not frozen throughout: {later}")
        os.kill(a.proc.pid, signal.SIGCONT)
        for name in ("a", "b", "c"):
            self.stop_replica(name)
        self.assertOneRowPerFireTime(self.rows("job = 'tick'"))
        self.assertNoLeftovers()


if __name__ == "__main__":
    unittest.main()
