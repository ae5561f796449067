# SPDX-License-Identifier: Apache-2.0
"""Scheduled jobs: admission at shutdown, the run ledger, interrupted runs, atomic promotion,
recovery at the next start, crash consistency and state-dir errors.

Synchronisation: job lines on the FIFO, lastcall's exit (waitpid), and rows of the ledger
(polled with sqlite3, the ledger being the record under test)."""
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest

from lctest import (LASTCALL, LastcallTestCase, cgroup2_root, kill_marked, marked_pids,
                    new_marker)

STATES = {"scheduled", "started", "completed", "failed", "interrupted", "skipped"}


def ledger_rows(state_dir, where="1", args=()):
    db = sqlite3.connect(os.path.join(state_dir, "ledger.sqlite"), timeout=10)
    try:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(f"SELECT * FROM runs WHERE {where} ORDER BY id", args)]
    finally:
        db.close()


def wait_for_row(state_dir, where, args=(), timeout=20.0):
    """Polls the ledger until a row matches: the ledger row is the event being waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(state_dir, "ledger.sqlite")):
            rows = ledger_rows(state_dir, where, args)
            if rows:
                return rows
        time.sleep(0.02)
    raise TimeoutError(f"no ledger row with {where} {args} within {timeout}s")



class JobsTestCase(LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.state = os.path.join(self.dir, "state")
        self.out = os.path.join(self.dir, "out")
        os.mkdir(self.out)

    def write_config(self, text, name="jobs.toml"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def runs_cli(self, *args):
        r = subprocess.run([LASTCALL, "runs", "--state-dir", self.state, *args],
                           capture_output=True, text=True, timeout=30)
        return r


class StateDirectoryTest(JobsTestCase):
    """Where the ledger lives when --state-dir and the config say nothing (issue 19.8)."""

    JOB = '[jobs.tick]\nschedule = "@every 1s"\ncommand = "echo ran > $EVENTS"\n'

    def run_once(self, config, env):
        run = self.start(["--config", config], env=env)
        self.fifo.expect("ran")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())

    def ledger_named_by_runs(self, config, env):
        r = subprocess.run([LASTCALL, "runs", "--config", config], env=env, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tick", r.stdout)
        return r.stderr.split("lastcall runs: ledger ", 1)[1].strip()

    def test_systemds_state_directory_holds_the_ledger(self):
        sd = os.path.join(self.dir, "sd-state")
        os.mkdir(sd)
        # systemd lists one directory per StateDirectory= entry; the first is lastcall's.
        env = dict(self.env, STATE_DIRECTORY=sd + ":" + os.path.join(self.dir, "other"))
        cfg = self.write_config(self.JOB)
        self.run_once(cfg, env)
        self.assertTrue(os.path.exists(os.path.join(sd, "ledger.sqlite")))
        self.assertEqual(self.ledger_named_by_runs(cfg, env), os.path.join(sd, "ledger.sqlite"))

    def test_two_configs_on_one_host_keep_two_ledgers(self):
        env = dict(self.env)
        env.pop("STATE_DIRECTORY", None)
        ledgers = []
        for name in ("a.toml", "b.toml"):
            cfg = self.write_config(self.JOB, name)
            self.run_once(cfg, env)
            ledger = self.ledger_named_by_runs(cfg, env)
            self.addCleanup(shutil.rmtree, os.path.dirname(ledger), True)
            self.assertTrue(os.path.exists(ledger))
            self.assertTrue(os.path.basename(os.path.dirname(ledger)).startswith(name[0] + "-"))
            ledgers.append(ledger)
        self.assertNotEqual(ledgers[0], ledgers[1])


class LazyLoadingTest(JobsTestCase):
    """SQLite costs nothing until a ledger opens (issue 18: unused features cost no memory)."""

    def linkage(self):
        """readelf's program headers and dynamic section of the binary: INTERP names a dynamic
        binary, libsqlite3 one that links SQLite."""
        return subprocess.run(["readelf", "-d", "-l", LASTCALL], capture_output=True,
                              text=True).stdout

    def mapped_files(self, pid):
        with open(f"/proc/{pid}/maps") as f:
            return {line.split()[-1] for line in f if "/" in line}

    def test_a_run_without_jobs_maps_neither_sqlite_nor_libm(self):
        # A LASTCALL_SHARED_DEPS build (the sanitizers') links SQLite as a shared library on
        # purpose; the default and static builds are the ones users run.
        if "libsqlite3" in self.linkage():
            self.skipTest("this build links SQLite (LASTCALL_SHARED_DEPS)")
        run = self.start(["--", "sh", "-c", 'echo up > "$EVENTS"; exec sleep 60'])
        self.fifo.expect("up")
        mapped = self.mapped_files(run.proc.pid)
        self.assertEqual([m for m in mapped if "libsqlite3" in m or "/libm." in m], [], mapped)
        run.signal(signal.SIGTERM)
        run.wait()

    def test_sqlite_is_loaded_when_the_ledger_opens_and_records_the_run(self):
        config = self.write_config("""
[jobs.once]
schedule = "@every 1s"
overlap = "skip"
command = "echo ran > $EVENTS; exec sleep 60"
""")
        run = self.start(["--config", config, "--state-dir", self.state])
        self.fifo.expect("ran")
        wait_for_row(self.state, "job = 'once' AND state = 'started'")
        mapped = self.mapped_files(run.proc.pid)
        if any("/libc.so" in m for m in mapped):  # the default binary; the static one has it linked
            self.assertTrue(any("libsqlite3.so" in m for m in mapped), mapped)
        run.signal(signal.SIGTERM)
        run.wait()
        self.assertEqual(ledger_rows(self.state, "job = 'once'")[0]["state"], "interrupted")


    def test_without_libsqlite3_a_config_with_jobs_stops_at_start_with_one_line_naming_the_package(self):
        linkage = self.linkage()
        if "libsqlite3" in linkage or "INTERP" not in linkage:
            self.skipTest("this binary has SQLite linked in (static, or LASTCALL_SHARED_DEPS)")
        if not shutil.which("unshare"):
            self.skipTest("needs unshare(1)")
        lib = os.path.realpath("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")
        found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        for line in found.splitlines():
            if "libsqlite3.so.0 " in line and "=>" in line:
                lib = os.path.realpath(line.split("=>")[1].strip())
        if not os.path.exists(lib):
            self.skipTest("libsqlite3.so.0 not found")
        config = self.write_config("""
[jobs.a]
schedule = "@every 1h"
command = "true"
""")
        # In a mount namespace of its own the library is an empty file: dlopen fails as it would
        # on a machine without libsqlite3-0.
        script = 'mount --bind /dev/null "$1" && shift && exec "$@"'
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                            "sh", lib, LASTCALL, "--config", config, "--state-dir", self.state,
                            "--", "true"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("the run ledger needs SQLite (apt-get install libsqlite3-0)", lines[0])


class ShutdownTest(JobsTestCase):
    def test_job_fired_during_shutdown_is_skipped_and_one_running_at_grace_end_is_interrupted(self):
        # The job ignores SIGTERM, so it is still running when the grace ends. The drain delay
        # keeps lastcall in shutdown across several fire times of the 1s schedule.
        config = self.write_config(f"""
[jobs.stubborn]
schedule = "@every 1s"
command = "trap '' TERM; echo started $LASTCALL_RUN_ID > $EVENTS; exec sleep 60"
""")
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--config", config, "--state-dir", self.state, "--grace", "3s",
                          "--drain-delay", "2s", "--report", report])
        line = self.fifo.readline()
        run_id = int(line.split()[1])
        # The job can write its line before lastcall has recorded `started`: wait for the row.
        wait_for_row(self.state, "id = ? AND state = 'started'", (run_id,))
        term_ms = int(time.time() * 1000)
        run.signal(signal.SIGTERM)
        run.wait()

        rows = {r["id"]: r for r in ledger_rows(self.state)}
        self.assertEqual(rows[run_id]["state"], "interrupted", rows[run_id])
        self.assertEqual(rows[run_id]["reason"], "grace expired at shutdown")
        refused = [r for r in rows.values()
                   if r["state"] == "skipped" and r["reason"] == "shutting down"]
        self.assertGreaterEqual(len(refused), 2, rows)  # 3s of shutdown, a fire each second
        for r in refused:
            self.assertGreaterEqual(r["created_ms"], term_ms - 5)
            self.assertIsNone(r["pid"])
        started_late = [r for r in rows.values()
                        if r["started_ms"] is not None and r["started_ms"] >= term_ms]
        self.assertEqual(started_late, [], "a run started after the drain began")
        with open(report) as f:
            jobs = json.load(f)["jobs"]
        self.assertEqual([r["id"] for r in jobs["interrupted_runs"]], [run_id])
        self.assertEqual(jobs["skipped_at_shutdown"], len(refused))
        self.assertNoLeftovers()

    def test_a_job_that_left_lastcalls_cgroup_is_still_killed_at_grace_end_and_recorded_interrupted(self):
        # The job moves itself out of lastcall's cgroups (to the root). It is still a descendant
        # of lastcall (a subreaper), so the /proc walk finds it: it is killed with the rest at
        # the end of the grace, recorded interrupted, and nothing of it is promoted.
        root = cgroup2_root()
        if os.geteuid() != 0 or not root:
            self.skipTest("needs root and a cgroup2 hierarchy")
        config = self.write_config(f"""
[jobs.escapee]
schedule = "@every 1s"
output = "{self.out}/result.txt"
command = '''trap '' TERM; echo $$ > {root}/cgroup.procs; echo data > $LASTCALL_OUTPUT; echo started $LASTCALL_RUN_ID > $EVENTS; while :; do sleep 0.1; done'''
""")
        run = self.start(["--config", config, "--state-dir", self.state, "--grace", "1s",
                          "--tracker", "cgroup"])
        run_id = int(self.fifo.readline().split()[1])
        run.signal(signal.SIGTERM)
        run.wait()
        row = ledger_rows(self.state, "id = ?", (run_id,))[0]
        self.assertEqual(row["state"], "interrupted")
        self.assertEqual(row["reason"], "grace expired at shutdown")
        self.assertFalse(os.path.exists(f"{self.out}/result.txt"), "an interrupted run promoted")
        wm = sqlite3.connect(os.path.join(self.state, "ledger.sqlite")).execute(
            "SELECT count(*) FROM watermarks").fetchone()[0]
        self.assertEqual(wm, 0)
        self.assertNoLeftovers()


class PromotionTest(JobsTestCase):
    def test_output_is_promoted_before_completed_and_the_watermark_reaches_the_next_run(self):
        config = self.write_config(f"""
[jobs.export]
schedule = "@every 1s"
output = "{self.out}/export.csv"
verify = "grep -q '^row' \\"$1\\""
command = "echo \\"$LASTCALL_RUN_ID $LASTCALL_SCHEDULED_TIME wm=$LASTCALL_WATERMARK\\" > $EVENTS; echo row-$LASTCALL_RUN_ID > $LASTCALL_OUTPUT"
""")
        run = self.start(["--config", config, "--state-dir", self.state])
        first_id, first_time, first_wm = self.fifo.readline().split()
        self.assertEqual(first_wm, "wm=")
        second_id, _, second_wm = self.fifo.readline().split()
        # The second run sees the first one's scheduled time: it was completed and promoted.
        self.assertEqual(second_wm, "wm=" + first_time)
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        first = ledger_rows(self.state, "id = ?", (int(first_id),))[0]
        self.assertEqual(first["state"], "completed")
        with open(f"{self.out}/export.csv") as f:
            content = f.read()
        last_completed = max(r["id"] for r in ledger_rows(self.state, "state = 'completed'"))
        self.assertEqual(content, f"row-{last_completed}\n")

    def test_failed_verify_or_missing_output_leaves_the_final_name_untouched(self):
        final = f"{self.out}/report.txt"
        with open(final, "w") as f:
            f.write("previous good artifact\n")
        config = self.write_config(f"""
[jobs.badverify]
schedule = "@every 1s"
output = "{final}"
verify = ["/bin/sh", "-c", "echo verify $1 > $EVENTS; exit 3"]
command = "echo broken > $LASTCALL_OUTPUT"

[jobs.nooutput]
schedule = "@every 1s"
output = "{self.out}/never.txt"
command = "echo nooutput ran > $EVENTS"

[jobs.empty]
schedule = "@every 1s"
output = "{self.out}/empty.txt"
command = ": > $LASTCALL_OUTPUT; echo empty ran > $EVENTS"
""")
        run = self.start(["--config", config, "--state-dir", self.state])
        seen = set()
        while seen != {"verify", "nooutput", "empty"}:
            seen.add(self.fifo.readline().split()[0])
        wait_for_row(self.state, "job = 'badverify' AND state = 'failed'")
        wait_for_row(self.state, "job = 'nooutput' AND state = 'failed'")
        wait_for_row(self.state, "job = 'empty' AND state = 'failed'")
        run.signal(signal.SIGTERM)
        run.wait()
        with open(final) as f:
            self.assertEqual(f.read(), "previous good artifact\n")
        self.assertFalse(os.path.exists(f"{self.out}/never.txt"))
        self.assertFalse(os.path.exists(f"{self.out}/empty.txt"))
        bad = ledger_rows(self.state, "job = 'badverify' AND state = 'failed'")[0]
        self.assertIn("verify exited with code 3", bad["reason"])
        self.assertIn("did not write its output",
                      ledger_rows(self.state, "job = 'nooutput' AND state = 'failed'")[0]["reason"])
        self.assertIn("is empty",
                      ledger_rows(self.state, "job = 'empty' AND state = 'failed'")[0]["reason"])
        self.assertEqual(ledger_rows(self.state, "state = 'completed'"), [])


class RecoveryTest(JobsTestCase):
    def crash_during_run(self, policy):
        """Starts lastcall, waits for the job to stage a partial output, SIGKILLs lastcall."""
        config = self.write_config(f"""
[jobs.work]
schedule = "@every 1s"
on_interrupted = "{policy}"
output = "{self.out}/work.txt"
command = '''if [ -e "${{LASTCALL_RESUME_FROM:-/nonexistent}}" ]; then s=had-staging; else s=fresh; fi; echo partial > $LASTCALL_OUTPUT; echo run $LASTCALL_RUN_ID $s > $EVENTS; exec sleep 60'''
""")
        run = self.start(["--config", config, "--state-dir", self.state, "--tracker", "proc"])
        first = int(self.fifo.readline().split()[1])
        run.proc.kill()
        run.wait()
        kill_marked(self.marker)  # what pdeathsig did not reach
        return config, first

    def test_retry_runs_again_at_once_and_keeps_the_staging_file(self):
        config, first = self.crash_during_run("retry")
        run = self.start(["--config", config, "--state-dir", self.state, "--tracker", "proc"])
        _, retry_id, staging = self.fifo.readline().split()
        self.assertEqual(staging, "had-staging")
        row = ledger_rows(self.state, "id = ?", (first,))[0]
        self.assertEqual(row["state"], "interrupted")
        self.assertIn("lastcall stopped before the run ended", row["reason"])
        self.assertEqual(row["recovery"], "retried")
        self.assertEqual(ledger_rows(self.state, "id = ?", (int(retry_id),))[0]["retry_of"], first)
        run.signal(signal.SIGKILL)
        run.wait()

    def test_cleanup_retry_removes_the_staging_file_before_the_retry(self):
        config, first = self.crash_during_run("cleanup-retry")
        run = self.start(["--config", config, "--state-dir", self.state, "--tracker", "proc"])
        _, retry_id, staging = self.fifo.readline().split()
        self.assertEqual(staging, "fresh")
        self.assertEqual(ledger_rows(self.state, "id = ?", (int(retry_id),))[0]["retry_of"], first)
        run.signal(signal.SIGKILL)
        run.wait()

    def test_hold_runs_nothing_until_the_run_is_released(self):
        config, first = self.crash_during_run("hold")
        staging = f"{self.out}/.work.txt.{first}.lastcall-staging"
        run = self.start(["--config", config, "--state-dir", self.state, "--tracker", "proc"])
        # Two fire times pass as `skipped: held`, and the staging file is kept for inspection.
        wait_for_row(self.state, "job = 'work' AND state = 'skipped' AND reason LIKE 'held:%' "
                                 "AND id > ? + 1", (first,))
        self.assertEqual(ledger_rows(self.state, "state = 'started'"), [])
        self.assertTrue(os.path.exists(staging))
        r = self.runs_cli("release", str(first))
        self.assertEqual(r.returncode, 0, r.stderr)
        line = self.fifo.readline().split()
        retry = ledger_rows(self.state, "id = ?", (int(line[1]),))[0]
        self.assertEqual(retry["retry_of"], first)
        self.assertEqual(ledger_rows(self.state, "id = ?", (first,))[0]["recovery"], "retried")
        r = self.runs_cli("release", str(first))
        self.assertEqual(r.returncode, 1)  # already retried: nothing to release
        run.signal(signal.SIGKILL)
        run.wait()

    def test_none_never_retries_and_the_job_runs_again_at_its_next_fire_time(self):
        config, first = self.crash_during_run("none")
        run = self.start(["--config", config, "--state-dir", self.state, "--tracker", "proc"])
        _, next_id, staging = self.fifo.readline().split()
        self.assertEqual(staging, "fresh")  # a new run of a new fire time, not a retry
        self.assertIsNone(ledger_rows(self.state, "id = ?", (int(next_id),))[0]["retry_of"])
        row = ledger_rows(self.state, "id = ?", (first,))[0]
        self.assertEqual((row["state"], row["recovery"]), ("interrupted", "none"))
        self.assertEqual(ledger_rows(self.state, "retry_of IS NOT NULL"), [])
        run.signal(signal.SIGKILL)
        run.wait()



class CrashConsistencyTest(unittest.TestCase):
    ITERATIONS = 200
    LANES = 8

    JOB = """
[jobs.{name}]
schedule = "* * * * * *"
on_interrupted = "{policy}"
output = "{out}/{name}.dat"
verify = '''test "$(head -n1 "$1")" = "run $LASTCALL_RUN_ID" && test "$(tail -n1 "$1")" = END && test $(wc -l < "$1") -eq 102'''
command = '''exec > "$LASTCALL_OUTPUT"; echo "run $LASTCALL_RUN_ID"; for k in 1 2 3 4 5; do for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo "line $k.$i"; done; sleep 0.0$k; done; echo END'''
"""

    def check_artifact(self, path):
        with open(path) as f:
            lines = f.read().split("\n")
        self.assertEqual(lines[-1], "", f"{path}: no final newline")
        lines = lines[:-1]
        self.assertEqual(len(lines), 102, f"{path}: partial artifact")
        self.assertEqual(lines[-1], "END", f"{path}: partial artifact")
        self.assertTrue(lines[0].startswith("run "))
        return int(lines[0].split()[1])

    @staticmethod
    def kill_and_reap(marker):
        """Kills what the killed lastcall left and waits until it is gone: a child caught between
        fork and exec still holds the ledger lock, and the next lastcall would find it taken."""
        kill_marked(marker)
        while marked_pids(marker):
            time.sleep(0.01)
            kill_marked(marker)

    @staticmethod
    def max_run_id(state):
        if not os.path.exists(os.path.join(state, "ledger.sqlite")):
            return 0
        db = sqlite3.connect(os.path.join(state, "ledger.sqlite"), timeout=10)
        try:
            return db.execute("SELECT coalesce(max(id), 0) FROM runs").fetchone()[0]
        except sqlite3.OperationalError:
            return 0  # the schema is not there yet
        finally:
            db.close()

    @staticmethod
    def wait_for_run(state, where, newest, proc):
        """Polls the ledger (the row is the event) until a run newer than `newest` matches."""
        path = os.path.join(state, "ledger.sqlite")
        while proc.poll() is None:
            if os.path.exists(path):
                try:
                    db = sqlite3.connect(path, timeout=10)
                    try:
                        if db.execute(f"SELECT 1 FROM runs WHERE {where}", (newest,)).fetchone():
                            return
                    finally:
                        db.close()
                except sqlite3.OperationalError:
                    pass  # the schema is being created
            time.sleep(0.01)
        raise AssertionError(f"lastcall exited ({proc.returncode}) before a run with {where}")

    def lane(self, index, iterations, results):
        rng = random.Random(1000 + index)
        base = tempfile.mkdtemp(prefix=f"lctest-crash{index}-")
        state, out = os.path.join(base, "state"), os.path.join(base, "out")
        os.mkdir(out)
        config = os.path.join(base, "jobs.toml")
        with open(config, "w") as f:
            for name, policy in (("alpha", "retry"), ("beta", "cleanup-retry"),
                                 ("gamma", "retry")):
                f.write(self.JOB.format(name=name, policy=policy, out=out))
        marker = new_marker()
        env = dict(os.environ, LCTEST_MARKER=marker)
        try:
            for i in range(iterations):
                newest = self.max_run_id(state)
                p = subprocess.Popen([LASTCALL, "--config", config, "--state-dir", state,
                                      "--tracker", "proc", "--log-level", "warn"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                # The kill moments are chosen from events, not from the clock, so that a slow
                # (sanitized, loaded) machine hits the same moments: anywhere (recovery, idle),
                # inside a run this process started, and just after a run of it completed.
                mode = i % 3
                if mode == 0:
                    time.sleep(rng.uniform(0.0, 0.5))
                elif mode == 1:
                    self.wait_for_run(state, "state = 'started' AND id > ?", newest, p)
                    time.sleep(rng.uniform(0.0, 0.05))  # a run sleeps 0.15 s in all
                else:
                    self.wait_for_run(state, "state = 'completed' AND id > ?", newest, p)
                    time.sleep(rng.uniform(0.0, 0.3))
                p.kill()
                p.wait()
                self.kill_and_reap(marker)
            # One ordinary start afterwards: recovery turns what the last kill left open into
            # interrupted, and a clean stop leaves nothing open.
            p = subprocess.Popen([LASTCALL, "--config", config, "--state-dir", state,
                                  "--tracker", "proc", "--grace", "200ms", "--log-level", "warn"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # The start's own ledger write is the event: a row in `starts` from this pid.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    db = sqlite3.connect(os.path.join(state, "ledger.sqlite"), timeout=10)
                    n = db.execute("SELECT count(*) FROM starts WHERE pid = ?", (p.pid,)).fetchone()
                    db.close()
                    if n[0]:
                        break
                except sqlite3.OperationalError:
                    pass
                time.sleep(0.02)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)
            results[index] = (state, out, err.decode(errors="replace"))
        finally:
            kill_marked(marker)

    def test_sigkill_at_random_moments_never_leaves_a_partial_artifact_or_a_false_completed(self):
        results = {}
        per_lane = self.ITERATIONS // self.LANES
        threads = [threading.Thread(target=self.lane, args=(i, per_lane, results))
                   for i in range(self.LANES)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), self.LANES)
        totals = {s: 0 for s in STATES}
        for state, out, err in results.values():
            db = sqlite3.connect(os.path.join(state, "ledger.sqlite"))
            self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            rows = db.execute("SELECT id, job, state, scheduled_at FROM runs").fetchall()
            for _, _, st, _ in rows:
                self.assertIn(st, STATES)
                totals[st] += 1
            open_runs = [r for r in rows if r[2] in ("scheduled", "started")]
            self.assertEqual(open_runs, [], f"runs left open after a clean stop: {err}")
            by_id = {r[0]: r for r in rows}
            for job in ("alpha", "beta", "gamma"):
                final = os.path.join(out, job + ".dat")
                completed = [r for r in rows if r[1] == job and r[2] == "completed"]
                if not completed:
                    continue
                # No run is completed without its artifact at the final name...
                self.assertTrue(os.path.exists(final), f"{job}: completed but no artifact")
                artifact_run = self.check_artifact(final)  # ...and that artifact is whole
                # ...and the artifact is never older than the newest completed record (promote
                # comes first; a kill between rename and record leaves the run interrupted).
                self.assertGreaterEqual(artifact_run, max(r[0] for r in completed))
                self.assertIn(by_id[artifact_run][2], ("completed", "interrupted"))
                wm = db.execute("SELECT scheduled_at FROM watermarks WHERE job = ?",
                                (job,)).fetchone()
                self.assertEqual(wm[0], max(r[3] for r in completed))
            for name in os.listdir(out):
                if not name.startswith("."):
                    self.check_artifact(os.path.join(out, name))
            db.close()
        # The kills must have hit runs in flight and let others complete, or nothing was tested.
        # A third of the kills waits for a completed run, a third for a started one: the counts
        # follow from the events waited for, not from how fast the machine is.
        per_lane = self.ITERATIONS // self.LANES
        self.assertGreaterEqual(totals["completed"], self.LANES * (per_lane // 3), totals)
        self.assertGreater(totals["interrupted"], 0, totals)
        for state, out, _ in results.values():
            shutil.rmtree(os.path.dirname(state), ignore_errors=True)


class StateDirTest(JobsTestCase):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("mounting a tmpfs needs root")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        self.config = self.write_config("""
[jobs.tick]
schedule = "@every 1s"
command = "echo job ran > $EVENTS"
""")

    def tearDown(self):
        subprocess.run(["umount", self.mnt], capture_output=True)
        super().tearDown()

    def assert_refused_at_start(self, expected):
        run = self.start(["--config", self.config, "--state-dir", self.mnt + "/state", "--",
                          "sh", "-c", "echo main ran > $EVENTS"])
        self.assertEqual(run.wait(), 1)
        out = run.output()
        self.assertIn("run ledger", out)
        self.assertIn(self.mnt, out)
        self.assertIn(expected, out)
        self.assertNotIn("spawned", out)
        with self.assertRaises(TimeoutError):  # neither the main command nor the job ran
            self.fifo.readline(timeout=0.5)

    def test_full_state_dir_fails_at_start_with_the_reason(self):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", self.mnt], check=True)
        os.mkdir(self.mnt + "/state")
        try:
            with open(self.mnt + "/filler", "wb") as f:
                while True:
                    f.write(b"x" * 4096)
                    f.flush()
        except OSError:
            pass  # ENOSPC: the filesystem is full, which is the point
        self.assert_refused_at_start("full")

    def test_read_only_state_dir_fails_at_start_with_the_reason(self):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", self.mnt], check=True)
        os.mkdir(self.mnt + "/state")
        subprocess.run(["mount", "-o", "remount,ro", self.mnt], check=True)
        self.assert_refused_at_start("Read-only file system")


class ConfigErrorTest(JobsTestCase):
    def assert_usage_error(self, args, expected):
        r = subprocess.run([LASTCALL, *args, "--state-dir", self.state, "--", "sh", "-c",
                            "echo main ran > $EVENTS"], capture_output=True, text=True,
                           env=self.env, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().split("\n")
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(expected, lines[0])
        self.assertFalse(os.path.exists(self.state), "the ledger was opened before the check")
        with self.assertRaises(TimeoutError):
            self.fifo.readline(timeout=0.2)

    def test_bad_schedule_names_file_line_and_key(self):
        path = self.write_config('[jobs.ok]\nschedule = "@hourly"\ncommand = "true"\n\n'
                                 '[jobs.bad]\ncommand = "true"\nschedule = "61 * * * *"\n')
        self.assert_usage_error(["--config", path], f"{path}:7: jobs.bad.schedule: minute")

    def test_unknown_key_and_bad_enum_are_refused(self):
        path = self.write_config('[jobs.x]\nschedule = "@hourly"\ncommand = "true"\n'
                                 'overlap = "sometimes"\n')
        self.assert_usage_error(["--config", path], f"{path}:4: jobs.x.overlap: expected")
        path = self.write_config('[jobs.x]\nschedule = "@hourly"\ncommand = "true"\n'
                                 'retries = 3\n', "b.toml")
        self.assert_usage_error(["--config", path], f"{path}:4: jobs.x.retries: unknown key")

    def test_a_config_from_a_pipe_gives_its_services_and_its_jobs(self):
        # One read for both: the services' loader emptied the pipe and the jobs' loader found
        # nothing ("defines no service and no job"), or ran the services without the jobs.
        config = ('[services.svc]\ncommand = "sleep 30"\n\n'
                  '[jobs.nightly]\nschedule = "17 3 * * *"\ncommand = "true"\n')
        script = 'c=$1; shift; exec "$@" --config <(printf "%s" "$c") -- true'
        r = subprocess.run(["bash", "-c", script, "bash", config, LASTCALL, "-v", "--state-dir",
                            self.state], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("job nightly: schedule '17 3 * * *'", r.stderr)
        self.assertRegex(r.stderr, r"service svc\b")

    def test_a_cron_d_directory_is_read_in_the_system_format_with_stable_names(self):
        crond = os.path.join(self.dir, "cron.d")
        os.mkdir(crond)
        with open(os.path.join(crond, "php"), "w") as f:
            f.write("# name: sessionclean\n09,39 * * * * root /usr/lib/php/sessionclean\n")
        with open(os.path.join(crond, "backup"), "w") as f:
            f.write("SHELL=/bin/sh\n0 3 * * * nobody /usr/local/bin/backup --all\n")
        with open(os.path.join(crond, "backup.dpkg-old"), "w") as f:
            f.write("0 4 * * * nobody /usr/local/bin/stale\n")  # cron skips such names
        r = subprocess.run([LASTCALL, "jobs", "--crontab", crond], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        heads = [line for line in r.stdout.splitlines() if not line.startswith(" ")]
        self.assertEqual(len(heads), 2, r.stdout)
        self.assertRegex(heads[0], r"^backup-[0-9a-f]{8}  \(.*cron.d/backup:2\).*user=nobody")
        self.assertRegex(heads[1], r"^sessionclean  \(.*cron.d/php:2\).*user=root")
        self.assertNotIn("stale", r.stdout)
        # Inserting a line above keeps the name (the ledger's history goes with it).
        with open(os.path.join(crond, "backup"), "w") as f:
            f.write("SHELL=/bin/sh\n# new\n*/5 * * * * nobody /bin/true\n"
                    "0 3 * * * nobody /usr/local/bin/backup --all\n")
        again = subprocess.run([LASTCALL, "jobs", "--crontab", crond], capture_output=True,
                               text=True, timeout=30).stdout
        self.assertIn(heads[0].split()[0] + "  (", again)

    def test_bad_crontab_line_names_file_and_line(self):
        path = self.write_config("# nightly\nSHELL=/bin/sh\n0 3 * * * /bin/true\n"
                                 "0 25 * * * /bin/true\n", "crontab")
        self.assert_usage_error(["--crontab", path], f"{path}:4: schedule: hour")

    def test_jobs_command_prints_next_fire_times_and_services_tables_are_ignored(self):
        path = self.write_config('[services.web]\ncommand = ["sleep", "1"]\n\n'
                                 '[jobs.nightly]\nschedule = "CRON_TZ=UTC 30 2 * * *"\n'
                                 'command = "true"\n')
        r = subprocess.run([LASTCALL, "jobs", "--config", path, "--count", "2"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().split("\n")
        self.assertTrue(lines[0].startswith("nightly"), r.stdout)
        self.assertEqual(len(lines), 3)
        for line in lines[1:]:
            self.assertRegex(line.strip(), r"^\d{4}-\d\d-\d\dT02:30:00\+00:00\[UTC\]$")


class RunsCommandTest(JobsTestCase):
    def test_runs_lists_filters_and_prints_json(self):
        config = self.write_config("""
[jobs.ok]
schedule = "@every 1s"
command = "echo ok > $EVENTS"
[jobs.bad]
schedule = "@every 1s"
command = "echo bad > $EVENTS; exit 4"
""")
        run = self.start(["--config", config, "--state-dir", self.state])
        seen = set()
        while seen != {"ok", "bad"}:
            seen.add(self.fifo.readline())
        wait_for_row(self.state, "job = 'bad' AND state = 'failed'")
        wait_for_row(self.state, "job = 'ok' AND state = 'completed'")
        run.signal(signal.SIGTERM)
        run.wait()
        r = self.runs_cli("--json", "--job", "bad")
        self.assertEqual(r.returncode, 0, r.stderr)
        runs = json.loads(r.stdout)
        self.assertTrue(runs)
        self.assertEqual({x["job"] for x in runs}, {"bad"})
        failed = [x for x in runs if x["state"] == "failed"]
        self.assertEqual(failed[0]["exit_code"], 4)
        self.assertEqual(failed[0]["reason"], "exited with code 4")
        r = self.runs_cli("--state", "completed")
        self.assertEqual(r.returncode, 0, r.stderr)
        body = r.stdout.strip().split("\n")[1:]
        self.assertTrue(body)
        self.assertTrue(all(" ok " in l and "completed" in l for l in body), r.stdout)
        r = self.runs_cli("--state", "bogus")
        self.assertEqual(r.returncode, 2)

    def test_runs_without_a_ledger_says_where_else_to_look(self):
        empty = os.path.join(self.dir, "empty-state")
        os.mkdir(empty)
        env = dict(self.env, STATE_DIRECTORY=empty)
        r = subprocess.run([LASTCALL, "runs"], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(
            r.stderr.strip(),
            f"lastcall runs: no run ledger at {empty}/ledger.sqlite: No such file or directory (a "
            "run with --config or --crontab has a ledger of its own: pass the same --config or "
            "--crontab, or --state-dir)")


if __name__ == "__main__":
    unittest.main()
