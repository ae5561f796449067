"""Privilege drop and descriptor hygiene (issue 9): --user, --no-new-privs, and no descriptor of
lastcall's reaching the child. The child is faultkit's `self` mode, which prints its open fds and
the Uid/Gid/Groups/NoNewPrivs lines of /proc/self/status to stdout.
"""
import os
import signal
import socket
import subprocess
import unittest

from lctest import LASTCALL, LastcallTestCase, helper, marked_pids

FAULTKIT = helper("faultkit")
IS_ROOT = os.geteuid() == 0


def status_of(output):
    """{'Uid': [...], 'Gid': [...], 'Groups': [...], 'NoNewPrivs': [...], 'fds': {fd: target}}"""
    info = {}
    for line in output.splitlines():
        if line.startswith("fds:"):
            info["fds"] = dict(item.split("=", 1) for item in line.split()[1:])
        elif ":" in line and line.split(":", 1)[0] in ("Uid", "Gid", "Groups", "NoNewPrivs", "CapEff"):
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
        self.assertEqual(code, 1, log)
        self.assertIn("no such user 'no-such-user-lctest'", log)
        self.assertEqual(out, "")  # the command never ran
        self.assertEqual(marked_pids(self.marker), [])

    def test_an_unknown_group_aborts_before_anything_runs(self):
        code, out, log = self.run_self(["--user", "nobody:no-such-group-lctest"])
        self.assertEqual(code, 1, log)
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


if __name__ == "__main__":
    unittest.main()
