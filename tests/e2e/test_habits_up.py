# SPDX-License-Identifier: Apache-2.0
"""Issue 41: the habits of foreman and docker users. `lastcall up` gives each process type its
PORT as foreman does; `lastcall status` tells two `lastcall up`s apart; an init whose services
have all ended for good, with no command and no job, ends instead of looking alive."""
import glob
import json
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

    def ports(self, args=(), dotenv=None, count=3, env=None):
        self.write_file("Procfile", self.PROCFILE)
        if dotenv is not None:
            self.write_file(".env", dotenv)
        proc = subprocess.Popen([LASTCALL, "up", *args], cwd=self.dir, env=env or self.env,
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

    def test_the_environments_port_is_the_base_below_the_env_file_as_with_foreman(self):
        env = dict(self.env, PORT="8000")
        self.assertEqual(self.ports(env=env), {"web": "8000", "css": "8100", "worker": "8200"})
        self.assertEqual(self.ports(dotenv="PORT=7000\n", env=env),
                         {"web": "7000", "css": "7100", "worker": "7200"})


    def test_a_port_that_is_not_a_port_is_an_error_naming_where_it_came_from(self):
        self.write_file("Procfile", self.PROCFILE)
        self.write_file("dev.env", "PORT=x\n")
        for args, env, said in ((["-e", "dev.env"], self.env,
                                 "lastcall up: dev.env: PORT 'x' is not a port (1-65535)"),
                                ([], dict(self.env, PORT="abc"),
                                 "lastcall up: the environment's PORT 'abc' is not a port "
                                 "(1-65535)")):
            with self.subTest(said=said):
                r = subprocess.run([LASTCALL, "up", *args], cwd=self.dir, env=env,
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual((r.returncode, r.stderr), (2, said + "\n"))


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
            # The file itself has the lines docs/services.md documents.
            [status] = glob.glob(os.path.join(runtime, "lastcall", "*.status"))
            with open(status) as f:
                head = f.read().splitlines()[:4]
            self.assertEqual(head[:2], ["lastcall-status 1", f"lastcall {proc.pid}"])
            self.assertRegex(head[2], rf"^instance {proc.pid}-[0-9a-f]{{16}}$")
            self.assertEqual(head[3], f"config {os.path.realpath(procfile)}")
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

    def test_services_alone_end_with_code_1_when_one_ended_for_good_on_a_non_zero_code(self):
        # restart = "no": it ends for good at its first exit; exit 4 is a failure all the same
        # (a container's on-failure restart policy must see one). The one that exited 0 is not.
        cfg = self.write_file("lastcall.toml", '[services.migrate]\ncommand = "exit 4"\n'
                                               'restart = "no"\n\n[services.seed]\n'
                                               'command = "exit 0"\nrestart = "no"\n')
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--config", cfg, "--report", report], self.env)
        self.assertEqual(log.finish(timeout=60), 1, "\n".join(log.lines))
        log.wait_for("every service has ended (migrate exited with code 4): nothing left to "
                     "supervise, exiting 1")
        with open(report) as f:
            self.assertEqual(json.load(f)["trigger"]["reason"],
                             "every service has ended (migrate exited with code 4)")

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


class CtrlCOutput(LastcallTestCase):
    """Item 7: what `lastcall up` prints when it stops, in the prefix columns as foreman does."""

    def run_up(self, procfile, then):
        """`lastcall up` with stdout and stderr on pipes; `then()` once web is up. Returns (exit
        code, stdout lines, stderr)."""
        self.write_file("Procfile", procfile)
        os.mkfifo(os.path.join(self.dir, "gate"))
        proc = subprocess.Popen([LASTCALL, "up"], cwd=self.dir, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(self.fifo.readline(), "web up")
            then(proc)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertNoLeftovers()
        return proc.returncode, out.splitlines(), err

    def open_gate(self, _proc):
        with open(os.path.join(self.dir, "gate"), "w") as g:
            g.write("go\n")

    WEB = 'web: echo web up > "$EVENTS"; exec sleep 1000\n'

    def test_ctrl_c_says_in_the_columns_that_a_second_one_kills_and_no_long_log_lines(self):
        code, out, err = self.run_up(self.WEB + "worker: exec sleep 1000\n",
                                     lambda proc: proc.send_signal(signal.SIGINT))
        self.assertEqual(code, 0, err)
        self.assertIn("lastcall | stopping every process (SIGTERM); Ctrl-C again to kill them "
                      "at once", out)
        self.assertIn("web      | was killed by SIGTERM", out)
        self.assertIn("worker   | was killed by SIGTERM", out)
        # What happened to each service is said once, in its column; the log keeps the summary.
        self.assertNotIn("service web", err)
        self.assertNotIn("service worker", err)

    def test_a_process_last_lines_come_before_its_exited_line(self):
        code, out, err = self.run_up(self.WEB + "worker: read go < gate; echo last words; exit 3\n",
                                     self.open_gate)
        self.assertEqual(code, 3, err)
        self.assertLess(out.index("worker   | last words"),
                        out.index("worker   | exited with code 3"), out)

    def test_a_crash_does_not_call_a_procfile_process_main(self):
        code, out, err = self.run_up(self.WEB + "worker: read go < gate; exit 3\n", self.open_gate)
        self.assertEqual(code, 3, err)
        self.assertNotIn("is main", err + "\n".join(out))
        self.assertIn("lastcall | stopping every process (SIGTERM); Ctrl-C again to kill them "
                      "at once", out)


class ReportOfUp(LastcallTestCase):
    """Item 8: the report names the service of each process and what ended the run."""

    def test_the_report_names_each_process_unit_and_the_service_whose_crash_ended_the_run(self):
        self.write_file("Procfile", CtrlCOutput.WEB + "worker: read go < gate; exit 3\n")
        os.mkfifo(os.path.join(self.dir, "gate"))
        report = os.path.join(self.dir, "report.json")
        proc = subprocess.Popen([LASTCALL, "up", "--report", report], cwd=self.dir, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.fifo.readline()  # web runs
        with open(os.path.join(self.dir, "gate"), "w") as g:
            g.write("go\n")
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 3, err)
        with open(report) as f:
            data = json.load(f)
        self.assertEqual(data["trigger"]["reason"], "service worker exited with code 3")
        self.assertEqual([p["unit"] for p in data["processes"]], ["service web"])
        r = subprocess.run([LASTCALL, "report", report], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"trigger\s+service worker exited with code 3")
        self.assertRegex(r.stdout, r"PID\s+UNIT\s+COMMAND")
        self.assertRegex(r.stdout, r"\d+\s+service web\s+sleep\s+SIGTERM")

    def test_the_report_says_a_service_lastcall_stopped_ended_on_its_stop_signal(self):
        self.write_file("Procfile", CtrlCOutput.WEB)
        report = os.path.join(self.dir, "report.json")
        proc = subprocess.Popen([LASTCALL, "up", "--report", report], cwd=self.dir, env=self.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.assertEqual(self.fifo.readline(), "web up")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        r = subprocess.run([LASTCALL, "report", report], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n  web +stopped +1 +0 +143 +on its stop signal\n")
        self.assertNotIn("by itself", r.stdout)

    def test_the_report_tells_the_main_command_from_a_service(self):
        cfg = self.write_file("lastcall.toml",
                              '[services.db]\ncommand = \'echo db > "$EVENTS"; exec sleep 1000\'\n')
        report = os.path.join(self.dir, "report.json")
        proc = subprocess.Popen([LASTCALL, "--config", cfg, "--report", report, "--", "sh", "-c",
                                 'echo main > "$EVENTS"; exec sleep 1000'],
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        self.assertCountEqual([self.fifo.readline(), self.fifo.readline()], ["db", "main"])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 143, err)
        with open(report) as f:
            data = json.load(f)
        self.assertCountEqual([p["unit"] for p in data["processes"]], ["main", "service db"])


class SummaryLine(LastcallTestCase):
    """Item 8: the shutdown's one line at the default level counts in words that read right."""

    def test_the_summary_line_says_1_process_in_the_singular(self):
        run = self.start(["--", "sh", "-c", 'echo up > "$EVENTS"; exec sleep 1000'], quiet=True)
        self.assertEqual(self.fifo.readline(), "up")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 143, run.output())
        self.assertIn(", 1 process in the final tree, 1 sent the stop signal, 1 reaped in all, ",
                      run.output())

    def test_the_summary_line_says_how_many_processes_were_sigkilled_before_their_pids(self):
        # Both ignore SIGTERM (the sleep inherits the ignored disposition): the grace ends in
        # SIGKILL to the two of them.
        run = self.start(["--grace", "300ms", "--", "sh", "-c",
                          'trap "" TERM; sleep 1000 & echo "$$ $!" > "$EVENTS"; wait'],
                         quiet=True)
        shell, sleep = self.fifo.readline().split()
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 137, run.output())
        self.assertRegex(run.output(),
                         r"shutdown forced: exit code 137, 2 processes in the final tree, 2 sent "
                         r"the stop signal, 2 reaped in all, SIGKILL to 2 processes "
                         rf"\(pid ({shell}, {sleep}|{sleep}, {shell})\), ")
        self.assertNoLeftovers()

