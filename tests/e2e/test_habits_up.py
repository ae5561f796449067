# SPDX-License-Identifier: Apache-2.0
"""Issue 41: the habits of foreman and docker users. `lastcall up` gives each process type its
PORT as foreman does; `lastcall status` tells two `lastcall up`s apart; an init whose services
have all ended for good, with no command and no job, ends instead of looking alive."""
import glob
import os
import re
import signal
import subprocess
import urllib.request

from lctest import LASTCALL, LastcallTestCase
from test_services import LogReader


class Ports(LastcallTestCase):
    PROCFILE = ('web: echo "web $PORT" > "$EVENTS"; exec sleep 1000\n'
                'css: echo "css $PORT" > "$EVENTS"; exec sleep 1000\n'
                'worker: echo "worker $PORT" > "$EVENTS"; exec sleep 1000\n')

    def ports(self, args=(), dotenv=None, count=3):
        self.write_file("Procfile", self.PROCFILE)
        if dotenv is not None:
            self.write_file(".env", dotenv)
        proc = subprocess.Popen([LASTCALL, "up", *args], cwd=self.dir, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            got = dict(self.fifo.readline().split() for _ in range(count))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        self.assertNoLeftovers()
        return got

    def test_each_process_type_gets_port_5000_plus_100_per_place_in_the_procfile(self):
        self.assertEqual(self.ports(), {"web": "5000", "css": "5100", "worker": "5200"})

    def test_the_port_flag_moves_the_base(self):
        got = self.ports(["-p", "6000"])
        self.assertEqual(got, {"web": "6000", "css": "6100", "worker": "6200"})

    def test_a_process_keeps_its_port_when_only_it_runs(self):
        self.assertEqual(self.ports(["--only", "worker"], count=1), {"worker": "5200"})

    def test_the_env_files_port_is_the_base_when_no_flag_is_given(self):
        self.assertEqual(self.ports(dotenv="PORT=7000\n"),
                         {"web": "7000", "css": "7100", "worker": "7200"})


class StatusOfUp(LastcallTestCase):
    def test_status_names_the_instance_and_the_procfile_of_each_lastcall_up(self):
        runtime = os.path.join(self.dir, "runtime")
        os.mkdir(runtime, 0o700)
        env = dict(self.env, XDG_RUNTIME_DIR=runtime)
        procfile = self.write_file("Procfile", 'web: echo up > "$EVENTS"; exec sleep 1000\n')
        proc = subprocess.Popen([LASTCALL, "up"], cwd=self.dir, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertEqual(self.fifo.readline(), "up")
            r = subprocess.run([LASTCALL, "status"], env=env, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, rf"lastcall pid {proc.pid}, instance {proc.pid}-[0-9a-f]+, "
                                       rf"config {os.path.realpath(procfile)}")
            # Selected by the Procfile, as `lastcall status FILE` selects a config.
            r = subprocess.run([LASTCALL, "status", procfile], env=env, capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("web", r.stdout)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


class NothingLeftToRun(LastcallTestCase):
    CONFIG = """
[services.flaky]
command = "exit 3"
restart = "always"
backoff = { initial = "1ms" }
restart_limit = { burst = 2, interval = "1h" }
"""

    def test_services_alone_end_with_code_1_once_every_service_has_failed_for_good(self):
        cfg = self.write_file("lastcall.toml", self.CONFIG)
        log = LogReader(["--config", cfg], self.env)
        self.assertEqual(log.finish(timeout=60), 1, "\n".join(log.lines))
        failed = log.wait_for("service flaky: failed")
        ended = log.wait_for("nothing left to supervise")
        self.assertLess(failed, ended, "\n".join(log.lines))

    def test_stay_keeps_lastcall_running_after_every_service_has_ended(self):
        cfg = self.write_file("lastcall.toml", self.CONFIG)
        log = LogReader(["--config", cfg, "--stay"], self.env)
        log.wait_for("service flaky: failed")
        self.assertIsNone(log.proc.poll())
        log.proc.send_signal(signal.SIGTERM)
        self.assertEqual(log.finish(timeout=60), 0, "\n".join(log.lines))
        self.assertFalse(any("nothing left to supervise" in line for line in log.lines))


class UpArguments(LastcallTestCase):
    def test_a_process_name_after_up_points_to_only(self):
        self.write_file("Procfile", "web: sleep 1000\nworker: sleep 1000\n")
        r = subprocess.run([LASTCALL, "up", "web", "worker"], cwd=self.dir, env=self.env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.strip().splitlines(),
                         ["lastcall up: 'web' is not an option; to run only some processes: "
                          "lastcall up --only web,worker"])

    def test_an_unknown_option_of_up_is_a_usage_error_naming_it(self):
        r = subprocess.run([LASTCALL, "up", "--bogus"], cwd=self.dir, env=self.env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--bogus", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


class GlobalOptionsOfUp(LastcallTestCase):
    """Item 4: lastcall's own options go before or after `up`; those that make no sense there
    are refused by name."""

    def test_up_takes_lastcalls_own_options_before_and_after_its_name(self):
        procfile = self.write_file("Procfile", 'web: echo up > "$EVENTS"; exec sleep 1000\n')
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--metrics-listen", "127.0.0.1:0", "-v", "up", "-f", procfile,
                         "--report", report, "--pre-stop", 'echo pre-stop > "$EVENTS"'], self.env)
        try:
            self.assertEqual(self.fifo.readline(), "up")
            line = log.lines[log.wait_for("metrics: serving /metrics")]
            port = re.search(r"\(port (\d+)\)", line).group(1)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                body = r.read().decode()
            self.assertIn('lastcall_service_restarts_total{service="web"}', body)
        finally:
            log.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline(), "pre-stop")
        log.finish(timeout=60)
        self.assertTrue(os.path.exists(report), "\n".join(log.lines))
        self.assertNoLeftovers()

    def test_an_option_about_a_main_command_or_a_config_is_refused_by_name(self):
        for args, option in ((["up", "--kill-scope", "child"], "--kill-scope"),
                             (["--config", "x.toml", "up"], "--config"),
                             (["up", "--ledger=postgresql://db/x"], "--ledger")):
            with self.subTest(args=args):
                r = subprocess.run([LASTCALL, *args], cwd=self.dir, env=self.env,
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith(f"lastcall up: {option} does not apply to "
                                                    "lastcall up: "), r.stderr)


class LogTimes(LastcallTestCase):
    def test_the_log_prefix_is_local_time_with_its_offset(self):
        # A POSIX TZ string: no zoneinfo file needed (tzdata may be missing on a slim machine).
        r = subprocess.run([LASTCALL, "-v", "--", "true"], env=dict(self.env, TZ="XST-5:30"),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        first = r.stderr.splitlines()[0]
        self.assertRegex(first, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30 lastcall\[\d+\] ")
