"""lastcall as a drop-in for tini, docker-init and dumb-init (issue 5).

The real binary runs through symlinks named like those programs, in a temp dir. Where a behaviour
is observable without running a long-lived tree (exit codes of usage and exec errors, option
parsing), it is compared with the real /usr/bin/tini and /usr/bin/dumb-init installed here.
"""
import os
import signal
import subprocess
import unittest

from lctest import LASTCALL, LastcallTestCase, Run, helper

REAL_TINI = "/usr/bin/tini"
REAL_DUMB_INIT = "/usr/bin/dumb-init"


def proc_stat(pid):
    """(state, pgrp, session) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[2]), int(fields[3])


class Started(Run):
    """A lastcall running under a compat name, with its stderr log in a file."""

    def __init__(self, argv, env, log_path):
        super().__init__(None, env=env, argv=argv, log_path=log_path)


class CompatTestCase(LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.links = {}
        for name in ("tini", "docker-init", "dumb-init"):
            path = os.path.join(self.dir, name)
            os.symlink(os.path.abspath(LASTCALL), path)
            self.links[name] = path
        self.started = []

    def tearDown(self):
        for s in self.started:
            if s.proc.poll() is None:
                s.proc.kill()
                s.wait()
        super().tearDown()

    def run_as(self, name, args, env=None, timeout=30):
        exe = self.links[name] if name in self.links else name
        return subprocess.run([exe] + args, env=dict(self.env, **(env or {})),
                              capture_output=True, timeout=timeout, text=True)

    def start_as(self, name, args, env=None):
        log = os.path.join(self.dir, f"{name}-{len(self.started)}.log")
        s = Started([self.links[name]] + args, dict(self.env, **(env or {})), log)
        self.started.append(s)
        return s

    def ready(self, role):
        """Waits for ROLE's ready line; returns its pid."""
        while True:
            words = self.fifo.readline().split()
            if words[:2] == [role, "ready"]:
                return int(words[2])

    def ready_both(self):
        """Waits for the ready lines of a probe and its forked grandchild; returns their pids."""
        pids = {}
        while len(pids) < 2:
            words = self.fifo.readline().split()
            self.assertEqual(words[1], "ready", words)
            pids[words[0]] = int(words[2])
        return pids

    def next_line_of(self, role):
        while True:
            line = self.fifo.readline()
            if line.startswith(role + " "):
                return line


class TiniFlags(CompatTestCase):
    def test_version_is_a_tini_version_line_that_docker_info_accepts(self):
        for name in ("tini", "docker-init"):
            with self.subTest(name=name):
                r = self.run_as(name, ["--version"])
                self.assertEqual(r.returncode, 0)
                self.assertRegex(r.stdout, r"^tini version 0\.19\.0 - lastcall \S+\n$")

    def test_version_is_only_an_option_when_it_is_the_sole_argument(self):
        for exe in ("tini", REAL_TINI):
            with self.subTest(exe=exe):
                self.assertEqual(self.run_as(exe, ["--version", "true"]).returncode, 1)

    def test_h_prints_usage_on_stdout_and_l_prints_license_both_exit_0(self):
        r = self.run_as("tini", ["-h"])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("Usage: tini [OPTIONS] PROGRAM -- [ARGS] | --version", r.stdout)
        r = self.run_as("docker-init", ["-l"])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("license", r.stdout)

    def test_usage_errors_exit_1_with_one_line_like_tini(self):
        cases = [["-x", "true"], ["-p"], ["-p", "TERM", "true"], ["-p", "15", "true"],
                 ["-e", "256", "true"], ["-e", "12x", "true"], [], ["-s"]]
        for args in cases:
            with self.subTest(args=args):
                real = self.run_as(REAL_TINI, args)
                ours = self.run_as("tini", args)
                self.assertEqual(real.returncode, 1)
                self.assertEqual(ours.returncode, 1)
                self.assertEqual(len(ours.stderr.splitlines()), 1, ours.stderr)
                self.assertTrue(ours.stderr.startswith("tini: "), ours.stderr)

    def test_exec_failures_exit_127_and_126_like_tini(self):
        for path, code in (("/nonexistent/cmd", 127), ("/etc/passwd", 126)):
            with self.subTest(path=path):
                self.assertEqual(self.run_as(REAL_TINI, ["-s", "--", path]).returncode, code)
                self.assertEqual(self.run_as("tini", ["-s", "--", path]).returncode, code)

    def test_options_after_the_program_are_tinis_unless_double_dash_ends_them(self):
        # tini's getopt permutes: "-w" after echo is tini's, after "--" it is echo's.
        for args, out in ((["-s", "echo", "-w", "hi"], "hi\n"),
                          (["-s", "--", "echo", "-w", "hi"], "-w hi\n")):
            with self.subTest(args=args):
                self.assertEqual(self.run_as(REAL_TINI, args).stdout, out)
                r = self.run_as("tini", args)
                self.assertEqual((r.returncode, r.stdout), (0, out))

    def test_e_maps_listed_exit_codes_to_0_including_death_by_sigterm(self):
        die_by_term = ["sh", "-c", "kill -TERM $$"]
        cases = [([], die_by_term, 143), (["-e", "143"], die_by_term, 0),
                 (["-e", "3", "-e", "4"], ["sh", "-c", "exit 4"], 0),
                 (["-e", "3", "-e", "4"], ["sh", "-c", "exit 5"], 5)]
        for flags, cmd, code in cases:
            with self.subTest(flags=flags, cmd=cmd):
                self.assertEqual(self.run_as("tini", ["-s"] + flags + ["--"] + cmd).returncode, code)

    def test_without_g_only_the_child_gets_a_forwarded_signal(self):
        t = self.start_as("tini", ["-s", "--", helper("sigprobe"), "child", "--fork", "grandchild"])
        pids = self.ready_both()
        t.signal(signal.SIGUSR1)
        self.fifo.expect("child 10")
        # Had the grandchild been sent SIGUSR1 too, it would be pending before this SIGUSR2 and
        # reported first (sigwaitinfo takes the lowest number first).
        os.kill(pids["grandchild"], signal.SIGUSR2)
        self.assertEqual(self.next_line_of("grandchild"), "grandchild 12")
        os.kill(pids["grandchild"], signal.SIGTERM)
        self.fifo.expect("grandchild 15")
        t.signal(signal.SIGTERM)
        self.assertEqual(t.wait(), 0)
        self.assertNoLeftovers()

    def test_g_and_TINI_KILL_PROCESS_GROUP_send_forwarded_signals_to_the_group(self):
        for flags, env in ((["-g"], {}), ([], {"TINI_KILL_PROCESS_GROUP": "1"})):
            with self.subTest(flags=flags, env=env):
                t = self.start_as("tini", ["-s"] + flags + ["--", helper("sigprobe"), "child",
                                                            "--fork", "grandchild"], env)
                self.ready_both()
                t.signal(signal.SIGUSR1)
                got = {self.fifo.readline(), self.fifo.readline()}
                self.assertEqual(got, {"child 10", "grandchild 10"})
                t.signal(signal.SIGTERM)  # the group: both probes end
                self.assertEqual({self.fifo.readline(), self.fifo.readline()},
                                 {"child 15", "grandchild 15"})
                self.assertEqual(t.wait(), 0)
                self.assertNoLeftovers()

    def test_p_sends_the_signal_to_the_child_when_lastcall_dies(self):
        t = self.start_as("tini", ["-s", "-p", "SIGUSR1", "--", helper("sigprobe"), "child"])
        self.ready("child")
        t.proc.kill()
        t.wait()
        self.fifo.expect("child 10")

    def test_child_is_in_its_own_group_in_lastcalls_session(self):
        t = self.start_as("tini", ["-s", "--", helper("sigprobe"), "child"])
        pid = self.ready("child")
        _, pgrp, sid = proc_stat(pid)
        self.assertEqual(pgrp, pid)
        self.assertEqual(sid, os.getsid(t.proc.pid))
        t.signal(signal.SIGTERM)
        self.assertEqual(t.wait(), 0)

    ORPHAN = ["sh", "-c", "(sh -c 'exit 3' &); exit 0"]

    def test_w_warns_for_each_reaped_zombie_that_is_not_the_child(self):
        for flags, warned in ((["-w"], True), ([], False)):
            with self.subTest(flags=flags):
                r = self.run_as("tini", ["-s"] + flags + ["--"] + self.ORPHAN)
                self.assertEqual(r.returncode, 0)
                self.assertEqual("warning: reaped zombie process pid" in r.stderr, warned, r.stderr)

    def test_s_and_TINI_SUBREAPER_silence_the_subreaper_warning(self):
        for flags, env, warned in (([], {}, True), (["-s"], {}, False),
                                   ([], {"TINI_SUBREAPER": ""}, False)):
            with self.subTest(flags=flags, env=env):
                r = self.run_as("tini", flags + ["--", "true"], env)
                self.assertEqual(r.returncode, 0)
                self.assertEqual("registered as a child subreaper" in r.stderr, warned, r.stderr)

    def test_v_and_TINI_VERBOSITY_set_the_log_level(self):
        # Default (1): warnings only. -v: info. -vv: debug. TINI_VERBOSITY replaces the -v count.
        cases = [([], {}, set()), (["-v"], {}, {"info"}), (["-vv"], {}, {"info", "debug"}),
                 (["-vvv"], {"TINI_VERBOSITY": "1"}, set()),
                 ([], {"TINI_VERBOSITY": "3"}, {"info", "debug"})]
        for flags, env, levels in cases:
            with self.subTest(flags=flags, env=env):
                r = self.run_as("tini", ["-s"] + flags + ["--"] + self.ORPHAN, env)
                self.assertEqual(r.returncode, 0)
                self.assertEqual("] info: " in r.stderr, "info" in levels, r.stderr)
                self.assertEqual("] debug: " in r.stderr, "debug" in levels, r.stderr)
        r = self.run_as("tini", ["--", "true"], {"TINI_VERBOSITY": "0"})
        self.assertEqual(r.stderr, "")  # not even the subreaper warning


class DumbInitFlags(CompatTestCase):
    def test_version_and_help_print_on_stderr_and_exit_0(self):
        for args in (["-V"], ["--version"]):
            with self.subTest(args=args):
                r = self.run_as("dumb-init", args)
                self.assertEqual((r.returncode, r.stdout), (0, ""))
                self.assertTrue(r.stderr.startswith("dumb-init v1.2.5"), r.stderr)
        for args in (["-h"], ["--help"]):
            with self.subTest(args=args):
                r = self.run_as("dumb-init", args)
                self.assertEqual((r.returncode, r.stdout), (0, ""))
                self.assertIn("--single-child", r.stderr)

    def test_usage_errors_exit_1_with_one_line_like_dumb_init(self):
        cases = [["-x", "true"], ["--bogus", "true"], ["-r"], ["-r", "15", "true"],
                 ["-r", "99:1", "true"], ["-r", "15:32", "true"], ["-r", "0:3", "true"], []]
        for args in cases:
            with self.subTest(args=args):
                self.assertEqual(self.run_as(REAL_DUMB_INIT, args).returncode, 1)
                ours = self.run_as("dumb-init", args)
                self.assertEqual(ours.returncode, 1)
                self.assertEqual(len(ours.stderr.splitlines()), 1, ours.stderr)
                self.assertTrue(ours.stderr.startswith("dumb-init: "), ours.stderr)

    def test_exec_failures_exit_2_like_dumb_init(self):
        for path in ("/nonexistent/cmd", "/etc/passwd"):
            with self.subTest(path=path):
                self.assertEqual(self.run_as(REAL_DUMB_INIT, [path]).returncode, 2)
                self.assertEqual(self.run_as("dumb-init", [path]).returncode, 2)

    def test_options_end_at_the_program(self):
        for exe in (REAL_DUMB_INIT, "dumb-init"):
            with self.subTest(exe=exe):
                self.assertEqual(self.run_as(exe, ["sh", "-c", "exit 3"]).returncode, 3)

    def test_rewrite_15_to_3_delivers_sigquit_for_sigterm(self):
        for flag in ("-r", "--rewrite"):
            with self.subTest(flag=flag):
                d = self.start_as("dumb-init", [flag, "15:3", helper("sigprobe"), "child"])
                self.ready("child")
                d.signal(signal.SIGTERM)
                self.assertEqual(self.fifo.readline(), "child 3")
                self.assertEqual(d.wait(), 0)

    def test_rewrite_to_0_drops_the_signal(self):
        d = self.start_as("dumb-init", ["-r", "15:0", helper("sigprobe"), "child"])
        self.ready("child")
        d.signal(signal.SIGTERM)
        # SIGWINCH (28) is sent after SIGTERM (15): had SIGTERM been forwarded in any form, the
        # child would report it first.
        d.signal(signal.SIGWINCH)
        self.assertEqual(self.fifo.readline(), "child 28")
        d.signal(signal.SIGINT)
        self.assertEqual(self.fifo.readline(), "child 2")
        self.assertEqual(d.wait(), 0)

    def test_default_setsid_mode_signals_the_whole_group_of_a_session_leader(self):
        d = self.start_as("dumb-init", [helper("sigprobe"), "child", "--fork", "grandchild"])
        pids = self.ready_both()
        _, pgrp, sid = proc_stat(pids["child"])
        self.assertEqual((pgrp, sid), (pids["child"], pids["child"]))
        d.signal(signal.SIGUSR1)
        self.assertEqual({self.fifo.readline(), self.fifo.readline()},
                         {"child 10", "grandchild 10"})
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait(), 0)
        self.assertNoLeftovers()

    def test_single_child_and_DUMB_INIT_SETSID_0_signal_only_the_child_without_setsid(self):
        for flags, env in ((["-c"], {}), (["--single-child"], {}), ([], {"DUMB_INIT_SETSID": "0"})):
            with self.subTest(flags=flags, env=env):
                d = self.start_as("dumb-init", flags + [helper("sigprobe"), "child", "--fork",
                                                        "grandchild"], env)
                pids = self.ready_both()
                _, _, sid = proc_stat(pids["child"])
                self.assertEqual(sid, os.getsid(d.proc.pid))
                d.signal(signal.SIGUSR1)
                self.fifo.expect("child 10")
                os.kill(pids["grandchild"], signal.SIGUSR2)
                self.assertEqual(self.next_line_of("grandchild"), "grandchild 12")
                os.kill(pids["grandchild"], signal.SIGTERM)
                self.fifo.expect("grandchild 15")
                d.signal(signal.SIGTERM)
                self.fifo.expect("child 15")
                self.assertEqual(d.wait(), 0)
                self.assertNoLeftovers()

    def test_verbose_and_DUMB_INIT_DEBUG_1_log_debug_lines_otherwise_quiet(self):
        cmd = ["sh", "-c", "(sh -c 'exit 3' &); exit 0"]
        cases = [([], {}, False), (["-v"], {}, True), (["--verbose"], {}, True),
                 ([], {"DUMB_INIT_DEBUG": "1"}, True), ([], {"DUMB_INIT_DEBUG": "yes"}, False)]
        for flags, env, verbose in cases:
            with self.subTest(flags=flags, env=env):
                r = self.run_as("dumb-init", flags + cmd, env)
                self.assertEqual(r.returncode, 0)
                self.assertEqual("] debug: " in r.stderr, verbose, r.stderr)
                if not verbose:
                    self.assertEqual(r.stderr, "")


class NativeCompatFlag(CompatTestCase):
    def test_compat_as_first_argument_selects_the_flag_set(self):
        r = subprocess.run([LASTCALL, "--compat", "tini", "--version"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith("tini version "), r.stdout)
        r = subprocess.run([LASTCALL, "--compat=dumb-init", "-r", "15:0", "sh", "-c", "exit 4"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 4)

    def test_compat_elsewhere_or_with_an_unknown_name_is_a_usage_error(self):
        for args in (["--grace", "1s", "--compat", "tini", "--", "true"],
                     ["--compat", "catatonit", "true"]):
            with self.subTest(args=args):
                r = subprocess.run([LASTCALL] + args, capture_output=True, text=True)
                self.assertEqual(r.returncode, 2)
                self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
