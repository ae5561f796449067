# SPDX-License-Identifier: Apache-2.0
"""Issue 42, secrets and hostile output: the credentials lastcall is given for its ledger
(PGPASSWORD, PGPASSFILE, a password in --ledger's URL) reach no unit and are not left in
lastcall's /proc/PID/cmdline nor printed; what came from a unit is printed with its control
characters escaped (`lastcall report`, `lastcall status`, the prefixed lines of `lastcall up`).

The ledger tests run a real PostgreSQL (pgserver.py, trust authentication: a password is
accepted and not checked). Synchronisation: lines on the FIFO, lastcall's exit."""
import json
import os
import re
import signal
import socket
import subprocess

import clustertest
from lctest import LASTCALL, LastcallTestCase

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J"  # retitles the terminal, then clears it
ESCAPED = "\\x1b]0;PWNED\\x07\\x1b[2J"


class LedgerSecretsTest(LastcallTestCase):
    @classmethod
    def setUpClass(cls):
        clustertest.start_server()

    @classmethod
    def tearDownClass(cls):
        clustertest.stop_server()

    def setUp(self):
        if clustertest.SKIP:
            self.skipTest(clustertest.SKIP)
        super().setUp()
        self.db = clustertest.SERVER.new_database()

    def file(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def lines_from(self, names):
        """The first FIFO line of each unit in names, by its first word."""
        seen = {}
        while set(names) - set(seen):
            word, _, rest = self.fifo.readline(timeout=30).partition(" ")
            seen.setdefault(word, rest)
        return seen

    def test_pgpassword_and_pgpassfile_given_to_lastcall_reach_no_unit_but_a_units_own_settings_do(self):
        says = 'echo "{} ${{PGPASSWORD-none}} ${{PGPASSFILE-none}}" > "$EVENTS"'
        cfg = self.file("lastcall.toml", f"""
[services.svc]
command = ["sh", "-c", '{says.format("service")}; exec sleep 1000']
[services.own]
command = ["sh", "-c", '{says.format("own-service")}; exec sleep 1000']
env = {{ PGPASSWORD = "the-services-own" }}
[jobs.tick]
schedule = "@every 1s"
command = ["sh", "-c", '{says.format("job")}; echo x > "$LASTCALL_OUTPUT"']
output = "{self.dir}/tick.out"
verify = ["sh", "-c", '{says.format("verify")}']
""")
        crontab = self.file("crontab", "PGPASSWORD=the-crontabs-own\n"
                                       f"@every 1s {says.format('cron-job')}\n")
        env = dict(self.env, PGPASSWORD="lastcalls-secret", PGPASSFILE="/nonexistent/pgpass")
        run = self.start(["--config", cfg, "--crontab", crontab,
                          "--ledger", clustertest.SERVER.url(self.db),
                          "--pre-stop", says.format("hook"), "--",
                          "sh", "-c", says.format("main") + "; exec sleep 1000"], env=env)
        seen = self.lines_from(["main", "service", "own-service", "job", "verify", "cron-job"])
        run.signal(signal.SIGTERM)
        seen.update(self.lines_from(["hook"]))
        self.assertEqual(run.wait(), 143, run.output())  # the main command's: SIGTERM
        for unit in ("main", "service", "job", "verify", "hook"):
            self.assertEqual(seen[unit], "none none", f"{unit}: {seen}")
        self.assertEqual(seen["own-service"], "the-services-own none", seen)
        self.assertEqual(seen["cron-job"], "the-crontabs-own none", seen)
        self.assertNoLeftovers()

    def test_a_password_in_the_ledger_url_leaves_lastcalls_command_line_and_is_never_printed(self):
        cfg = self.file("lastcall.toml", """
[jobs.tick]
schedule = "@every 1s"
command = "true"
""")
        url = clustertest.SERVER.url(self.db, password="s3cret-pw")
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--config", cfg, "--ledger", url, "--report", report, "--",
                          "sh", "-c", 'echo started > "$EVENTS"; exec sleep 1000'])
        self.fifo.expect("started")
        with open(f"/proc/{run.lastcall_pid()}/cmdline", "rb") as f:
            cmdline = f.read().decode()
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 143, run.output())
        self.assertNotIn("s3cret-pw", cmdline)
        self.assertIn(url.replace("s3cret-pw", "***"), cmdline.split("\0"))
        log = run.output()
        self.assertNotIn("s3cret-pw", log)
        warnings = [l for l in log.splitlines() if "password was readable" in l]
        self.assertEqual(len(warnings), 1, log)
        with open(report) as f:
            self.assertNotIn("s3cret-pw", f.read())
        runs = subprocess.run([LASTCALL, "runs", "--ledger", url], capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(runs.returncode, 0, runs.stderr)
        self.assertNotIn("s3cret-pw", runs.stdout + runs.stderr)


class RunsCommandLineTest(LastcallTestCase):
    def test_lastcall_runs_scrubs_the_ledger_urls_password_from_its_command_line_while_it_connects(self):
        # A server that accepts and never answers: `lastcall runs` stays in its connection until
        # the test closes it. Its connect comes after the scrub, so the accept is the event.
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            server.settimeout(30)
            url = f"postgresql://u:s3cret-pw@127.0.0.1:{server.getsockname()[1]}/db"
            runs = subprocess.Popen([LASTCALL, "runs", "--ledger", url], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=self.env)
            try:
                conn, _ = server.accept()
                with conn, open(f"/proc/{runs.pid}/cmdline", "rb") as f:
                    cmdline = f.read().decode()
            finally:
                out, err = runs.communicate(timeout=30)
        self.assertNotIn("s3cret-pw", cmdline)
        self.assertIn(url.replace("s3cret-pw", "***"), cmdline.split("\0"))
        self.assertNotEqual(runs.returncode, 0, err)  # the server closed without a word
        self.assertNotIn("s3cret-pw", out + err)
        self.assertEqual(err.count("password was readable"), 1, err)


class HostileTextTest(LastcallTestCase):
    def test_a_ledger_url_that_libpq_cannot_read_is_refused_without_its_password(self):
        cfg = self.write_file("lastcall.toml", '[jobs.tick]\nschedule = "@every 1s"\n'
                                               'command = "true"\n')
        # An invalid percent-escape in the password: libpq's message quotes the token.
        for args in (["--config", cfg], ["runs"]):
            r = subprocess.run([LASTCALL, *args, "--ledger", "postgresql://u:se%zzcret@h/db"],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn('invalid percent-encoded token: "***"', r.stderr)
            self.assertNotIn("zzcret", r.stderr)

    def test_report_escapes_the_control_characters_of_a_units_command_line(self):
        path = os.path.join(self.dir, "report.json")
        run = self.start(["--report", path, "--", "sh", "-c",
                          'echo started > "$EVENTS"; exec sleep 1000', HOSTILE])
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        run.wait()
        with open(path) as f:
            self.assertIn(HOSTILE, json.load(f)["command"])  # recorded as it was
        r = subprocess.run([LASTCALL, "report", path, "--width", "200"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\x1b", r.stdout)
        self.assertNotIn("\x07", r.stdout)
        self.assertIn(ESCAPED, r.stdout)

    def test_status_escapes_the_control_characters_of_a_config_path(self):
        cfg = self.write_file(f"{HOSTILE}.toml", '[services.web]\ncommand = ["sh", "-c", '
                                                 '\'echo web > "$EVENTS"; exec sleep 1000\']\n')
        run = self.start(["--config", cfg])
        self.fifo.expect("web")
        try:
            r = subprocess.run([LASTCALL, "status", str(run.proc.pid)], capture_output=True,
                               text=True, timeout=30)
        finally:
            run.signal(signal.SIGTERM)
            run.wait()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(ESCAPED, r.stdout)
        self.assertNotIn("\x1b", r.stdout)

    def test_up_escapes_the_control_characters_of_a_services_output_lines(self):
        self.write_file("Procfile", "hostile: printf '\\033]0;PWNED\\007\\033[2J\\n'\n")
        r = subprocess.run([LASTCALL, "up"], cwd=self.dir, env=self.env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The name column is as wide as the longest name shown in it ("lastcall" says its steps).
        self.assertRegex(r.stdout, rf"(?m)^hostile +\| {re.escape(ESCAPED)}$")
        self.assertNotIn("\x1b", r.stdout + r.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
