# SPDX-License-Identifier: Apache-2.0
"""Issue 40: the record comes from the units. Every unit of work turned away at the drain is
counted as refused on its entry path (a job's fire time, a service's first start, a restart), and
a process that outlives SIGKILL is named in the report as `survived`, with its pid, state and
wchan, instead of passing for killed."""
import json
import os
import signal
import subprocess
import sys

from lctest import LASTCALL, LastcallTestCase
from test_jobs import ledger_rows
from test_services import LogReader


def read_report(path):
    with open(path) as f:
        return json.load(f)


class RefusalsCounted(LastcallTestCase):
    def config(self, text):
        path = os.path.join(self.dir, "lastcall.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_fire_times_turned_away_during_the_drain_are_counted_as_refused_job_fires(self):
        state = os.path.join(self.dir, "state")
        cfg = self.config("""
[jobs.tick]
schedule = "@every 1s"
command = 'echo ran > "$EVENTS"'
""")
        report = os.path.join(self.dir, "report.json")
        # The drain delay keeps intake closed across at least two fire times of the 1 s schedule.
        run = self.start(["--config", cfg, "--state-dir", state, "--drain-delay", "2500ms",
                          "--report", report, "--", "sleep", "1000"])
        self.assertEqual(self.fifo.readline(), "ran")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGTERM, run.output())  # sleep's own ending
        skipped = [r for r in ledger_rows(state)
                   if r["state"] == "skipped" and r["reason"] == "shutting down"]
        self.assertGreaterEqual(len(skipped), 1, run.output())
        fires = read_report(report)["admission"]["job_fires"]
        self.assertEqual(fires["refused"], len(skipped), fires)

    def test_services_waiting_for_a_start_or_a_restart_at_the_drain_are_counted_as_refused(self):
        cfg = self.config("""
[services.db]
command = 'echo db > "$EVENTS"; exec sleep 1000'
ready = { file = "never-there" }

[services.api]
command = "sleep 1000"
depends_on = ["db"]

[services.crash]
command = "exit 1"
restart = "always"
backoff = { initial = "1h" }
""")
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--config", cfg, "--report", report], self.env)
        self.assertEqual(self.fifo.readline(), "db")
        # api waits for db's readiness (pending), crash for its back-off: both due, neither runs.
        log.wait_for("service crash: restarting in 1h")
        log.proc.send_signal(signal.SIGTERM)
        self.assertEqual(log.finish(), 0, "\n".join(log.lines))
        admission = read_report(report)["admission"]
        self.assertEqual(admission["service_starts"]["refused"], 1, admission)
        self.assertEqual(admission["restarts"]["refused"], 1, admission)
        self.assertNoLeftovers()


def freezer_v1():
    """A cgroup v1 freezer hierarchy mounted for the test, or None where it cannot be."""
    where = os.path.join("/tmp", f"lastcall-freezer-{os.getpid()}")
    os.makedirs(where, exist_ok=True)
    r = subprocess.run(["mount", "-t", "cgroup", "-o", "freezer", "lastcall-test", where],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(where)
        return None, r.stderr.strip()
    return where, ""


class SurvivorNamed(LastcallTestCase):
    def test_a_process_that_survives_sigkill_is_named_in_the_report_with_its_state_and_wchan(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a cgroup v1 freezer needs root")
        root, why = freezer_v1()
        if root is None:
            self.skipTest(f"no cgroup v1 freezer here: {why}")
        group = os.path.join(root, f"frozen-{os.getpid()}")
        os.mkdir(group)

        def cleanup():
            # Thawed, the frozen process takes its pending SIGKILL and is gone.
            with open(os.path.join(group, "freezer.state"), "w") as f:
                f.write("THAWED")
            with open(os.path.join(group, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            while True:
                with open(os.path.join(group, "cgroup.procs")) as f:
                    if not f.read().split():
                        break
                os.sched_yield()
            os.rmdir(group)
            subprocess.run(["umount", root])
            os.rmdir(root)

        self.addCleanup(cleanup)
        report = os.path.join(self.dir, "report.json")
        # The main command's child moves itself into the freezer group and reports its pid; the
        # test freezes it. SIGKILL then stays pending: it cannot end a frozen v1 task.
        script = (f'sh -c \'echo $$ > {group}/cgroup.procs && echo "$$" > "$EVENTS" && '
                  'exec sleep 1000\' & wait')
        run = self.start(["--grace", "500ms", "--report", report, "--", "sh", "-c", script])
        frozen_pid = int(self.fifo.readline())
        with open(os.path.join(group, "freezer.state"), "w") as f:
            f.write("FROZEN")
        while True:
            with open(os.path.join(group, "freezer.state")) as f:
                if f.read().strip() == "FROZEN":
                    break
            os.sched_yield()
        run.signal(signal.SIGTERM)
        run.wait(timeout=60)
        r = read_report(report)
        self.assertTrue(r.get("abandoned"), r)
        survivors = [p for p in r["processes"] if p["ending"] == "survived"]
        self.assertEqual([p["pid"] for p in survivors], [frozen_pid], r["processes"])
        self.assertEqual(survivors[0]["state"], "D", survivors[0])
        # Where it sleeps: __refrigerator when the freeze woke it, or the sleep it was frozen in
        # (since 6.1 the freezer can freeze a sleeping task in place: hrtimer_nanosleep).
        self.assertRegex(survivors[0]["wchan"], r"^[a-z_][a-z0-9_.]*$", survivors[0])
        facts = [f for f in r["force_facts"] if f["kind"] == "abandoned"]
        self.assertEqual([f["count"] for f in facts], [1], r["force_facts"])
        self.assertRegex(run.output(), rf"survived SIGKILL .*pid {frozen_pid} ")
        text = subprocess.run([LASTCALL, "report", report, "--width", "120"],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"pid {frozen_pid} still running", text.stdout)
        self.assertRegex(text.stdout, r"survived SIGKILL \(state D, in [a-z_][a-z0-9_.]*\)")


if __name__ == "__main__":
    sys.exit("run with python3 -m unittest")
