# SPDX-License-Identifier: Apache-2.0
"""Cluster jobs keep "exactly once" through outages, leftovers and neighbours (issue 39): a run
that completed while the database was down longer than the lease is recorded completed and not
run again (one replica, three replicas); `lastcall runs check` and `lastcall.run_is_current` tell
a job whether its run is still its own; a restarted replica kills what its killed predecessor's
run left running before it claims anything; two deployments on one database each run every fire
time of their job of the same name, and a replica whose job differs under a live deployment's
name refuses to start; a newer schema and a role without rights on the runs are refused at start;
terminal rows cannot be changed or deleted but by `lastcall runs prune` and `retention`; `lastcall
runs --limit/--since`.

A real PostgreSQL 15 (clustertest.py), stopped and started again on the same socket for the
outage (pgserver.py's stop(), a fast stop, and start()). Synchronisation: the job's lines on the
FIFO, a second FIFO the job reads its go-ahead from (the test writes it), ledger rows and files
polled with bounded waits, pidfds, waitpid. The durations are the issue's: a 6 s lease, an outage
of 15 s (longer than the lease), `retention = "2s"`, the cut-offs given to `runs prune --before`
and `runs --since`, whose rows are compared with the test's own clock read before and after the
command (the same machine's clock as lastcall's `created_ms` and `ended_ms`)."""
import datetime
import json
import os
import re
import signal
import subprocess
import time
import unittest

import clustertest
from clustertest import ClusterTestCase
from lctest import LASTCALL, marked_pids, wait_exit
from stallproxy import wait_stopped


def setUpModule():
    clustertest.start_server()


def tearDownModule():
    clustertest.stop_server()


LEASE = 6  # seconds, the lease of the tests that need one (the issue's)
OUTAGE = 15  # seconds the database is down: longer than the lease
LC_BIN = os.path.abspath(LASTCALL)  # what a job runs for `lastcall runs check`
TERMINAL = ("completed", "failed", "interrupted", "skipped")


def epoch(iso):
    """$LASTCALL_SCHEDULED_TIME ("2026-12-07T05:18:00Z") in seconds since the epoch."""
    return int(datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp())


def now_ms():
    return int(time.time() * 1000)


def quoted(text):
    """An SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def proc_state(stat):
    """The state letter of a /proc/PID/stat line; None for no line (no such process)."""
    return stat.rsplit(")", 1)[1].split()[0] if stat else None


class SemanticsTestCase(ClusterTestCase):
    def setUp(self):
        super().setUp()
        self.stopped = []  # pids this test SIGSTOPped: SIGCONT in tearDown, whatever happened
        self.gate_fd = None

    def tearDown(self):
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        super().tearDown()
        if self.gate_fd is not None:
            os.close(self.gate_fd)

    def psql(self, sql, check=True):
        return clustertest.SERVER.psql(self.db, sql, check=check)

    def gate(self):
        """A FIFO a job waits on (`read go < "$GO"`) until the test opens it. The test holds it
        open read-write, so a line written before the job reads is kept, and the job's open never
        blocks on a missing writer."""
        path = os.path.join(self.dir, "go.fifo")
        os.mkfifo(path)
        self.gate_fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.env["GO"] = path

    def open_gate(self):
        os.write(self.gate_fd, b"go\n")

    def assertReplicasRunning(self):
        """A replica that exited without the test stopping it fails the test at once, with its
        log (a wait for its rows would only time out)."""
        for name, run in self.replicas.items():
            if run.proc.returncode is None and run.proc.poll() is not None:
                self.fail(f"replica {name} exited with {run.proc.returncode}:\n"
                          f"{run.output()[-3000:]}")

    def wait_until(self, predicate, timeout, what):
        """Polls a state no event announces (ledger rows, a file the runs append to); bounded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assertReplicasRunning()
            try:
                if predicate():
                    return
            except subprocess.CalledProcessError:  # the schema is not created yet
                pass
            time.sleep(0.05)
        self.fail(f"{what} within {timeout}s")

    def wait_for_rows(self, where, count=1, timeout=30.0):
        found = []

        def enough():
            found[:] = self.rows(where)
            return len(found) >= count
        self.wait_until(enough, timeout, f"fewer than {count} ledger rows with {where}")
        return found

    def kill_replica(self, name):
        run = self.replicas[name]
        os.kill(run.proc.pid, signal.SIGKILL)
        run.wait()

    def lastcall_runs(self, *args):
        return subprocess.run([LASTCALL, "runs", *args], env=self.env, capture_output=True,
                              text=True, timeout=30)

    def runs_json(self, *args):
        r = self.lastcall_runs("--ledger", self.url, "--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def refused_start(self, cfg, url, name, timeout=20):
        """lastcall started as a replica that must refuse to start: its exit, within timeout (a
        replica still running then started where it must not)."""
        try:
            return subprocess.run([LASTCALL, "--config", cfg, "--ledger", url, "--replica-id",
                                   name], env=dict(self.env, REPLICA=name), capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
            self.fail(f"replica {name} did not refuse to start: still running after {timeout} s "
                      f"(stderr: {err!r})")

    def assertOneLine(self, stderr):
        lines = stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"not one line on stderr: {stderr!r}")
        return lines[0]


class OutageLongerThanTheLeaseTest(SemanticsTestCase):
    # The first run (the one that gets $ONCE) writes its line and waits for the go-ahead, which
    # the test gives once the database is down: it ends, exit 0, during the outage, within
    # 2/3 of the lease of its last confirmed renewal (the self-stop's point). Every run appends
    # "ID RETRY_OF" to $STARTS, a retry too.
    JOB = f"""
lease = "{LEASE}s"
[jobs.work]
schedule = "@every 1s"
concurrency = "forbid"
on_interrupted = "retry"
command = '''
echo "$LASTCALL_RUN_ID ${{LASTCALL_RETRY_OF:-}}" >> "$STARTS"
mkdir "$ONCE" 2>/dev/null || exit 0
echo started $LASTCALL_RUN_ID $REPLICA > "$EVENTS"
read go < "$GO"
exit 0
'''
"""

    def completed_during_an_outage(self, names):
        self.gate()
        self.env["STARTS"] = os.path.join(self.dir, "starts")
        self.env["ONCE"] = os.path.join(self.dir, "once")
        cfg = self.config(self.JOB)
        for name in names:
            self.start_replica(name, cfg)
        _, run_id, owner = self.fifo.readline(timeout=30).split()
        run_id = int(run_id)
        # A renewal of its lease confirmed (lease_until_ms moved): the database goes away right
        # after one, as it would at any time.
        first = self.wait_for_rows(f"id = {run_id} AND state = 'started'")[0]["lease_until_ms"]
        self.wait_for_rows(f"id = {run_id} AND lease_until_ms > {first}")
        clustertest.SERVER.stop()
        down = time.monotonic()
        self.open_gate()  # the run ends, exit 0, while nobody reaches the database
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down)))  # the outage is the thing under test
        clustertest.SERVER.start()
        back = int(time.time())
        row = self.wait_for_rows(f"id = {run_id} AND state <> 'started'", timeout=30)[0]
        # The replicas go on: three fire times after the outage have ended, so every tick that
        # could judge the run's lease or retry it has come and gone.
        self.wait_for_rows(f"job = 'work' AND retry_of IS NULL AND scheduled_at > {back} "
                           f"AND state IN ('completed', 'skipped')", 3, timeout=30)
        for name in names:
            self.stop_replica(name)
        self.assertEqual((row["state"], row["exit_code"], row["replica"]),
                         ("completed", 0, owner),
                         f"run {run_id} ended exit 0 during a {OUTAGE} s outage (lease {LEASE} s) "
                         f"and is recorded: {row}")
        self.assertEqual(self.rows(f"retry_of = {run_id}"), [],
                         f"run {run_id}, completed during the outage, was retried")
        with open(self.env["STARTS"]) as f:
            starts = [line.split() for line in f]
        self.assertEqual([s for s in starts if s[0] == str(run_id)], [[str(run_id)]])
        self.assertEqual([s for s in starts if s[1:] == [str(run_id)]], [],
                         f"run {run_id} ran again after the outage")
        self.assertEqual(self.rows(f"id = {run_id}")[0]["state"], "completed")
        self.assertNoLeftovers()

    def test_a_run_that_completed_while_the_database_was_down_longer_than_the_lease_is_recorded_completed_and_not_rerun_with_one_replica(self):
        self.completed_during_an_outage(["a"])

    def test_a_run_that_completed_while_the_database_was_down_longer_than_the_lease_is_recorded_completed_and_not_rerun_with_three_replicas(self):
        self.completed_during_an_outage(["a", "b", "c"])


class FencingTest(SemanticsTestCase):
    # The first run checks that it is current (with the ledger from its environment, and with
    # --ledger), says so with its run id, replica and owner, waits for the go-ahead and checks
    # again. The test gives the go-ahead once its replica was frozen past the lease and the other
    # replica recorded the run interrupted.
    CHECKING_JOB = f"""
lease = "{LEASE}s"
[jobs.fenced]
schedule = "@every 1s"
concurrency = "forbid"
on_interrupted = "none"
command = '''
mkdir "$ONCE" 2>/dev/null || exit 0
"$LC_BIN" runs check 2> "$CHECKS/current.err"; plain=$?
"$LC_BIN" runs check --ledger "$LEDGER_URL" 2>> "$CHECKS/current.err"; flag=$?
echo current $LASTCALL_RUN_ID $REPLICA $plain $flag "$LASTCALL_RUN_OWNER" > "$EVENTS"
read go < "$GO"
"$LC_BIN" runs check 2> "$CHECKS/stale.err"; plain=$?
"$LC_BIN" runs check --ledger "$LEDGER_URL" 2> "$CHECKS/stale-ledger.err"; flag=$?
echo stale $plain $flag > "$EVENTS"
'''
"""

    def test_runs_check_and_run_is_current_say_yes_while_the_run_is_this_replicas_and_no_once_its_lease_was_taken(self):
        self.gate()
        self.env.update(ONCE=os.path.join(self.dir, "once"), CHECKS=self.dir, LC_BIN=LC_BIN,
                        LEDGER_URL=self.url)
        cfg = self.config(self.CHECKING_JOB)
        for name in ("a", "b"):
            self.start_replica(name, cfg)
        line = self.fifo.expect_prefix("current ", timeout=30).split(" ", 4)
        run_id, owner, plain, flag = int(line[0]), line[1], line[2], line[3]
        run_owner = line[4] if len(line) > 4 else ""
        with open(os.path.join(self.dir, "current.err")) as f:
            err = f.read()
        self.assertEqual((plain, flag), ("0", "0"),
                         f"`lastcall runs check` in run {run_id}, started and owned by its "
                         f"replica: exit {plain} (ledger from the environment), {flag} "
                         f"(--ledger); stderr {err!r}")
        self.assertTrue(run_owner, "the run has no $LASTCALL_RUN_OWNER")
        self.assertEqual(self.psql(f"SELECT lastcall.run_is_current({run_id}, "
                                   f"{quoted(run_owner)})").stdout.strip(), "t")
        self.assertEqual(self.psql(f"SELECT lastcall.run_is_current({run_id}, "
                                   f"{quoted('not-' + run_owner)})").stdout.strip(), "f")
        # Its replica is frozen (a paused VM, a stalled node) past the lease: the other replica
        # records the run interrupted. The run itself goes on meanwhile.
        frozen = self.replicas[owner].proc.pid
        self.stopped.append(frozen)
        os.kill(frozen, signal.SIGSTOP)
        wait_stopped(frozen)
        row = self.wait_for_rows(f"id = {run_id} AND state = 'interrupted'", timeout=30)[0]
        self.assertEqual(self.psql(f"SELECT lastcall.run_is_current({run_id}, "
                                   f"{quoted(run_owner)})").stdout.strip(), "f")
        self.open_gate()
        plain, flag = self.fifo.expect_prefix("stale ", timeout=30).split()
        with open(os.path.join(self.dir, "stale.err")) as f:
            err = f.read()
        self.assertEqual((plain, flag), ("1", "1"),
                         f"`lastcall runs check` in run {run_id}, recorded {row['state']} "
                         f"({row['reason']}): exit {plain} (ledger from the environment), {flag} "
                         f"(--ledger); stderr {err!r}")
        self.assertOneLine(err)
        os.kill(frozen, signal.SIGCONT)
        other = "b" if owner == "a" else "a"
        self.stop_replica(other)
        self.replicas[owner].signal(signal.SIGTERM)
        self.replicas[owner].wait(timeout=30)
        self.assertEqual(self.rows(f"id = {run_id}")[0]["state"], "interrupted")
        self.assertNoLeftovers()

    # The first run starts a process that outlives lastcall (its own session, SIGHUP ignored:
    # pdeathsig reaches only the run's leader) and says its pid.
    SPAWNING_JOB = f"""
lease = "{LEASE}s"
[jobs.spawner]
schedule = "@every 1s"
concurrency = "forbid"
on_interrupted = "none"
command = '''
mkdir "$ONCE" 2>/dev/null || exit 0
setsid nohup sh -c 'echo survivor $$ $LASTCALL_RUN_ID > "$EVENTS"; exec sleep 1000' </dev/null >/dev/null 2>&1 &
exec sleep 1000
'''
"""

    def test_a_restarted_replica_kills_what_its_killed_predecessors_run_left_running_before_it_claims_anything(self):
        self.env["ONCE"] = os.path.join(self.dir, "once")
        cfg = self.config(self.SPAWNING_JOB)
        self.start_replica("a", cfg)  # a plain process, not PID 1
        survivor, _, run_id = self.fifo.expect_prefix("survivor ", timeout=30).partition(" ")
        survivor, run_id = int(survivor), int(run_id)
        old_owner = self.wait_for_rows(f"id = {run_id} AND state = 'started'")[0]["owner"]
        # Whether the survivor was alive at the moment each row was inserted, read in the
        # inserting transaction (the server's superuser reads /proc): the order of the kill and
        # the restarted replica's claims, with no clock to compare.
        self.psql(f"""
CREATE TABLE public.probe (id bigint, owner text, survivor text);
CREATE FUNCTION public.probe_survivor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.probe VALUES
        (NEW.id, NEW.owner, pg_read_file('/proc/{survivor}/stat', 0, 512, true));
    RETURN NEW;
END $$;
CREATE TRIGGER probe_survivor AFTER INSERT ON lastcall.runs
    FOR EACH ROW EXECUTE FUNCTION public.probe_survivor();
""")
        self.kill_replica("a")
        self.assertIn(survivor, marked_pids(self.marker),
                      "the run's background process did not outlive its killed replica")
        self.start_replica("a", cfg)  # the same --replica-id
        new = f"replica = 'a' AND owner <> {quoted(old_owner)}"
        self.wait_for_rows(new, 3, timeout=30)
        probes = json.loads(self.psql(
            "SELECT coalesce(json_agg(p ORDER BY p.id), '[]') FROM public.probe p "
            f"WHERE owner <> {quoted(old_owner)}").stdout)
        self.assertTrue(probes)
        alive = [p["id"] for p in probes if proc_state(p["survivor"]) not in (None, "Z", "X")]
        self.assertEqual(alive, [],
                         f"the restarted replica inserted rows {alive} while pid {survivor}, left "
                         f"running by run {run_id} of its killed predecessor, was still alive")
        self.assertTrue(wait_exit(survivor, timeout=10),
                        f"pid {survivor} of run {run_id} still runs after the restart")
        # The predecessor's run is not left started.
        self.wait_for_rows(f"id = {run_id} AND state = 'interrupted'", timeout=LEASE + 10)
        self.stop_replica("a")
        self.assertNoLeftovers()


class DeploymentKeyTest(SemanticsTestCase):
    # Each run appends "DEPLOYMENT SCHEDULED_TIME RUN_ID" to $RAN: the deployment is in the
    # command, which therefore differs between them.
    JOB = """{cluster}
[jobs.report]
schedule = "@every 1s"
concurrency = "allow"
command = "echo {deployment} $LASTCALL_SCHEDULED_TIME $LASTCALL_RUN_ID >> $RAN"
"""
    WINDOW = 8  # fire times, once every replica is up

    def deployment(self, name, cluster):
        cluster_line = f'cluster = "{cluster}"' if cluster else ""
        return self.write_file(f"{name}.toml", self.JOB.format(cluster=cluster_line,
                                                               deployment=name))

    def ran(self):
        """Fire times each deployment ran, from the runs' own lines."""
        out = {}
        try:
            with open(self.env["RAN"]) as f:
                for line in f:
                    deployment, at, _ = line.split()
                    out.setdefault(deployment, []).append(epoch(at))
        except FileNotFoundError:
            pass
        return out

    def assertEachRanEveryFireTime(self, deployments):
        """Waits for WINDOW fire times after the first one both deployments ran, then asserts
        each ran each of them, once."""
        def enough():
            ran = self.ran()
            if set(ran) != set(deployments):
                return False
            start = max(min(t) for t in ran.values())
            return min(max(t) for t in ran.values()) > start + self.WINDOW
        self.wait_until(enough, 30, f"{deployments} did not each run {self.WINDOW} fire times")
        ran = self.ran()
        start = max(min(t) for t in ran.values())
        window = list(range(start + 1, start + self.WINDOW + 1))
        for deployment in deployments:
            got = sorted(t for t in ran[deployment] if window[0] <= t <= window[-1])
            self.assertEqual(got, window,
                             f"deployment {deployment} did not run each fire time of its job "
                             f"report once (ran {len(set(got))} of {len(window)})")

    def test_two_deployments_named_apart_on_one_database_each_run_every_fire_time_of_their_job_of_the_same_name(self):
        self.env["RAN"] = os.path.join(self.dir, "ran")
        blue, green = self.deployment("blue", "blue"), self.deployment("green", "green")
        for name, cfg in (("blue-1", blue), ("blue-2", blue), ("green-1", green),
                          ("green-2", green)):
            self.start_replica(name, cfg)
        self.assertEachRanEveryFireTime(["blue", "green"])
        runs = self.runs_json("--job", "report")
        self.assertTrue(all("cluster" in r for r in runs), runs[:3])
        self.assertEqual({r["cluster"] for r in runs}, {"blue", "green"})
        only_blue = self.runs_json("--job", "report", "--cluster", "blue")
        self.assertTrue(only_blue)
        self.assertEqual({r["cluster"] for r in only_blue}, {"blue"})
        self.assertEqual({r["replica"] for r in only_blue} - {"blue-1", "blue-2"}, set())
        table = self.lastcall_runs("--ledger", self.url)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("CLUSTER", table.stdout.splitlines()[0])
        for name in ("blue-1", "blue-2", "green-1", "green-2"):
            self.stop_replica(name)
        self.assertNoLeftovers()

    def test_two_deployments_without_a_name_whose_jobs_of_the_same_name_differ_each_run_every_fire_time(self):
        self.env["RAN"] = os.path.join(self.dir, "ran")
        self.start_replica("one", self.deployment("one", None))
        self.start_replica("two", self.deployment("two", None))
        self.assertEachRanEveryFireTime(["one", "two"])
        for name in ("one", "two"):
            self.stop_replica(name)
        self.assertNoLeftovers()

    def test_a_replica_whose_job_differs_from_a_live_replicas_under_the_same_cluster_name_refuses_to_start(self):
        self.env["RAN"] = os.path.join(self.dir, "ran")
        self.start_replica("blue-1", self.deployment("blue", "blue"))
        self.wait_for_rows("job = 'report' AND replica = 'blue-1'")
        # The same cluster name, the job report with another command.
        r = self.refused_start(self.deployment("other", "blue"), self.url, "blue-2")
        self.assertEqual(r.returncode, 1, r.stderr)
        line = self.assertOneLine(r.stderr)
        self.assertIn("report", line)
        self.assertIn("cluster", line.lower())
        self.assertEqual(self.rows("replica = 'blue-2'"), [])
        self.assertReplicasRunning()
        self.stop_replica("blue-1")
        self.assertNoLeftovers()


class SchemaTest(SemanticsTestCase):
    JOB = """
[jobs.tick]
schedule = "@every 1s"
command = "true"
"""

    def create_schema(self):
        """A first replica creates the schema, runs a job, and is stopped."""
        cfg = self.config(self.JOB)
        self.start_replica("a", cfg)
        self.wait_for_rows("job = 'tick' AND state = 'completed'")
        self.stop_replica("a")
        return cfg

    def test_a_schema_newer_than_this_lastcall_is_refused_at_start(self):
        cfg = self.create_schema()
        # The newest version recorded becomes 999 (a table of one row, or of a row per version).
        r = self.psql("UPDATE lastcall.schema_version SET version = 999 WHERE version = "
                      "(SELECT max(version) FROM lastcall.schema_version)", check=False)
        self.assertEqual(r.returncode, 0, f"no lastcall.schema_version to set: {r.stderr}")
        r = self.refused_start(cfg, self.url, "b")
        self.assertEqual(r.returncode, 1, r.stderr)
        line = self.assertOneLine(r.stderr)
        self.assertIn("999", line)
        self.assertIn("newer", line)
        self.assertEqual(self.rows("replica = 'b'"), [])

    def test_a_role_without_rights_on_the_runs_is_refused_at_start(self):
        cfg = self.create_schema()
        # Everything but the right to write the runs: lastcall.starts and the rest are writable,
        # so what refuses is the check of the runs themselves.
        role = f"limited_{self.db}"
        self.psql(f"""
CREATE ROLE {role} LOGIN;
GRANT USAGE ON SCHEMA lastcall TO {role};
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA lastcall TO {role};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA lastcall TO {role};
REVOKE INSERT, UPDATE, DELETE ON lastcall.runs FROM {role};
""")
        url = f"postgresql://{role}@/{self.db}?host={clustertest.SERVER.sock}"
        r = self.refused_start(cfg, url, "b")
        self.assertEqual(r.returncode, 1, r.stderr)
        line = self.assertOneLine(r.stderr)
        self.assertIn("permission", line.lower())
        self.assertEqual(self.rows("replica = 'b'"), [])


class TerminalRowsTest(SemanticsTestCase):
    TICK = """
[jobs.tick]
schedule = "@every 1s"
concurrency = "allow"
command = "true"
"""
    # A run that stays started (the first one), the later fire times skipped: non-terminal and
    # terminal rows of another job beside the ticks.
    LONG = """
[jobs.long]
schedule = "@every 1s"
concurrency = "forbid"
command = '''mkdir "$ONCE" 2>/dev/null || exit 0; exec sleep 1000'''
"""

    def test_an_update_of_a_terminal_rows_reason_exit_code_or_replica_and_its_delete_are_refused_by_the_database(self):
        self.start_replica("a", self.config(self.TICK))
        row = self.wait_for_rows("job = 'tick' AND state = 'completed'")[0]
        self.stop_replica("a")
        for change in ("reason = 'rewritten'", "exit_code = 3", "replica = 'elsewhere'"):
            r = self.psql(f"UPDATE lastcall.runs SET {change} WHERE id = {row['id']}", check=False)
            self.assertNotEqual(r.returncode, 0,
                                f"the database let psql change a completed run: SET {change}")
        r = self.psql(f"DELETE FROM lastcall.runs WHERE id = {row['id']}", check=False)
        self.assertNotEqual(r.returncode, 0, "the database let psql delete a completed run")
        self.assertEqual(self.rows(f"id = {row['id']}"), [row])

    def test_runs_prune_deletes_the_terminal_rows_that_ended_before_its_cutoff_and_nothing_else(self):
        before = 3  # seconds: runs prune --before 3s
        self.env["ONCE"] = os.path.join(self.dir, "once")
        self.start_replica("a", self.config(self.TICK + self.LONG))
        # Terminal rows that ended more than the cut-off ago, and newer ones as the replica goes on.
        self.wait_until(lambda: any(r["state"] in TERMINAL and r["ended_ms"] < now_ms() - (before + 1) * 1000
                                    for r in self.rows()), 30,
                        f"no terminal row ended {before + 1} s ago")
        snapshot = {r["id"]: r for r in self.rows()}
        t0 = now_ms()
        r = self.lastcall_runs("prune", "--before", f"{before}s", "--ledger", self.url)
        t1 = now_ms()
        self.assertEqual(r.returncode, 0, r.stderr)
        left = {x["id"] for x in self.rows()}
        removed = sorted(set(snapshot) - left)
        self.assertTrue(removed, f"runs prune --before {before}s removed nothing: {r.stdout!r}")
        for run_id in removed:
            row = snapshot[run_id]
            self.assertIn(row["state"], TERMINAL, f"runs prune removed a {row['state']} run")
            self.assertLess(row["ended_ms"], t1 - before * 1000,
                            f"runs prune --before {before}s removed a run ended after the cut-off")
        old = [i for i, x in snapshot.items()
               if x["state"] in TERMINAL and x["ended_ms"] < t0 - before * 1000]
        self.assertEqual(sorted(set(old) & left), [],
                         f"runs prune --before {before}s left terminal runs ended before it")
        self.assertTrue(any(x["state"] not in TERMINAL and i in left for i, x in snapshot.items()),
                        "no run still running was kept")
        self.assertIsNotNone(re.search(rf"\b{len(removed)}\b", r.stdout + r.stderr),
                             f"runs prune did not say it removed {len(removed)} runs: "
                             f"{r.stdout!r} {r.stderr!r}")
        self.stop_replica("a")
        self.assertNoLeftovers()

    def test_retention_makes_a_running_replica_prune_its_old_terminal_rows(self):
        self.start_replica("a", self.config('retention = "2s"\n' + self.TICK))
        first = self.wait_for_rows("job = 'tick' AND state = 'completed'")[0]["id"]
        self.wait_until(lambda: not self.rows(f"id = {first}"), 30,
                        f"run {first}, completed, was not pruned with retention = 2s")
        # What ended within the retention stays: the tick of a second ago.
        self.assertTrue(self.rows("job = 'tick' AND state = 'completed'"),
                        "every completed run was pruned, not only those older than 2 s")
        self.stop_replica("a")
        self.assertNoLeftovers()

    def test_runs_limit_shows_the_newest_rows_and_since_only_the_rows_created_within_it(self):
        since = 3  # seconds: runs --since 3s
        self.start_replica("a", self.config(self.TICK))
        self.wait_until(lambda: any(r["created_ms"] < now_ms() - (since + 1) * 1000
                                    for r in self.rows()), 30,
                        f"no row created {since + 1} s ago")
        snapshot = self.rows()
        t0 = now_ms()
        got = {r["id"] for r in self.runs_json("--since", f"{since}s")}
        t1 = now_ms()
        recent = {r["id"] for r in snapshot if r["created_ms"] >= t1 - since * 1000}
        old = {r["id"] for r in snapshot if r["created_ms"] < t0 - since * 1000}
        self.assertTrue(recent and old, snapshot)
        self.assertEqual(recent - got, set(), f"--since {since}s left out rows created within it")
        self.assertEqual(old & got, set(), f"--since {since}s showed rows created before it")
        self.stop_replica("a")
        newest = sorted(r["id"] for r in self.rows())[-3:]
        self.assertEqual(sorted(r["id"] for r in self.runs_json("--limit", "3")), newest)
        table = self.lastcall_runs("--ledger", self.url, "--limit", "3")
        self.assertEqual(table.returncode, 0, table.stderr)
        shown = [int(line.split()[0]) for line in table.stdout.splitlines()[1:]
                 if line.split() and line.split()[0].isdigit()]
        self.assertEqual(sorted(shown), newest, table.stdout)
        self.assertNoLeftovers()


if __name__ == "__main__":
    unittest.main()
