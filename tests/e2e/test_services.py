# SPDX-License-Identifier: Apache-2.0
"""Issue 7: several services in one lastcall (--config with [services.*]): restart policies and
backoff, no restart once the shutdown began, dependency order both ways, the main service's exit
code, `lastcall status`, and config errors."""
import json
import glob
import os
import select
import signal
import stat
import subprocess
import time
import unittest

from lctest import LASTCALL, LastcallTestCase


class LogReader:
    """lastcall with its log on a pipe, read line by line as events (nothing is slept on)."""

    def __init__(self, args, env):
        self.proc = subprocess.Popen([LASTCALL] + args, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.lines = []
        self.buffer = b""

    def _fill(self, timeout):
        r, _, _ = select.select([self.proc.stderr], [], [], timeout)
        if not r:
            return False
        chunk = os.read(self.proc.stderr.fileno(), 65536)
        if not chunk:
            return False
        self.buffer += chunk
        *done, self.buffer = self.buffer.split(b"\n")
        self.lines += [line.decode(errors="replace") for line in done]
        return True

    def wait_for(self, text, timeout=20.0):
        """Index of the first log line containing text, reading more as needed."""
        deadline = time.monotonic() + timeout
        while True:
            for i, line in enumerate(self.lines):
                if text in line:
                    return i
            left = deadline - time.monotonic()
            if left <= 0 or not self._fill(left) and self.proc.poll() is not None:
                raise TimeoutError(f"no log line with {text!r}:\n" + "\n".join(self.lines))

    def finish(self, timeout=60):
        code = self.proc.wait(timeout=timeout)
        while self._fill(0.5):
            pass
        if self.buffer:
            self.lines.append(self.buffer.decode(errors="replace"))
        self.proc.stderr.close()
        return code


class Services(LastcallTestCase):
    def config(self, text):
        path = os.path.join(self.dir, "lastcall.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def report(self, path):
        with open(path) as f:
            return json.load(f)

    def service(self, report, name):
        return next(s for s in report["services"] if s["name"] == name)

    def test_restart_delays_grow_as_configured_up_to_the_cap(self):
        cfg = self.config("""
[services.crasher]
command = 'echo start > "$EVENTS"; exit 1'
restart = "on-failure"
backoff = { initial = "200ms", factor = 2, max = "800ms", reset_after = "10s" }
""")
        run = self.start(["--config", cfg])
        starts = []
        for _ in range(5):
            self.assertEqual(self.fifo.readline(), "start")
            starts.append(time.monotonic())
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        # The delay counts from each exit, and a reap, a spawn and a shell start come on top (on a
        # loaded machine, hundreds of ms): the lower bounds are tight, the upper ones only have
        # to tell the cap (0.8s) from the uncapped next delay (1.6s), so they leave it 0.7 s.
        for gap, expected in zip(gaps, [0.2, 0.4, 0.8, 0.8]):
            self.assertGreaterEqual(gap, expected - 0.02, gaps)
            self.assertLess(gap, expected + 0.7, gaps)
        self.assertNoLeftovers()

    def test_restart_no_never_restarts(self):
        cfg = self.config("""
[services.once]
command = 'echo start > "$EVENTS"; exit 1'
restart = "no"
backoff = { initial = "1ms" }

[services.stays]
command = "sleep 1000"
""")
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--config", cfg, "--report", report], self.env)
        self.assertEqual(self.fifo.readline(), "start")
        # The restart decision is logged with the exit itself, so the exit line is enough.
        log.wait_for("service once: exited with code 1")
        log.proc.send_signal(signal.SIGTERM)
        self.assertEqual(log.finish(), 0, "\n".join(log.lines))
        self.assertFalse(any("restarting" in line for line in log.lines), log.lines)
        r = self.report(report)
        self.assertEqual(self.service(r, "once")["starts"], 1)
        self.assertEqual(self.service(r, "once")["state"], "exited")
        self.assertEqual(r["service_starts_refused"], 0)
        self.assertNoLeftovers()

    def test_no_restart_is_started_once_the_shutdown_has_begun(self):
        cfg = self.config("""
[services.crasher]
command = 'echo start > "$EVENTS"; exit 3'
restart = "always"
backoff = { initial = "1ms", max = "2ms" }
restart_limit = { burst = 1000000 }  # a crash loop for as long as the test needs

[services.stays]
command = "sleep 1000"
""")
        # The crash loop runs as fast as the shell starts; the signal lands anywhere in it.
        for attempt in range(5):
            with self.subTest(attempt=attempt):
                log = LogReader(["--config", cfg, "--log-level", "debug"], self.env)
                for _ in range(10 + 7 * attempt):
                    self.fifo.readline()
                log.proc.send_signal(signal.SIGTERM)
                self.assertEqual(log.finish(), 0, "\n".join(log.lines))
                drain = log.wait_for("state running -> draining")
                late = [line for line in log.lines[drain:] if "service crasher: started" in line]
                self.assertEqual(late, [], "a restart was started after the shutdown began")
                self.assertNoLeftovers()
                while select.select([self.fifo.fd], [], [], 0)[0]:
                    os.read(self.fifo.fd, 65536)
                self.fifo.buffer = b""

    def test_a_service_starts_after_its_dependency_is_ready_and_stops_before_it(self):
        gate = os.path.join(self.dir, "gate")
        ready = os.path.join(self.dir, "a.ready")
        os.mkfifo(gate)
        # b is first in the file: only depends_on can make it wait for a. b's TERM handler is
        # slow, so if both were signalled at once, a's "a-stop" would come first. Each sets its
        # trap and starts its sleep before it writes anything: the SIGTERM may follow its last
        # line at once, and a handler that ran before `p=$!` left the sleep to the SIGKILL.
        cfg = self.config(f"""
[services.b]
command = '''trap 'sleep 0.3; echo b-stop > "$EVENTS"; kill $p; exit 0' TERM; sleep 1000 & p=$!; echo b-start > "$EVENTS"; wait'''
depends_on = ["a"]

[services.a]
command = '''trap 'echo a-stop > "$EVENTS"; kill $p; exit 0' TERM; echo a-start > "$EVENTS"; read x < {gate}; sleep 1000 & p=$!; echo a-ready > "$EVENTS"; touch {ready}; wait'''
ready = {{ file = "{ready}", interval = "20ms" }}
""")
        run = self.start(["--config", cfg])
        self.assertEqual(self.fifo.readline(), "a-start")
        with open(gate, "w") as g:
            g.write("go\n")
        self.assertEqual([self.fifo.readline() for _ in range(2)], ["a-ready", "b-start"])
        run.signal(signal.SIGTERM)
        self.assertEqual([self.fifo.readline() for _ in range(2)], ["b-stop", "a-stop"])
        self.assertEqual(run.wait(), 0, run.output())
        self.assertNoLeftovers()

    def test_a_service_ignoring_its_stop_signal_holds_back_the_rest_only_until_half_the_grace(self):
        # web ignores SIGTERM and depends on db; the main command is signalled after the
        # services. Held until web's grace (the global one) ran out, db and the main command
        # got no stop signal at all, only the SIGKILL at the end.
        cfg = self.config("""
[services.db]
command = '''trap 'echo db-stop > "$EVENTS"; kill $p; exit 0' TERM; sleep 1000 & p=$!; echo db-start > "$EVENTS"; wait'''

[services.web]
command = '''trap '' TERM; echo web-start > "$EVENTS"; while :; do sleep 0.1; done'''
depends_on = ["db"]
""")
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--config", cfg, "--grace", "6s", "--report", report, "--", "sh", "-c",
                          '''trap 'echo main-stop > "$EVENTS"; kill $p; exit 0' TERM; '''
                          '''sleep 1000 & p=$!; echo main-start > "$EVENTS"; wait'''])
        self.assertEqual({self.fifo.readline() for _ in range(3)},
                         {"db-start", "web-start", "main-start"})
        run.signal(signal.SIGTERM)
        # Due at half of the grace (3 s), with the other half to act on it.
        self.assertEqual({self.fifo.readline(timeout=30) for _ in range(2)}, {"db-stop", "main-stop"})
        run.wait()
        r = self.report(report)
        self.assertEqual(r["verdict"], "forced")
        self.assertTrue(self.service(r, "web")["forced"])
        self.assertFalse(self.service(r, "db")["forced"])
        self.assertNoLeftovers()

    def test_a_service_with_kill_scope_child_only_its_leader_gets_the_stop_signal_the_rest_is_killed_at_its_grace(self):
        # A master and its worker, both trapping SIGTERM. With kill_scope = "child" the leader
        # alone hears it (a master that stops its own workers); the worker, still running, is
        # killed at the service's grace and never runs its trap.
        cfg = self.config("""
[services.app]
command = '''sh -c 'trap "echo worker-term > \\"$EVENTS\\"; kill \\$p; exit 0" TERM; sleep 1000 & p=$!; echo worker-start > "$EVENTS"; wait' & trap 'echo leader-term > "$EVENTS"; exit 0' TERM; echo leader-start > "$EVENTS"; wait'''
kill_scope = "child"
grace = "1s"
""")
        run = self.start(["--config", cfg, "--grace", "10s"])
        self.assertEqual({self.fifo.readline() for _ in range(2)}, {"leader-start", "worker-start"})
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline(), "leader-term")
        run.wait()
        self.assertNotIn(b"worker-term", self.fifo.drain())
        out = run.output()
        self.assertIn("service app: sent SIGTERM to 1 process(es)", out)
        self.assertRegex(out, r"service app: still [0-9]+ process\(es\) at the end of its grace: sent SIGKILL to [1-9]")
        self.assertNoLeftovers()

    def test_services_killed_before_their_stop_signal_are_reported_forced_not_exited(self):
        # A second SIGTERM during the drain delay: nothing had its stop signal yet, and the
        # tree's SIGKILL ended both services. Their record said "exited" by themselves.
        cfg = self.config("""
[services.db]
command = '''echo db-start > "$EVENTS"; exec sleep 1000'''

[services.web]
command = '''echo web-start > "$EVENTS"; exec sleep 1000'''
depends_on = ["db"]
""")
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--config", cfg, "--grace", "60s", "--drain-delay", "30s", "--coalesce", "0",
                         "--report", report], self.env)
        try:
            self.assertEqual({self.fifo.readline() for _ in range(2)}, {"db-start", "web-start"})
            log.proc.send_signal(signal.SIGTERM)
            log.wait_for("stopping 2 service(s)")
            log.proc.send_signal(signal.SIGTERM)
            self.assertEqual(log.finish(), 137, "\n".join(log.lines))
        finally:
            if log.proc.poll() is None:
                log.proc.kill()
                log.proc.wait()
        r = self.report(report)
        self.assertEqual(r["verdict"], "forced")
        for name in ("db", "web"):
            svc = self.service(r, name)
            self.assertEqual((svc["state"], svc["forced"]), ("stopped", True), svc)
        self.assertNoLeftovers()

    def test_a_main_service_exiting_7_drains_the_rest_and_lastcall_exits_7(self):
        gate = os.path.join(self.dir, "gate")
        os.mkfifo(gate)
        cfg = self.config(f"""
[services.helper]
command = '''trap 'echo helper-stop > "$EVENTS"; kill $p; exit 0' TERM; sleep 1000 & p=$!; echo helper-start > "$EVENTS"; wait'''

[services.app]
command = 'echo app-start > "$EVENTS"; read x < {gate}; exit 7'
depends_on = ["helper"]
main = true
""")
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--config", cfg, "--report", report])
        # helper has no readiness probe, so app may start before helper's shell has written.
        self.assertEqual({self.fifo.readline() for _ in range(2)}, {"helper-start", "app-start"})
        with open(gate, "w") as g:
            g.write("go\n")
        self.assertEqual(self.fifo.readline(), "helper-stop")
        self.assertEqual(run.wait(), 7, run.output())
        r = self.report(report)
        self.assertEqual(r["exit_code"], 7)
        self.assertEqual(self.service(r, "app")["last_exit_code"], 7)
        self.assertEqual(self.service(r, "helper")["state"], "stopped")
        self.assertNoLeftovers()

    def test_a_main_service_whose_dependency_fails_ends_the_run_with_its_code(self):
        # It used to wait forever (a container that looked healthy), and a later stop was
        # reported clean with exit code 0.
        cfg = self.config(f"""
[services.db]
command = "exit 3"
ready = {{ file = "{self.dir}/db.ready" }}

[services.web]
command = ["sleep", "1000"]
depends_on = ["db"]
main = true
""")
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--config", cfg, "--report", report])
        self.assertEqual(run.wait(timeout=60), 3, run.output())
        r = self.report(report)
        self.assertEqual((r["exit_code"], self.service(r, "web")["state"]), (3, "failed"))
        self.assertIn("service web is main and can never start", run.output())

    def test_status_shows_each_service_from_a_private_state_file(self):
        runtime = os.path.join(self.dir, "runtime")
        os.mkdir(runtime, 0o700)
        env = dict(self.env, XDG_RUNTIME_DIR=runtime)
        cfg = self.config("""
[services.web]
command = 'echo up > "$EVENTS"; exec sleep 1000'

[services.flaky]
command = 'exit 1'
restart = "on-failure"
backoff = { initial = "1h" }
""")
        log = LogReader(["--config", cfg], env)
        self.assertEqual(self.fifo.readline(), "up")
        # The status file is rewritten on the state change, before the decision is logged.
        log.wait_for("service flaky: restarting in 1h")
        # Named by the instance (pid and a random part), not the pid alone: PID 1 is every
        # container's pid, and two containers sharing /run must not share a status file.
        files = glob.glob(os.path.join(runtime, "lastcall", f"{log.proc.pid}-*.status"))
        self.assertEqual(len(files), 1, files)
        state_file = files[0]
        self.assertEqual(stat.S_IMODE(os.stat(state_file).st_mode), 0o600)
        r = subprocess.run([LASTCALL, "status"], env=env, capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:]}
        self.assertEqual(rows["web"][2], "ready")
        self.assertTrue(rows["web"][1].isdigit())
        self.assertEqual(rows["flaky"][1:4], ["-", "backoff", "0"])
        # Selecting one instance: by a service's name, lastcall's pid, the config file, the
        # instance id; --json for scripts.
        instance = os.path.basename(state_file)[:-len(".status")]
        for sel, shown in (("web", ["web"]), (str(log.proc.pid), ["web", "flaky"]),
                           (cfg, ["web", "flaky"]), (instance[:12], ["web", "flaky"]),
                           (os.path.relpath(cfg), ["web", "flaky"])):
            with self.subTest(selector=sel):
                r = subprocess.run([LASTCALL, "status", "--json", sel], env=env,
                                   capture_output=True, text=True, timeout=10)
                self.assertEqual(r.returncode, 0, r.stderr)
                doc = json.loads(r.stdout)
                self.assertEqual(len(doc), 1)
                self.assertEqual(doc[0]["lastcall_pid"], log.proc.pid)
                self.assertEqual(doc[0]["instance"], instance)
                self.assertEqual(doc[0]["config"], os.path.realpath(cfg))
                self.assertEqual([s["name"] for s in doc[0]["services"]], shown)
        r = subprocess.run([LASTCALL, "status", "no-such-service"], env=env, capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no running lastcall matches 'no-such-service'", r.stderr)
        log.proc.send_signal(signal.SIGTERM)
        self.assertEqual(log.finish(), 0, "\n".join(log.lines))
        self.assertFalse(os.path.exists(state_file), "the status file outlived lastcall")
        r = subprocess.run([LASTCALL, "status"], env=env, capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(r.returncode, 1)

    def test_config_errors_name_file_line_and_key_and_start_nothing(self):
        cases = {
            "restart": ('[services.a]\ncommand = "touch {m}"\nrestart = "sometimes"\n',
                        ':3: services.a.restart: expected "no", "on-failure" or "always"'),
            "cycle": ('[services.a]\ncommand = "touch {m}"\ndepends_on = ["b"]\n'
                      '[services.b]\ncommand = "touch {m}"\ndepends_on = ["a"]\n',
                      ":6: services.b.depends_on: dependency cycle a -> b -> a"),
            "syntax": ('[services.a]\ncommand = "touch {m}\n', ":2: "),
        }
        for name, (text, needle) in cases.items():
            with self.subTest(name):
                marker_file = os.path.join(self.dir, "started-" + name)
                cfg = self.config(text.format(m=marker_file) + "[jobs.other]\nwhatever = 1\n")
                r = subprocess.run([LASTCALL, "--config", cfg], env=self.env, capture_output=True,
                                   text=True, timeout=10)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(cfg + needle, r.stderr)
                self.assertFalse(os.path.exists(marker_file))


    def test_a_config_with_nothing_to_run_and_no_command_is_a_usage_error_not_a_silent_wait(self):
        for text in ("", "# nothing here yet\n", "[services]\n"):
            with self.subTest(text=text):
                cfg = self.config(text)
                r = subprocess.run([LASTCALL, "--config", cfg], env=self.env, capture_output=True,
                                   text=True, timeout=10)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(cfg + ": defines no service and no job", r.stderr)
        # With a command, an empty config is fine: the command is the work.
        cfg = self.config("")
        r = subprocess.run([LASTCALL, "--config", cfg, "--", "true"], env=self.env,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_service_that_keeps_failing_ends_failed_and_its_dependents_say_why_they_wait(self):
        missing = os.path.join(self.dir, "no-such-dir")
        report = os.path.join(self.dir, "report.json")
        cfg = self.config(f"""
[services.api]
command = "sleep 1000"
workdir = "{missing}"
restart = "always"
backoff = {{ initial = "10ms" }}
restart_limit = {{ burst = 3, interval = "1m" }}

[services.web]
command = "sleep 1000"
depends_on = ["api"]

[services.edge]
command = "sleep 1000"
depends_on = ["web"]
""")
        log = LogReader(["--config", cfg, "--report", report], self.env)
        log.wait_for("service web: waiting for api")
        line = log.wait_for("service api: failed: 3 starts within 1m")
        log.wait_for("service web: not started: it depends on api, which failed")
        log.wait_for("service edge: not started: it depends on web, which failed")
        errors = [l for l in log.lines if "service api: working directory" in l]
        self.assertEqual(len(errors), 3, "\n".join(log.lines))
        self.assertIn(missing + ": No such file or directory", errors[0])
        log.proc.send_signal(signal.SIGTERM)
        log.finish()
        r = self.report(report)
        self.assertEqual(self.service(r, "api")["state"], "failed")
        self.assertEqual(self.service(r, "web")["state"], "failed")
        self.assertNoLeftovers()

    def test_restart_limit_errors_name_the_key(self):
        cfg = self.config('[services.a]\ncommand = "true"\nrestart_limit = { burst = 0 }\n')
        r = subprocess.run([LASTCALL, "--config", cfg], env=self.env, capture_output=True,
                           text=True, timeout=10)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(cfg + ":3: services.a.restart_limit.burst: expected a whole number", r.stderr)

if __name__ == "__main__":
    unittest.main()
