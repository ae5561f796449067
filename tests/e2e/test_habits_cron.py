# SPDX-License-Identifier: Apache-2.0
"""Habits of cron and supercronic users hold in lastcall (issue 41, items 1 and 5, and the `jobs`
command): crontab lines read as supercronic reads them (7 fields: seconds first, year last; 6:
a year last), a line that fits no form refused with its text, no catch-up retry of an
interrupted crontab line unless its comment asks, and `lastcall jobs` showing each job's command
and user.

Synchronisation: job lines on the FIFO, lastcall's exit, and rows of the ledger. Fire times are
checked through `lastcall jobs` (computed, not waited for)."""
import os
import pwd
import signal
import sqlite3
import subprocess
import unittest

from lctest import LASTCALL, LastcallTestCase, kill_marked
from test_jobs import ledger_rows, wait_for_row


class CronTestCase(LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.state = os.path.join(self.dir, "state")

    def jobs(self, *args):
        """`lastcall jobs ARGS`: (exit code, stdout, stderr)."""
        r = subprocess.run([LASTCALL, "jobs", *args], capture_output=True, text=True, timeout=30)
        return r.returncode, r.stdout, r.stderr

    def heads(self, stdout):
        """The job lines of `lastcall jobs` (its fire times are the indented ones)."""
        return [line for line in stdout.splitlines() if not line.startswith(" ")]

    def times(self, stdout):
        return [line.strip() for line in stdout.splitlines() if line.startswith("  ")]


class CrontabFormsTest(CronTestCase):
    def test_a_seven_field_line_runs_every_five_seconds_with_the_seconds_first(self):
        crontab = self.write_file("crontab", 'CRON_TZ=UTC\n*/5 * * * * * * echo "hi at '
                                             '$LASTCALL_SCHEDULED_TIME" > "$EVENTS"\n')
        code, out, err = self.jobs("--crontab", crontab, "--count", "3")
        self.assertEqual(code, 0, err)
        self.assertRegex(self.heads(out)[0],
                         r"schedule 'CRON_TZ=UTC \*/5 \* \* \* \* \* \*'.*  command: echo \"hi at")
        seconds = [int(t[17:19]) for t in self.times(out)]
        self.assertEqual([s % 5 for s in seconds], [0, 0, 0], out)
        self.assertEqual(len(set(seconds)), 3, out)  # three fire times within one minute
        run = self.start(["--crontab", crontab, "--state-dir", self.state])
        line = self.fifo.readline()  # a fire time comes within 5 s; the command is `echo hi ...`
        self.assertRegex(line, r"^hi at \d{4}-\d\d-\d\dT\d\d:\d\d:\d[05]Z$")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())

    def test_a_six_field_line_ends_in_a_year_that_restricts_its_fire_times(self):
        crontab = self.write_file("crontab", "CRON_TZ=UTC\n0 3 * * * 2099 echo hi\n")
        code, out, err = self.jobs("--crontab", crontab, "--count", "2")
        self.assertEqual(code, 0, err)
        self.assertRegex(self.heads(out)[0], r"schedule 'CRON_TZ=UTC 0 3 \* \* \* 2099'.*"
                                             r"  command: echo hi$")
        self.assertEqual(self.times(out), ["2099-01-01T03:00:00+00:00[UTC]",
                                          "2099-01-02T03:00:00+00:00[UTC]"])

    def test_a_line_whose_years_are_past_is_refused_at_start_naming_it(self):
        crontab = self.write_file("crontab", "0 3 * * * 2020 echo hi\n")
        r = subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", self.state, "--",
                            "true"], capture_output=True, text=True, env=self.env, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{crontab}:1: schedule: '0 3 * * * 2020' never fires", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.state, "ledger.sqlite")))

    def test_a_line_that_fits_no_form_is_an_error_naming_the_line_and_its_text(self):
        for line, why in (("0 0 12 * * 5L * echo hi", "day-of-week field: '5L' is not a number"),
                          ("* some * * *  more", "hour field: 'some' is not a number")):
            with self.subTest(line=line):
                crontab = self.write_file("crontab", "# nightly\n" + line + "\n")
                r = subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", self.state,
                                    "--", "true"], capture_output=True, text=True, env=self.env,
                                   timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(f"{crontab}:2: schedule: {why} (in '{line}')", r.stderr)


class InterruptedCrontabLineTest(CronTestCase):
    def crash_during_run(self, header):
        """A crontab line whose run lastcall is SIGKILLed during; returns the run's id."""
        crontab = self.write_file(
            "crontab", header + '@every 1s echo "run $LASTCALL_RUN_ID" > "$EVENTS"; exec sleep 60\n')
        run = self.start(["--crontab", crontab, "--state-dir", self.state, "--tracker", "proc"])
        first = int(self.fifo.expect_prefix("run "))
        run.proc.kill()
        run.wait()
        kill_marked(self.marker)  # what pdeathsig did not reach
        return first

    def restart_with_a_yearly_line(self, header):
        """The same entry (its `# name:`), now on a schedule that fires in no test's lifetime:
        whatever it runs at this start is a retry."""
        crontab = self.write_file(
            "crontab",
            header + '@yearly echo "retry of $LASTCALL_RETRY_OF" > "$EVENTS"; exec sleep 60\n')
        return crontab, self.start(["--crontab", crontab, "--state-dir", self.state,
                                    "--tracker", "proc"])

    def test_an_interrupted_crontab_line_is_not_run_again_at_the_next_start(self):
        header = "# name: beat\n"
        first = self.crash_during_run(header)
        _, run = self.restart_with_a_yearly_line(header)
        row = wait_for_row(self.state, "id = ? AND recovery IS NOT NULL", (first,))[0]
        self.assertEqual((row["state"], row["recovery"]), ("interrupted", "none"))
        self.assertEqual(ledger_rows(self.state, "retry_of IS NOT NULL"), [])
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        self.assertIn(f"job beat: run {first} was interrupted; not retried (on_interrupted = none)",
                      run.output())
        self.assertNotIn("retrying interrupted run(s) now", run.output())

    def test_a_comment_opts_a_crontab_line_into_the_retry_at_the_next_start(self):
        header = "# name: other\n@yearly true\n# on_interrupted: retry\n# name: beat\n"
        first = self.crash_during_run(header)
        crontab, run = self.restart_with_a_yearly_line(header)
        self.assertEqual(self.fifo.expect_prefix("retry of "), str(first))
        run.signal(signal.SIGTERM)
        run.wait()
        code, out, err = self.jobs("--crontab", crontab)
        self.assertEqual(code, 0, err)
        policies = {h.split()[0]: h.split("on_interrupted=")[1].split()[0] for h in self.heads(out)}
        self.assertEqual(policies, {"other": "none", "beat": "retry"})


class JobsCommandTest(CronTestCase):
    def test_jobs_shows_each_jobs_command_and_the_user_it_runs_as(self):
        config = self.write_file("jobs.toml", '[jobs.argv]\nschedule = "@hourly"\n'
                                              'command = ["/bin/echo", "two words"]\n\n'
                                              '[jobs.own]\nschedule = "@daily"\n'
                                              'command = "id -un"\nuser = "root"\n')
        crontab = self.write_file("crontab", "# name: line\n@hourly echo  hi | tee /tmp/x\n")
        code, out, err = self.jobs("--config", config, "--crontab", crontab, "--user", "nobody")
        self.assertEqual(code, 0, err)
        heads = self.heads(out)
        self.assertEqual(len(heads), 3, out)
        self.assertRegex(heads[0], r'^argv .* user=nobody  command: \["/bin/echo","two words"\]$')
        self.assertRegex(heads[1], r"^own .* user=root  command: id -un$")
        self.assertRegex(heads[2], r"^line .* user=nobody  command: echo  hi \| tee /tmp/x$")
        # Without --user: the user running lastcall, as lastcall itself would run them.
        code, out, err = self.jobs("--crontab", crontab)
        self.assertEqual(code, 0, err)
        me = pwd.getpwuid(os.geteuid()).pw_name
        self.assertRegex(self.heads(out)[0], rf"^line .* user={me}  command: echo  hi")

    def test_jobs_help_shows_that_a_crontab_alone_is_enough(self):
        r = subprocess.run([LASTCALL, "jobs", "--help"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("--config FILE [--crontab FILE]", r.stdout)
        self.assertIn("lastcall jobs --crontab FILE", r.stdout)
        crontab = self.write_file("crontab", "@hourly true\n")
        code, out, err = self.jobs("--crontab", crontab)
        self.assertEqual(code, 0, err)


class TimesTest(CronTestCase):
    """Item 6: a fire time is shown in its schedule's zone, with the offset and the zone's name;
    `lastcall runs` shows the newest runs, each time beside how long ago it was."""
    ZONE = "XST-5:30"  # a POSIX TZ string: no zoneinfo file needed, and not UTC

    def zoned_env(self):
        return dict(self.env, TZ=self.ZONE)

    def test_jobs_shows_fire_times_in_the_schedules_zone_with_its_offset_and_name(self):
        crontab = self.write_file("crontab", "0 3 * * * echo hi\n")
        r = subprocess.run([LASTCALL, "jobs", "--crontab", crontab, "--count", "2"],
                           env=self.zoned_env(), capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        times = self.times(r.stdout)
        self.assertEqual(len(times), 2, r.stdout)
        for t in times:
            self.assertRegex(t, r"^\d{4}-\d\d-\d\dT03:00:00\+05:30\[XST-5:30\]$")

    def test_the_log_says_the_next_run_in_the_schedules_zone_with_its_name(self):
        crontab = self.write_file("crontab", "0 3 * * * echo hi\n")
        r = subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", self.state, "--",
                            "true"], env=self.zoned_env(), capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"schedule '0 3 \* \* \*', next run at "
                                   r"\d{4}-\d\d-\d\dT03:00:00\+05:30\[XST-5:30\]\n")

    def ledger_with_runs(self, count):
        """A ledger (made by a lastcall run) with `count` completed runs of job x, a minute
        apart from 2026-01-02T03:04:05Z, each ended 2 s after its fire time."""
        crontab = self.write_file("crontab", "0 3 * * * true\n")
        r = subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", self.state, "--",
                            "true"], env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        base = 1767323045
        con = sqlite3.connect(os.path.join(self.state, "ledger.sqlite"))
        with con:
            con.executemany(
                "INSERT INTO runs (job, scheduled_at, state, created_ms, started_ms, ended_ms, "
                "exit_code) VALUES ('x', ?, 'completed', ?, ?, ?, 0)",
                [(base + 60 * i, (base + 60 * i) * 1000, (base + 60 * i) * 1000,
                  (base + 60 * i + 2) * 1000) for i in range(count)])
        con.close()

    def runs(self, *args):
        r = subprocess.run([LASTCALL, "runs", "--state-dir", self.state, *args],
                           env=self.zoned_env(), capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        ids = [int(line.split()[0]) for line in r.stdout.splitlines()[1:]]
        return r, ids

    def test_runs_shows_the_newest_20_and_says_that_older_ones_were_left_out(self):
        self.ledger_with_runs(25)
        r, ids = self.runs()
        self.assertEqual(ids, list(range(6, 26)), r.stdout)
        self.assertIn("lastcall runs: the newest 20 runs; older ones with -n N or --all", r.stderr)
        r, ids = self.runs("-n", "3")
        self.assertEqual(ids, [23, 24, 25], r.stdout)
        r, ids = self.runs("--all")
        self.assertEqual(ids, list(range(1, 26)), r.stdout)
        self.assertNotIn("older ones", r.stderr)

    def test_runs_shows_each_time_beside_how_long_ago_it_was(self):
        self.ledger_with_runs(1)
        r, _ = self.runs()
        header, row = r.stdout.splitlines()
        self.assertIn("SCHEDULED (XST)", header)
        # 03:04:05Z is 08:34:05 at +05:30; the end, on the same day, shows its time alone.
        self.assertRegex(row, r"  2026-01-02 08:34:05 \(\d+d ago\)  .*  08:34:07 \(\d+d ago\)  ")


if __name__ == "__main__":
    unittest.main()
