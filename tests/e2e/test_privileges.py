# SPDX-License-Identifier: Apache-2.0
"""Privilege drop and descriptor hygiene (issue 9): --user, --no-new-privs, and no descriptor of
lastcall's reaching the child. The child is faultkit's `self` mode, which prints its open fds and
the Uid/Gid/Groups/NoNewPrivs/Cap* lines of /proc/self/status to stdout.

Privileges and hostile input (issue 16): lastcall runs as root and the attacker is an
unprivileged app in the same container, played here by `nobody` (setpriv). One class per numbered
item of the issue, each test named by the behaviour it proves.
"""
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, helper, marked_pids, needs_strace

FAULTKIT = helper("faultkit")
IS_ROOT = os.geteuid() == 0


def status_of(output):
    """{'Uid': [...], 'Gid': [...], 'Groups': [...], 'NoNewPrivs': [...], 'fds': {fd: target}}"""
    info = {}
    for line in output.splitlines():
        if line.startswith("fds:"):
            info["fds"] = dict(item.split("=", 1) for item in line.split()[1:])
        elif ":" in line and line.split(":", 1)[0] in ("Uid", "Gid", "Groups", "NoNewPrivs", "CapEff",
                                                              "CapPrm", "CapInh", "CapBnd", "CapAmb"):
            key, value = line.split(":", 1)
            info[key] = value.split()
    return info


class PrivilegeTestCase(LastcallTestCase):
    def run_self(self, args, prefix=(), env=None):
        """Runs `lastcall ARGS -- faultkit self`; returns (exit code, child's output, log)."""
        out_path = os.path.join(self.dir, "child.out")
        log_path = os.path.join(self.dir, "lastcall.log")
        with open(out_path, "wb") as out, open(log_path, "wb") as log:
            code = subprocess.run(list(prefix) + [LASTCALL] + args + ["--", FAULTKIT, "self"],
                                  env=env or self.env, stdout=out, stderr=log, timeout=60).returncode
        with open(out_path) as f, open(log_path) as g:
            return code, f.read(), g.read()


@unittest.skipUnless(IS_ROOT, "dropping privileges needs root")
class UserSwitch(PrivilegeTestCase):
    def test_user_runs_the_child_with_that_uid_gid_and_only_its_groups(self):
        # lastcall itself carries extra supplementary groups: none of them may reach the child.
        code, out, log = self.run_self(["--user", "nobody"],
                                       prefix=["setpriv", "--groups", "4,24,27", "--"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(st["Uid"], ["65534"] * 4, out)
        self.assertEqual(st["Gid"], ["65534"] * 4, out)
        self.assertEqual(st["Groups"], ["65534"], out)
        self.assertEqual(st["CapEff"], ["0000000000000000"], out)

    def test_user_with_a_group_sets_that_gid_and_it_alone(self):
        code, out, log = self.run_self(["--user", "nobody:daemon"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(st["Uid"], ["65534"] * 4)
        self.assertEqual(st["Gid"], ["1"] * 4)
        self.assertEqual(st["Groups"], ["1"])

    def test_numeric_ids_without_a_passwd_entry_are_accepted(self):
        code, out, log = self.run_self(["--user", "54321:54322"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(st["Uid"], ["54321"] * 4)
        self.assertEqual(st["Gid"], ["54322"] * 4)
        self.assertEqual(st["Groups"], ["54322"])

    def test_without_user_the_child_keeps_lastcalls_ids(self):
        code, out, log = self.run_self([])
        self.assertEqual(code, 0, log)
        self.assertEqual(status_of(out)["Uid"], ["0"] * 4)

    def test_an_unknown_user_aborts_before_anything_runs(self):
        code, out, log = self.run_self(["--user", "no-such-user-lctest"])
        self.assertEqual(code, 2, log)  # a usage error (issue 16)
        self.assertIn("no such user 'no-such-user-lctest'", log)
        self.assertEqual(out, "")  # the command never ran
        self.assertEqual(marked_pids(self.marker), [])

    def test_an_unknown_group_aborts_before_anything_runs(self):
        code, out, log = self.run_self(["--user", "nobody:no-such-group-lctest"])
        self.assertEqual(code, 2, log)
        self.assertIn("no such group 'no-such-group-lctest'", log)
        self.assertEqual(out, "")

    def test_a_setuid_refused_by_the_kernel_aborts_before_exec_with_the_stage_named(self):
        # Without CAP_SETUID (dropped from the bounding set, so lastcall as root lacks it),
        # setgroups and setgid work and setuid fails: the child must not run as root instead.
        code, out, log = self.run_self(["--user", "nobody"],
                                       prefix=["setpriv", "--bounding-set", "-setuid", "--"])
        self.assertEqual(code, 1, log)
        self.assertIn("setuid failed", log)
        self.assertIn("Operation not permitted", log)
        self.assertEqual(out, "")
        self.assertEqual(marked_pids(self.marker), [])

    def test_a_setgroups_refused_for_an_unprivileged_lastcall_aborts_before_exec(self):
        uid = str(40000 + os.getpid() % 20000)
        code, out, log = self.run_self(["--user", "root"],
                                       prefix=["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                               "--clear-groups", "--"])
        self.assertEqual(code, 1, log)
        self.assertIn("setgroups failed", log)
        self.assertEqual(out, "")


class NoNewPrivs(PrivilegeTestCase):
    def test_no_new_privs_is_set_in_the_child(self):
        code, out, log = self.run_self(["--no-new-privs"])
        self.assertEqual(code, 0, log)
        self.assertEqual(status_of(out)["NoNewPrivs"], ["1"])

    def test_without_the_flag_no_new_privs_is_not_set(self):
        code, out, log = self.run_self([])
        self.assertEqual(code, 0, log)
        self.assertEqual(status_of(out)["NoNewPrivs"], ["0"])


class Descriptors(PrivilegeTestCase):
    def assertOnlyStdio(self, args, env=None):
        code, out, log = self.run_self(args, env=env)
        self.assertEqual(code, 0, log)
        self.assertEqual(sorted(status_of(out)["fds"]), ["0", "1", "2"], out)
        return log

    def test_only_fds_0_1_2_reach_the_child_with_report_and_ready_file(self):
        self.assertOnlyStdio(["--report", os.path.join(self.dir, "r.json"),
                              "--ready-file", os.path.join(self.dir, "ready")])

    def test_only_fds_0_1_2_reach_the_child_with_the_proc_tracker(self):
        self.assertOnlyStdio(["--tracker", "proc"])

    @unittest.skipUnless(IS_ROOT, "a writable cgroup2 needs root")
    def test_only_fds_0_1_2_reach_the_child_with_the_cgroup_tracker(self):
        log = self.assertOnlyStdio(["--tracker", "auto"])
        if "cgroup tracker" not in log:
            self.skipTest("no writable cgroup2 here")

    def test_only_fds_0_1_2_reach_the_child_even_when_lastcall_inherited_more(self):
        # An fd lastcall was started with (no CLOEXEC) is not passed on either.
        r, w = os.pipe()
        os.set_inheritable(w, True)
        try:
            out_path = os.path.join(self.dir, "child.out")
            with open(out_path, "wb") as out:
                code = subprocess.run([LASTCALL, "--", FAULTKIT, "self"], env=self.env, stdout=out,
                                      stderr=subprocess.DEVNULL, pass_fds=(w,), timeout=60).returncode
            self.assertEqual(code, 0)
            with open(out_path) as f:
                self.assertEqual(sorted(status_of(f.read())["fds"]), ["0", "1", "2"])
        finally:
            os.close(r), os.close(w)

    def test_only_fds_0_1_2_reach_the_pre_stop_hook(self):
        hook_out = os.path.join(self.dir, "hook.out")
        run = self.start(["--pre-stop", f"{FAULTKIT} self > {hook_out}", "--", FAULTKIT, "wait"])
        line = self.fifo.readline(timeout=20)
        self.assertTrue(line.startswith("ready "), line)
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(timeout=30), 128 + signal.SIGTERM, run.output())
        with open(hook_out) as f:
            # The hook's stdout is the file (1); 2 is lastcall's capture pipe.
            self.assertEqual(sorted(status_of(f.read())["fds"]), ["0", "1", "2"])

    def test_only_fds_0_1_2_reach_the_child_with_the_notify_proxy(self):
        help_text = subprocess.run([LASTCALL, "--help"], capture_output=True, text=True).stdout
        if "--ready-on" not in help_text:
            self.skipTest("this build has no notify proxy")
        sock_path = os.path.join(self.dir, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        self.addCleanup(sock.close)
        env = dict(self.env, NOTIFY_SOCKET=sock_path)
        self.assertOnlyStdio(["--ready-on", "notify"], env=env)



# ---- Issue 16: privileges and hostile input ----

NOBODY = 65534
NOTIFY_SEND = helper("notify_send")


def as_nobody(*cmd):
    """Runs cmd as the attacker: uid/gid nobody, no supplementary group, no capability."""
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
                   + list(cmd), check=True, timeout=30)


def wait_for_text(path, text, timeout=30.0):
    """Waits until the file at path contains text (lastcall's log is the event here)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                if text in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.02)  # a bounded poll of a file, the only way to wait on a log line
    raise TimeoutError(f"{text!r} not in {path} within {timeout}s")


@unittest.skipUnless(IS_ROOT, "the attacker model needs lastcall as root and `nobody`")
class HostileTestCase(PrivilegeTestCase):
    """The test's directory is traversable; app/ is the attacker's own directory (owned by nobody),
    rootonly/ a directory only root may write or enter, victim a file of root's."""

    def setUp(self):
        super().setUp()
        os.chmod(self.dir, 0o755)
        os.chmod(self.fifo.path, 0o666)  # units running as nobody report events here
        self.app = os.path.join(self.dir, "app")
        os.mkdir(self.app)
        os.chown(self.app, NOBODY, NOBODY)
        self.rootonly = os.path.join(self.dir, "rootonly")
        os.mkdir(self.rootonly, 0o700)
        self.victim = os.path.join(self.dir, "victim")
        with open(self.victim, "w") as f:
            f.write("root's secret\n")
        os.chmod(self.victim, 0o600)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o644)
        return path

    def assertVictimIntact(self):
        st = os.lstat(self.victim)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (0, 0o600))
        with open(self.victim) as f:
            self.assertEqual(f.read(), "root's secret\n")

    def stop(self, run, expect=None):
        run.signal(signal.SIGTERM)
        code = run.wait(timeout=60)
        if expect is not None:
            self.assertEqual(code, expect, run.output())
        return code


class UserAppliesToEveryUnit(HostileTestCase):
    """Item 1: --user reaches the pre-stop hook, crontab lines, services without their own `user`,
    and jobs have `user`/`group` keys of their own (verify runs as the job's user)."""

    def assertRanAsNobody(self, out_path, gid=NOBODY):
        with open(out_path) as f:
            st = status_of(f.read())
        self.assertEqual(st["Uid"], [str(NOBODY)] * 4)
        self.assertEqual(st["Gid"], [str(gid)] * 4)
        for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
            self.assertEqual(st[key], ["0000000000000000"], key)
        return st

    def test_the_pre_stop_hook_runs_as_user_without_capabilities(self):
        out = os.path.join(self.app, "hook.out")
        run = self.start(["--user", "nobody", "--pre-stop", f"{FAULTKIT} self > {out}", "--",
                          FAULTKIT, "wait"])
        self.assertTrue(self.fifo.readline().startswith("ready "))
        self.stop(run, 128 + signal.SIGTERM)
        self.assertRanAsNobody(out)

    def test_a_crontab_line_runs_as_user(self):
        out = os.path.join(self.app, "cron.out")
        crontab = self.write("crontab", f"@every 1s {FAULTKIT} self > {out}; echo cron-ran > "
                                        f"{self.fifo.path}\n")
        run = self.start(["--user", "nobody", "--crontab", crontab, "--state-dir",
                          os.path.join(self.dir, "state")])
        self.fifo.expect("cron-ran", timeout=30)
        self.stop(run)
        self.assertRanAsNobody(out)

    def test_a_service_without_its_own_user_runs_as_user(self):
        out = os.path.join(self.app, "svc.out")
        config = self.write("lastcall.toml", f"""
[services.probe]
command = "{FAULTKIT} self > {out}; echo svc-ran > {self.fifo.path}; exec sleep 1000"
""")
        run = self.start(["--user", "nobody", "--config", config])
        self.fifo.expect("svc-ran")
        self.stop(run)
        self.assertRanAsNobody(out)

    def test_no_new_privs_reaches_services_and_jobs(self):
        svc_out = os.path.join(self.app, "svc.out")
        job_out = os.path.join(self.app, "job.out")
        config = self.write("lastcall.toml", f"""
state_dir = "{self.dir}/state"
[services.probe]
command = "{FAULTKIT} self > {svc_out}; echo svc-ran > {self.fifo.path}; exec sleep 1000"
[jobs.probe]
schedule = "@every 1s"
command = "{FAULTKIT} self > {job_out}; echo job-ran > {self.fifo.path}"
""")
        run = self.start(["--user", "nobody", "--no-new-privs", "--config", config])
        seen = set()
        while seen != {"svc-ran", "job-ran"}:
            seen.add(self.fifo.readline(timeout=30))
        self.stop(run)
        for out in (svc_out, job_out):
            self.assertEqual(self.assertRanAsNobody(out)["NoNewPrivs"], ["1"], out)

    def test_a_job_runs_as_its_own_user_key(self):
        out = os.path.join(self.app, "job.out")
        config = self.write("lastcall.toml", f"""
state_dir = "{self.dir}/state"
[jobs.probe]
schedule = "@every 1s"
user = "nobody"
command = "{FAULTKIT} self > {out}; echo job-ran > {self.fifo.path}"
""")
        run = self.start(["--config", config])
        self.fifo.expect("job-ran", timeout=30)
        self.stop(run)
        self.assertRanAsNobody(out)

    def test_a_job_without_user_runs_as_user_and_its_group_key_sets_the_group(self):
        out = os.path.join(self.app, "job.out")
        config = self.write("lastcall.toml", f"""
state_dir = "{self.dir}/state"
[jobs.probe]
schedule = "@every 1s"
group = "daemon"
command = "{FAULTKIT} self > {out}; echo job-ran > {self.fifo.path}"
""")
        run = self.start(["--user", "nobody", "--config", config])
        self.fifo.expect("job-ran", timeout=30)
        self.stop(run)
        st = self.assertRanAsNobody(out, gid=1)
        self.assertEqual(st["Groups"], ["1"])

    def test_verify_runs_as_the_jobs_user(self):
        out_dir = os.path.join(self.app, "out")
        as_nobody("mkdir", out_dir)
        verify_out = os.path.join(self.app, "verify.out")
        config = self.write("lastcall.toml", f"""
state_dir = "{self.dir}/state"
[jobs.probe]
schedule = "@every 1s"
user = "nobody"
output = "{out_dir}/result"
command = "echo data > $LASTCALL_OUTPUT"
verify = "{FAULTKIT} self > {verify_out}; echo verified > {self.fifo.path}"
""")
        run = self.start(["--config", config])
        self.fifo.expect("verified", timeout=30)
        self.stop(run)
        self.assertRanAsNobody(verify_out)


class StrictIds(HostileTestCase):
    """Item 2: an id out of range, an empty part or an unknown name is a usage error (exit 2, one
    line) and nothing runs; before, 4294967296 wrapped to uid 0 and '' meant root."""

    def assertUsageError(self, spec, expected):
        code, out, log = self.run_self(["--user", spec])
        self.assertEqual(code, 2, f"--user {spec!r}: {log}")
        self.assertEqual(len(log.strip().splitlines()), 1, log)
        self.assertIn(expected, log)
        self.assertEqual(out, "", f"--user {spec!r}: the command ran")

    def test_a_user_id_out_of_range_is_a_usage_error_not_root(self):
        for spec in ("4294967296", "4294967295", "18446744073709551616", "99999999999999999999"):
            self.assertUsageError(spec, "out of range")
        self.assertUsageError("65534:4294967296", "out of range")

    def test_a_signed_or_padded_id_is_not_a_number(self):
        for spec in ("-1", "+1", " 1", "1 ", "0x10"):
            code, out, log = self.run_self(["--user", spec])
            self.assertEqual(code, 2, f"--user {spec!r}: {log}")
            self.assertEqual(out, "")

    def test_an_empty_user_or_group_is_a_usage_error_not_root(self):
        self.assertUsageError("", "empty user name")
        self.assertUsageError(":daemon", "empty user name")
        self.assertUsageError("nobody:", "empty group name")

    def test_an_unknown_user_or_group_is_a_usage_error(self):
        self.assertUsageError("no-such-user-lctest", "no such user 'no-such-user-lctest'")
        self.assertUsageError("nobody:no-such-group-lctest", "no such group 'no-such-group-lctest'")

    def test_a_bad_user_or_group_key_is_a_usage_error_naming_file_and_line(self):
        for table, key, value, expected in (
                ("services.a", "user", "4294967296", "user id '4294967296' is out of range"),
                ("services.a", "user", "", "empty user name"),
                ("services.a", "group", "no-such-group-lctest", "no such group"),
                ("jobs.a", "user", "no-such-user-lctest", "no such user"),
                ("jobs.a", "group", "4294967296", "group id '4294967296' is out of range")):
            extra = 'schedule = "@every 1h"\n' if table.startswith("jobs") else ""
            config = self.write("lastcall.toml", f'[{table}]\ncommand = "true"\n{extra}'
                                                 f'{key} = "{value}"\n')
            line = 3 + bool(extra)
            out = subprocess.run([LASTCALL, "--config", config, "--state-dir",
                                  os.path.join(self.dir, "state")],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)
            self.assertIn(f"{config}:{line}: {table}.{key}: {expected}", out.stderr)


class PathsWrittenAsRoot(HostileTestCase):
    """Item 3: what lastcall writes as root (ready file, report, status file, ledger, promoted job
    output) is never redirected by a link, FIFO or directory the app planted."""

    def test_a_ready_file_link_planted_by_the_app_does_not_truncate_its_target(self):
        ready = os.path.join(self.app, "ready")
        as_nobody("ln", "-s", self.victim, ready)
        code, out, log = self.run_self(["--ready-file", ready])
        self.assertEqual(code, 0, log)
        self.assertVictimIntact()
        self.assertIn("symbolic link", log)

    def test_a_fifo_planted_at_the_ready_file_does_not_hang_lastcall(self):
        ready = os.path.join(self.app, "ready")
        as_nobody("mkfifo", ready)
        # Before, open(O_WRONLY) on the FIFO blocked lastcall forever (the timeout below fires).
        code, out, log = self.run_self(["--ready-file", ready])
        self.assertEqual(code, 0, log)
        self.assertIn("not a regular file", log)

    def test_the_report_is_not_written_through_a_directory_link_planted_by_the_app(self):
        as_nobody("ln", "-s", self.rootonly, os.path.join(self.app, "reports"))
        code, out, log = self.run_self(["--report", os.path.join(self.app, "reports/r.json")])
        self.assertEqual(code, 0, log)
        self.assertEqual(os.listdir(self.rootonly), [])
        self.assertIn("symbolic link", log)

    def test_a_report_through_a_link_in_a_root_owned_directory_is_still_written(self):
        # Links only root can change (/var/run -> /run) are followed as before.
        os.symlink(self.rootonly, os.path.join(self.dir, "reports"))
        code, out, log = self.run_self(["--report", os.path.join(self.dir, "reports/r.json")])
        self.assertEqual(code, 0, log)
        self.assertEqual(os.listdir(self.rootonly), ["r.json"])

    def test_the_status_file_is_not_written_into_a_directory_the_app_linked(self):
        as_nobody("ln", "-s", self.rootonly, os.path.join(self.app, "lastcall"))
        config = self.write("lastcall.toml", f"""
[services.probe]
command = "echo svc-ran > {self.fifo.path}; exec sleep 1000"
""")
        run = self.start(["--config", config], env=dict(self.env, XDG_RUNTIME_DIR=self.app))
        self.fifo.expect("svc-ran")
        # The status file is written before the first service starts: it would be there now.
        self.assertEqual(os.listdir(self.rootonly), [])
        self.stop(run)
        self.assertEqual(os.listdir(self.rootonly), [])
        self.assertIn("status file not written", run.output())

    def test_the_ledger_is_not_created_in_a_directory_the_app_linked(self):
        state = os.path.join(self.app, "state")
        as_nobody("ln", "-s", self.rootonly, state)
        crontab = self.write("crontab", "@every 1h true\n")
        out = subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", state],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(out.returncode, 0, out.stderr)
        self.assertIn("state dir", out.stderr)
        self.assertEqual(os.listdir(self.rootonly), [])

    def test_a_ledger_directory_owned_by_the_app_is_refused(self):
        state = os.path.join(self.app, "state")
        as_nobody("mkdir", state)
        out = self.start_hourly_job(state)
        self.assertNotEqual(out.returncode, 0, out.stderr)
        self.assertIn(f"owned by uid {NOBODY}", out.stderr)
        self.assertEqual(os.listdir(state), [])

    def test_a_root_ledger_directory_inside_a_directory_of_the_app_is_refused(self):
        # The directory itself is root's, but its parent is the app's: the app can swap it for
        # one of its own between the check and SQLite's open by path (a review won that race
        # within 40 starts: root's ledger, -wal and -shm in the app's directory).
        state = os.path.join(self.app, "state")
        os.mkdir(state, 0o700)
        out = self.start_hourly_job(state)
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn(f"{self.app} (above {state}) is owned by uid {NOBODY}", out.stderr)
        self.assertEqual(os.listdir(state), [])

    def start_hourly_job(self, state):
        crontab = self.write("crontab", "@every 1h true\n")
        return subprocess.run([LASTCALL, "--crontab", crontab, "--state-dir", state],
                              capture_output=True, text=True, timeout=30)

    def run_job_writing(self, command):
        out_dir = os.path.join(self.app, "out")
        as_nobody("mkdir", out_dir)
        config = self.write("lastcall.toml", f"""
state_dir = "{self.dir}/state"
[jobs.leak]
schedule = "@every 1s"
user = "nobody"
output = "{out_dir}/result"
command = '{command}'
""")
        run = self.start(["--config", config])
        wait_for_text(run.log_path, "job leak: run 1 ", timeout=30)
        wait_for_text(run.log_path, "job leak: run 1 failed", timeout=30)
        self.stop(run)
        return os.path.join(out_dir, "result"), run.output()

    def test_a_job_staging_link_is_not_promoted(self):
        result, log = self.run_job_writing(f'ln -s {self.victim} "$LASTCALL_OUTPUT"')
        self.assertFalse(os.path.lexists(result), "a link to root's file was promoted")
        self.assertIn("is a symbolic link", log)
        self.assertVictimIntact()

    def test_a_job_staging_fifo_is_not_promoted(self):
        result, log = self.run_job_writing('mkfifo "$LASTCALL_OUTPUT"')
        self.assertFalse(os.path.lexists(result))
        self.assertIn("not a regular file", log)


class NotifyProxyForUser(HostileTestCase):
    """Item 4: with --user the child can reach the proxy socket, and the socket is never chowned
    through a path the child could have replaced."""

    def notify_socket(self):
        path = os.path.join(self.dir, "systemd.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(30)
        self.addCleanup(sock.close)
        return path, sock

    def test_a_user_child_can_send_ready_through_the_proxy(self):
        path, sock = self.notify_socket()
        runtime = tempfile.mkdtemp(prefix="lctest-rt-")  # root's, 0700 like a fresh /run
        os.chmod(runtime, 0o755)
        self.addCleanup(shutil.rmtree, runtime, True)
        env = {k: v for k, v in self.env.items() if k != "RUNTIME_DIRECTORY"}
        env.update(NOTIFY_SOCKET=path, XDG_RUNTIME_DIR=runtime)
        run = self.start(["--ready-on", "notify", "--user", "nobody", "--", NOTIFY_SEND,
                          "READY=1", "sleep", "1000"], env=env)
        seen = []
        while "READY=1" not in seen:
            try:
                seen += sock.recv(65536).decode().split("\n")
            except socket.timeout:
                break
        self.stop(run)
        self.assertIn("READY=1", seen, run.output())

    @needs_strace("to widen the race window")
    def test_the_proxy_socket_is_never_chowned_through_a_path(self):
        # The runtime directory is the app's (RUNTIME_DIRECTORY it can write). Each chown(2)
        # lastcall makes is delayed by 2 s (strace's fault injection), so the attacker, once it
        # sees the proxy directory handed to it, has all the time it needs to replace the socket
        # with a link to root's file. Before, the chown of the socket followed that link.
        path, sock = self.notify_socket()
        runtime = os.path.join(self.app, "rt")
        as_nobody("mkdir", runtime)
        attacker_done = os.path.join(self.dir, "attacker.done")
        attacker = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
             sys.executable, "-c", ATTACKER, runtime, self.victim, self.fifo.path])
        self.addCleanup(attacker.kill)
        env = dict(self.env, NOTIFY_SOCKET=path, RUNTIME_DIRECTORY=runtime)
        run = self.start(["--ready-on", "notify", "--user", "nobody", "--", "sleep", "1000"],
                         env=env, prefix=["strace", "-o", "/dev/null", "-e", "trace=chown",
                                          "-e", "inject=chown:delay_enter=2000000"])
        self.assertEqual(self.fifo.readline(timeout=30), "swapped")
        wait_for_text(run.log_path, "notify proxy on", timeout=30)
        # lastcall is strace's child; the stop goes to it.
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == run.proc.pid]
        self.assertEqual(len(pids), 1, pids)
        os.kill(pids[0], signal.SIGTERM)
        run.wait(timeout=60)
        attacker.wait(timeout=30)
        self.assertVictimIntact()


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


# The attacker of test_the_proxy_socket_is_never_chowned_through_a_path, as nobody: waits for a
# notify-* directory that it owns, then puts a link to the victim where the socket was.
ATTACKER = r"""
import os, sys, time
runtime, victim, events = sys.argv[1:4]
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for name in os.listdir(runtime):
        d = os.path.join(runtime, name)
        try:
            if name.startswith("notify-") and os.stat(d).st_uid == os.getuid():
                sock = os.path.join(d, "notify")
                try:
                    os.unlink(sock)
                except FileNotFoundError:
                    pass
                os.symlink(victim, sock)
                with open(events, "w") as f:
                    f.write("swapped\n")
                sys.exit(0)
        except OSError:
            pass
sys.exit(1)
"""


class PathLookupAsUser(HostileTestCase):
    """Item 5: the command is found and checked for execute permission as the target user."""

    def test_the_path_lookup_skips_a_command_the_user_cannot_execute(self):
        # bin-a/tool is root's own (0700): root would pick it; nobody cannot run it and must get
        # bin-b/tool, as its own execvp would.
        for name, mode in (("bin-a", 0o700), ("bin-b", 0o755)):
            os.mkdir(os.path.join(self.dir, name))
            tool = os.path.join(self.dir, name, "tool")
            with open(tool, "w") as f:
                f.write(f"#!/bin/sh\necho {name}\n")
            os.chmod(tool, mode)
        env = dict(self.env, PATH=f"{self.dir}/bin-a:{self.dir}/bin-b:/usr/bin:/bin")
        out = subprocess.run([LASTCALL, "--user", "nobody", "--", "tool"], env=env,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "bin-b\n")

    def test_a_command_only_root_can_reach_is_not_executable_for_the_user(self):
        os.mkdir(os.path.join(self.rootonly, "bin"))
        tool = os.path.join(self.rootonly, "bin", "tool")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\necho ran\n")
        os.chmod(tool, 0o755)
        env = dict(self.env, PATH=f"{self.rootonly}/bin:/usr/bin:/bin")
        out = subprocess.run([LASTCALL, "--user", "nobody", "--", "tool"], env=env,
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 126, out.stderr)
        self.assertEqual(out.stdout, "")
        self.assertIn("Permission denied", out.stderr)


    def test_a_service_workdir_is_entered_as_the_user(self):
        # Before, chdir happened as root: the unit started inside a directory it may not enter.
        config = self.write("lastcall.toml", f"""
[services.w]
command = "echo ran > {self.fifo.path}; exec sleep 1000"
workdir = "{self.rootonly}"
""")
        run = self.start(["--user", "nobody", "--config", config])
        wait_for_text(run.log_path, f"working directory {self.rootonly}: Permission denied",
                      timeout=30)
        self.stop(run)


class LedgerReader(HostileTestCase):
    def test_another_user_can_list_a_stopped_root_ledger_without_writing_it(self):
        # `lastcall runs` as a monitoring user: it opened the file read-write, set its journal
        # mode and applied the schema, and failed with "attempt to write a readonly database".
        state = os.path.join(self.dir, "state")
        config = self.write("jobs.toml", f"""
[jobs.tick]
schedule = "@every 1s"
command = "echo ran > {self.fifo.path}"
""")
        run = self.start(["--config", config, "--state-dir", state])
        self.assertEqual(self.fifo.readline(), "ran")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        before = os.stat(os.path.join(state, "ledger.sqlite"))
        r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "--", LASTCALL, "runs", "--state-dir", state, "--json"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tick", {run["job"] for run in json.loads(r.stdout)})
        after = os.stat(os.path.join(state, "ledger.sqlite"))
        self.assertEqual((before.st_mtime_ns, before.st_size), (after.st_mtime_ns, after.st_size))
        self.assertEqual(sorted(os.listdir(state)), ["ledger.lock", "ledger.sqlite"])


class PreStopOutput(HostileTestCase):
    """Item 6: the hook's stdout blocks when the pipe is full instead of failing with EAGAIN."""

    def test_the_pre_stop_hook_output_is_complete_when_it_fills_the_pipe(self):
        # 20,000 lines (about 1 MB) at once: far more than a pipe holds.
        hook = "seq 1 20000 | sed 's/^/line-/'; echo hook-done"
        run = self.start(["--grace", "60s", "--pre-stop", hook, "--", FAULTKIT, "wait"])
        self.assertTrue(self.fifo.readline().startswith("ready "))
        self.stop(run, 128 + signal.SIGTERM)
        log = run.output()
        lines = [l for l in log.splitlines() if "pre-stop: line-" in l]
        self.assertEqual(len(lines), 20000, log[-2000:])
        self.assertIn("pre-stop: hook-done", log)
        self.assertIn("pre-stop hook exited with code 0", log)


class DependencyCycles(HostileTestCase):
    """Item 7: dependency resolution without recursion, and cycle errors at the closing edge."""

    def test_a_100000_long_depends_on_chain_is_a_usage_error_at_its_cycle_not_a_crash(self):
        n = 100000
        parts = []
        for i in range(n):
            parts.append(f'[services.s{i}]\ncommand = "true"\ndepends_on = ["s{(i + 1) % n}"]\n')
        config = self.write("lastcall.toml", "".join(parts))
        out = subprocess.run([LASTCALL, "--config", config], capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(out.returncode, 2, out.stderr[-2000:])
        self.assertEqual(len(out.stderr.strip().splitlines()), 1)
        # s99999's depends_on (line 3 of its table) closes the cycle.
        self.assertIn(f"{config}:{3 * n}: services.s{n - 1}.depends_on: dependency cycle s0 -> s1",
                      out.stderr)

    def test_a_cycle_error_names_the_services_and_the_edge_that_closes_it(self):
        config = self.write("lastcall.toml", """[services.a]
command = "true"
depends_on = ["b"]

[services.b]
command = "true"
depends_on = ["c"]

[services.c]
command = "true"
depends_on = ["a"]
""")
        out = subprocess.run([LASTCALL, "--config", config], capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(f"{config}:11: services.c.depends_on: dependency cycle a -> b -> c -> a",
                      out.stderr)


class GroupsAndCapabilities(HostileTestCase):
    """Item 8: --user sets the user's supplementary groups (initgroups) and none of root's; every
    capability set is empty afterwards, whatever securebits lastcall was started with."""

    def test_user_sets_its_supplementary_groups_and_clears_roots(self):
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            self.skipTest("needs a user with a supplementary group (postgres here)")
        groups = sorted(os.getgrouplist("postgres", pw.pw_gid))
        if len(groups) < 2:
            self.skipTest("postgres has no supplementary group here")
        code, out, log = self.run_self(["--user", "postgres"],
                                       prefix=["setpriv", "--groups", "4,24,27", "--"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(sorted(int(g) for g in st["Groups"]), groups)

    def test_numeric_user_with_a_passwd_entry_gets_its_group_and_groups(self):
        pw = pwd.getpwnam("postgres") if "postgres" in [p.pw_name for p in pwd.getpwall()] else None
        if pw is None:
            self.skipTest("needs the postgres user")
        code, out, log = self.run_self(["--user", str(pw.pw_uid)])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(st["Gid"], [str(pw.pw_gid)] * 4)
        self.assertEqual(sorted(int(g) for g in st["Groups"]),
                         sorted(os.getgrouplist("postgres", pw.pw_gid)))

    def test_every_capability_set_is_empty_after_the_switch(self):
        # lastcall started with inheritable and ambient capabilities and SECBIT_NO_SETUID_FIXUP
        # (which stops the kernel from clearing them at setuid): the child still has none.
        code, out, log = self.run_self(
            ["--user", "nobody"],
            prefix=["setpriv", "--inh-caps", "+net_bind_service,+net_raw", "--ambient-caps",
                    "+net_bind_service", "--securebits", "+no_setuid_fixup", "--"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"):
            self.assertEqual(st[key], ["0000000000000000"], f"{key}: {out}")

    def test_no_new_privs_is_set_with_user(self):
        code, out, log = self.run_self(["--user", "nobody", "--no-new-privs"])
        self.assertEqual(code, 0, log)
        self.assertEqual(status_of(out)["NoNewPrivs"], ["1"])

    def test_root_as_user_keeps_its_capabilities(self):
        # --user root:daemon changes the group only; root stays root (documented).
        code, out, log = self.run_self(["--user", "root:daemon"])
        self.assertEqual(code, 0, log)
        st = status_of(out)
        self.assertEqual(st["Uid"], ["0"] * 4)
        self.assertEqual(st["Gid"], ["1"] * 4)
        self.assertNotEqual(st["CapEff"], ["0000000000000000"])


if __name__ == "__main__":
    unittest.main()
