# SPDX-License-Identifier: Apache-2.0
"""`lastcall report` (issue 19.15): the JSON shutdown report drawn for people. A live forced
shutdown is drawn with its timeline and bars; recorded reports render exactly as committed
(tests/e2e/data/report-*.json -> .txt); bad input gets one line and exit 1 or 2."""
import json
import os
import pty
import re
import signal
import subprocess

from lctest import LASTCALL, LastcallTestCase

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def report(*args, stdin=subprocess.DEVNULL, input=None):
    return subprocess.run([LASTCALL, "report", *args], stdin=None if input is not None else stdin,
                          input=input, capture_output=True, text=True, timeout=30)


class ReportRendering(LastcallTestCase):
    def test_a_forced_shutdown_is_drawn_with_its_timeline_and_who_was_killed(self):
        path = os.path.join(self.dir, "report.json")
        # The main command exits on SIGTERM; its child ignores it and is SIGKILLed at grace end.
        script = ("trap 'exit 0' TERM; "
                  "sh -c \"trap '' TERM; echo stubborn > $EVENTS; exec sleep 1000\" & "
                  "wait")
        run = self.start(["--grace", "1s", "--report", path, "--pre-stop", "echo draining",
                          "--", "sh", "-c", script])
        self.assertEqual(self.fifo.readline(), "stubborn")
        run.signal(signal.SIGTERM)
        # The exit code is the main command's (it exited 0); the verdict says the rest.
        self.assertEqual(run.wait(), 0, run.output())
        r = report(path, "--width", "120")
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout
        self.assertTrue(text.startswith("lastcall shutdown: forced, exit code 0\n"), text)
        self.assertRegex(text, r"\n  trigger +SIGTERM received, \d{4}-\d\d-\d\d ")
        self.assertRegex(text, r"\n  forced by +escalation: SIGKILL to 1 process (\(cgroup.kill\) )?at \+1\.\d{3}s")
        timeline = text.split("\ntimeline", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
        events = [line.split(None, 1)[1] for line in timeline]
        offsets = [float(line.split()[0].rstrip("s")) for line in timeline]
        self.assertEqual(offsets, sorted(offsets), text)  # in the order they happened
        for expected in ("SIGTERM received", "draining: readiness off, no new work admitted",
                         "pre-stop hook started", "pre-stop hook exited 0",
                         "stopping: the stop signal goes out", "forcing: SIGKILL to whatever is left",
                         "stopped: every process reaped"):
            self.assertIn(expected, events, text)
        self.assertTrue(any(re.fullmatch(r"SIGTERM sent to \d+ process(es)?", e) for e in events),
                        text)
        self.assertTrue(any(re.fullmatch(r"pid \d+ sh exited 0", e) for e in events), text)
        # Named sleep, or sh when the stop pass saw it between its echo and its exec (CI, loaded).
        self.assertTrue(any(re.fullmatch(r"pid \d+ (sleep|sh) forced: SIGKILL", e) for e in events),
                        text)
        # One line per process; the stubborn one's bar ends in X (SIGKILLed), the main one's in |.
        procs = text.split("\nprocesses", 1)[1].splitlines()
        # UNIT: both are the main command's (its child stayed in its group).
        main = [l for l in procs if re.match(r"  \d+\* +main +sh ", l)]
        stubborn = [l for l in procs
                    if re.match(r"  \d+ +main +(sleep|sh) +SIGTERM +forced: SIGKILL", l)]
        self.assertEqual(len(main), 1, text)
        self.assertEqual(len(stubborn), 1, text)
        self.assertTrue(stubborn[0].endswith("X|"), text)
        self.assertRegex(main[0], r"\|[-=]*\| *\|$")
        self.assertTrue(all(len(l) <= 120 for l in text.splitlines()), text)

    def test_recorded_reports_render_as_committed(self):
        names = sorted(n[:-5] for n in os.listdir(DATA) if n.startswith("report-") and n.endswith(".json"))
        self.assertTrue(names)
        for name in names:
            with self.subTest(report=name):
                r = report(os.path.join(DATA, name + ".json"), "--width", "100")
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(os.path.join(DATA, name + ".txt")) as f:
                    self.assertEqual(r.stdout, f.read())

    def test_a_report_is_read_from_standard_input(self):
        with open(os.path.join(DATA, "report-clean.json")) as f:
            text = f.read()
        r = report("-", "--width", "100", input=text)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("lastcall shutdown: clean"), r.stdout)

    def test_a_command_that_cannot_start_replaces_the_last_report_with_its_failure(self):
        # The previous run's report said clean, exit code 0; a crash-looping container whose
        # command vanished must not keep showing it.
        path = os.path.join(self.dir, "report.json")
        self.assertEqual(self.start(["--report", path, "--", "true"], quiet=True).wait(), 0)
        missing = os.path.join(self.dir, "no-such-command")
        run = self.start(["--report", path, "--", missing], quiet=True)
        self.assertEqual(run.wait(), 127)
        with open(path) as f:
            doc = json.load(f)
        self.assertEqual(doc["exit_code"], 127)
        self.assertIn(missing, doc["start_failed"]["error"])
        self.assertEqual(doc["processes"], [])
        r = report(path, "--width", "100")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("lastcall shutdown: clean, exit code 127 (the command "
                                            "did not start: "), r.stdout)


    def test_a_run_refused_at_its_set_up_replaces_the_last_report_with_why(self):
        # Refused after its options were read (a config it cannot use, a state directory the
        # ledger cannot open): before, the previous run's report (clean, exit code 0) stayed.
        path = os.path.join(self.dir, "report.json")
        self.assertEqual(self.start(["--report", path, "--", "true"], quiet=True).wait(), 0)
        bad_config = self.write_file("bad.toml", "[services.web]\ncommand = 7\n")
        crontab = self.write_file("crontab", "@every 1h true\n")
        not_a_dir = os.path.join(bad_config, "state")  # below a regular file: ENOTDIR
        for args, code, why in ((["--config", bad_config], 2, "bad.toml:2"),
                                (["--crontab", crontab, "--state-dir", not_a_dir], 1,
                                 "run ledger")):
            run = self.start(["--report", path, *args, "--", "true"], quiet=True)
            self.assertEqual(run.wait(), code, run.output())
            with open(path) as f:
                doc = json.load(f)
            self.assertEqual(doc["exit_code"], code, doc)
            self.assertIn(why, doc["start_failed"]["error"])
            self.assertIn(doc["start_failed"]["error"], run.output())
            self.assertEqual(doc["processes"], [])
            r = report(path, "--width", "100")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(f"lastcall shutdown: clean, exit code {code} (the "
                                                "command did not start: "), r.stdout)


class ReportErrors(LastcallTestCase):
    def test_a_missing_file_is_one_line_and_exit_1(self):
        r = report("/nonexistent/report.json")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr,
                         "lastcall report: /nonexistent/report.json: No such file or directory\n")

    def test_input_that_is_not_a_report_is_named_and_exit_1(self):
        for text, why in (("garbage", "not JSON"), ("{}", "not a lastcall shutdown report"),
                          ('{"schema": 7}', "report schema 7 is newer than this lastcall reads")):
            with self.subTest(text=text):
                r = report("-", input=text)
                self.assertEqual(r.returncode, 1)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                self.assertIn(f"lastcall report: standard input: {why}", r.stderr)

    def test_no_file_and_a_terminal_on_stdin_is_a_usage_error(self):
        master, slave = pty.openpty()
        try:
            r = report(stdin=slave)
        finally:
            os.close(slave)
            os.close(master)
        self.assertEqual(r.returncode, 2)
        self.assertIn("lastcall report: no report given", r.stderr)

    def test_two_files_are_a_usage_error(self):
        r = report("a.json", "b.json")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("lastcall report: "), r.stderr)
