# SPDX-License-Identifier: Apache-2.0
"""Issue 2: the core: exit codes, signal forwarding, reaping, escalation, a clean child environment."""
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, helper


def run(args, **kw):
    return subprocess.run([LASTCALL, "--log-level", "warn"] + args, capture_output=True, text=True,
                          timeout=60, **kw)


class ExitCodes(unittest.TestCase):
    def test_child_exit_codes_propagate(self):
        for code in (0, 3, 255):
            with self.subTest(code=code):
                self.assertEqual(run(["--", "sh", "-c", f"exit {code}"]).returncode, code)

    def test_a_child_killed_by_sigsegv_gives_139(self):
        self.assertEqual(run(["--", "sh", "-c", "kill -SEGV $$"]).returncode, 139)

    def test_a_missing_command_exits_127_naming_path_and_errno(self):
        r = run(["--", "/nonexistent/lastcall-missing"])
        self.assertEqual(r.returncode, 127)
        self.assertIn("/nonexistent/lastcall-missing", r.stderr)
        self.assertIn("No such file or directory", r.stderr)
        r = run(["--", "lastcall-missing-in-path"])
        self.assertEqual(r.returncode, 127)
        self.assertIn("lastcall-missing-in-path", r.stderr)

    def test_a_non_executable_command_exits_126(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "not-executable")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(path, 0o644)
            r = run(["--", path])
            self.assertEqual(r.returncode, 126)
            self.assertIn(path, r.stderr)
            self.assertIn("Permission denied", r.stderr)

    def test_a_script_without_a_shebang_runs_under_bin_sh_as_execvp_runs_it(self):
        # tini and dumb-init (execvp) run it; lastcall refused it with 126 "Exec format error".
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "no-shebang")
            with open(path, "w") as f:
                f.write('echo "ran with $1"\nexit 5\n')
            os.chmod(path, 0o755)
            env = dict(os.environ, PATH=d + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
            for argv in ([path, "arg"], ["no-shebang", "arg"]):
                with self.subTest(argv=argv[0]):
                    r = subprocess.run([LASTCALL, "--"] + argv, capture_output=True, text=True,
                                       timeout=30, env=env)
                    self.assertEqual((r.returncode, r.stdout), (5, "ran with arg\n"), r.stderr)

    def test_a_script_whose_interpreter_is_missing_is_named_as_such(self):
        # The kernel's ENOENT read "No such file or directory" for a file that is right there.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "script")
            with open(path, "w") as f:
                f.write("#!/nonexistent/lastcall-interp -x\necho hi\n")
            os.chmod(path, 0o755)
            r = run(["--", path])
            self.assertEqual(r.returncode, 127)
            self.assertIn(f"cannot execute {path}: its interpreter /nonexistent/lastcall-interp "
                          "does not exist (#! line)", r.stderr)

    def test_an_empty_path_searches_only_the_working_directory_as_execvp_does(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PATH="")
            r = subprocess.run([LASTCALL, "--", "true"], capture_output=True, text=True,
                               timeout=30, env=env, cwd=d)
            self.assertEqual(r.returncode, 127, r.stderr)
            os.symlink("/bin/true", os.path.join(d, "true"))
            r = subprocess.run([LASTCALL, "--", "true"], capture_output=True, text=True,
                               timeout=30, env=env, cwd=d)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_usage_errors_exit_2_with_one_line(self):
        cases = {
            "unknown option": (["--bogus", "--", "true"], "--bogus"),
            "bad duration": (["--grace", "5x", "--", "true"], "invalid duration '5x'"),
            "no command": ([], "no command"),
            "drain delay longer than grace": (["--grace", "1s", "--drain-delay", "2s", "--", "true"],
                                              "--drain-delay"),
            "bad signal": (["--stop-signal", "NOPE", "--", "true"], "invalid signal 'NOPE'"),
        }
        for name, (args, needle) in cases.items():
            with self.subTest(name):
                r = subprocess.run([LASTCALL] + args, capture_output=True, text=True, timeout=10)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(needle, r.stderr)

    def test_options_end_at_the_command(self):
        # Without "--", "-c" belongs to sh, not to lastcall.
        r = run(["sh", "-c", "exit 4"])
        self.assertEqual(r.returncode, 4)

    def test_json_log_format_prints_one_json_object_per_line(self):
        r = subprocess.run([LASTCALL, "-v", "--log-format", "json", "--", "sh", "-c", "exit 0"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        lines = r.stderr.strip().splitlines()
        self.assertGreater(len(lines), 3)
        events = [json.loads(line) for line in lines]
        self.assertTrue(all({"time", "level", "pid", "msg"} <= set(e) for e in events))
        self.assertTrue(any(e["msg"].startswith("spawned pid") for e in events))

    def test_version_and_help_exit_0(self):
        self.assertEqual(subprocess.run([LASTCALL, "--version"], capture_output=True).returncode, 0)
        r = subprocess.run([LASTCALL, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--grace", r.stdout)


def ignore_glibc_reserved_signals():
    """Ignores signals 32 and 33 with the raw system call (glibc's sigaction refuses them), as
    some parents of lastcall leave them: lastcall must still hand the child default dispositions."""
    import ctypes

    class KernelSigaction(ctypes.Structure):
        _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong),
                    ("restorer", ctypes.c_void_p), ("mask", ctypes.c_ulong)]

    libc = ctypes.CDLL(None, use_errno=True)
    ignore = KernelSigaction(1, 0, None, 0)  # SIG_IGN
    for sig in (32, 33):
        libc.syscall(13, sig, ctypes.byref(ignore), None, 8)  # 13: rt_sigaction on x86_64


class ChildEnvironment(LastcallTestCase):
    def test_the_child_has_no_blocked_or_ignored_signals_and_only_fds_0_1_2(self):
        ready = os.path.join(self.dir, "ready")
        report = os.path.join(self.dir, "report.json")
        # lastcall itself runs with SIGINT/SIGQUIT ignored (as under nohup or a CI runner) and extra
        # fds open: none of it may reach the child.
        r = subprocess.run(
            ["sh", "-c", 'trap "" INT QUIT USR2; exec "$@" 7</dev/null', "sh", LASTCALL,
             "--ready-file", ready, "--report", report, "--", helper("childinfo")],
            capture_output=True, text=True, timeout=30, env=self.env,
            preexec_fn=ignore_glibc_reserved_signals)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("SigBlk:\t0000000000000000", r.stdout)
        self.assertIn("SigIgn:\t0000000000000000", r.stdout)
        self.assertIn("fds: 0 1 2\n", r.stdout)


class Forwarding(LastcallTestCase):
    def _tree(self):
        # termlog is the main child; a second termlog runs in its process group as a grandchild.
        return ["--", "sh", "-c", f'{helper("termlog")} 0 & exec {helper("termlog")} 5']

    def check_sigterm_reaches_child_and_grandchild(self, pid1):
        run = self.start(["--grace", "5s"] + self._tree(), pid1=pid1)
        self.fifo.expect("started")
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        got = [self.fifo.readline().split()[0], self.fifo.readline().split()[0]]
        self.assertEqual(got, ["TERM", "TERM"])
        self.assertEqual(run.wait(), 5, run.output())
        self.assertNoLeftovers()

    def test_sigterm_reaches_the_child_and_a_grandchild_in_its_group(self):
        self.check_sigterm_reaches_child_and_grandchild(pid1=False)

    def test_sigterm_reaches_the_child_and_a_grandchild_in_its_group_as_pid1(self):
        self.check_sigterm_reaches_child_and_grandchild(pid1=True)

    def test_hup_usr1_usr2_are_forwarded_to_the_group_without_shutting_down(self):
        run = self.start(["--"] + [helper("termlog"), "9"])
        self.fifo.expect("started")
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            run.signal(sig)
            self.assertEqual(self.fifo.readline().split()[0], sig.name[3:])
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline().split()[0], "TERM")
        self.assertEqual(run.wait(), 9)
        self.assertEqual(run.output().count("running -> draining"), 1)


class Reaping(LastcallTestCase):
    def test_as_pid1_2000_double_forked_orphans_leave_no_zombie(self):
        run = self.start(["--", helper("orphan_maker"), "2000"], pid1=True)
        self.assertEqual(self.fifo.readline(timeout=120), "made 2000")
        lastcall = run.lastcall_pid()
        ns = os.readlink(f"/proc/{lastcall}/ns/pid")

        def zombies_in_namespace():
            count = 0
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                        continue
                    with open(f"/proc/{entry}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            count += 1
                except OSError:
                    continue
            return count

        # Every orphan has exited by now (each exits at once); lastcall reaps them as SIGCHLDs
        # arrive. Bounded wait for the count to reach zero.
        deadline = time.monotonic() + 10
        while zombies_in_namespace() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(zombies_in_namespace(), 0)
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGTERM)
        self.assertIn("2001 reaped", run.output())

    def test_the_main_commands_exit_in_a_burst_of_orphan_exits_ends_the_run_with_its_code(self):
        # While running, a burst of exits is swept at a pace and SIGCHLD stops waking lastcall
        # between sweeps (process/reap_pacer.hpp); the main child's exit in the middle of it is
        # seen on its pidfd, and the shutdown then reaps every orphan.
        for pid1 in (True, False):
            with self.subTest(pid1=pid1):
                run = self.start(["--", helper("orphan_maker"), "--burst", "1500", "7"],
                                 pid1=pid1)
                self.assertEqual(self.fifo.readline(timeout=120), "ready 1500")
                self.assertEqual(run.wait(timeout=60), 7)
                self.assertIn("1501 reaped", run.output())
                self.assertNotIn("unpaced", run.output())

    def test_as_a_subreaper_orphans_come_back_and_are_reaped(self):
        run = self.start(["--", helper("orphan_maker"), "200"])
        self.assertEqual(self.fifo.readline(), "made 200")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGTERM)
        self.assertIn("201 reaped", run.output())


class Escalation(LastcallTestCase):
    IGNORER = ["sh", "-c", 'trap "" TERM; echo started > "$EVENTS"; while :; do sleep 1; done']

    def test_a_child_that_ignores_sigterm_is_sigkilled_when_the_grace_runs_out(self):
        run = self.start(["--grace", "1s", "--"] + self.IGNORER)
        self.fifo.expect("started")
        t0 = time.monotonic()
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGKILL)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertIn("grace expired", run.output())
        self.assertIn("shutdown forced", run.output())
        self.assertNoLeftovers()

    def test_a_second_sigterm_escalates_to_sigkill_at_once(self):
        run = self.start(["--grace", "60s", "--"] + self.IGNORER)
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        time.sleep(0.3)  # deliberately outside the 100 ms coalescing window: a human's second ^C
        t0 = time.monotonic()
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(timeout=30), 128 + signal.SIGKILL)
        self.assertLess(time.monotonic() - t0, 5)  # far from the 60 s grace
        self.assertIn("received SIGTERM again: escalating to SIGKILL", run.output())
        self.assertNoLeftovers()

    def test_a_sigint_after_a_sigterm_escalates_and_is_not_called_a_repeat(self):
        run = self.start(["--grace", "60s", "--"] + self.IGNORER)
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        time.sleep(0.3)  # outside the coalescing window
        run.signal(signal.SIGINT)
        self.assertEqual(run.wait(timeout=30), 128 + signal.SIGKILL)
        self.assertIn("received SIGINT after SIGTERM: escalating to SIGKILL", run.output())
        self.assertNoLeftovers()

    def test_a_burst_of_500_term_int_hup_neither_crashes_nor_tears_down_twice(self):
        for pid1 in (False, True):
            with self.subTest(pid1=pid1):
                run = self.start(["--grace", "10s", "--", helper("termlog"), "7"], pid1=pid1)
                self.fifo.expect("started")
                target = run.lastcall_pid()
                sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
                for i in range(500):
                    try:
                        os.kill(target, sigs[i % 3])
                    except ProcessLookupError:
                        # The first SIGTERM reaches termlog before lastcall's bookkeeping, and
                        # termlog exits on it: lastcall may be gone before the burst is over.
                        break
                self.assertEqual(run.wait(), 7, run.output())
                out = run.output()
                self.assertEqual(out.count("running -> draining"), 1, out)
                self.assertNotIn("SIGKILL", out)
                while True:  # drain what termlog reported before it exited
                    try:
                        self.fifo.readline(timeout=0.2)
                    except TimeoutError:
                        break


if __name__ == "__main__":
    unittest.main()


class DefaultOutput(LastcallTestCase):
    """Like tini: a clean run says nothing; a shutdown says one line; -v shows the lifecycle."""

    def test_a_command_that_simply_ends_prints_nothing_at_the_default_level(self):
        for argv in (["--", "true"], ["true"], ["--grace", "2s", "--", "sh", "-c", "exit 0"]):
            with self.subTest(argv=argv):
                r = subprocess.run([LASTCALL] + argv, capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0)
                self.assertEqual(r.stderr, "")
                self.assertEqual(r.stdout, "")

    def test_a_shutdown_prints_one_summary_line_with_verdict_time_and_counts(self):
        run = self.start(["--", "sh", "-c", 'echo up > "$EVENTS"; exec sleep 60'], quiet=True)
        self.fifo.expect("up")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGTERM)
        lines = run.output().splitlines()
        self.assertEqual(len(lines), 1, run.output())
        self.assertIn("shutdown clean", lines[0])
        self.assertIn("1 sent the stop signal", lines[0])
        self.assertRegex(lines[0], r"\d+ms of 8000ms grace used")
        self.assertNotIn("SIGCONT", run.output())

    def test_dash_v_shows_the_lifecycle_and_no_sigcont_after_the_shutdown(self):
        run = self.start(["-v", "--", "sh", "-c", 'echo up > "$EVENTS"; exec sleep 60'], quiet=True)
        self.fifo.expect("up")
        run.signal(signal.SIGTERM)
        run.wait()
        out = run.output()
        for text in ("spawned pid", "received SIGTERM: starting shutdown", "state running -> draining",
                     "shutdown clean"):
            self.assertIn(text, out)
        self.assertNotIn("received SIGCONT", out)


class CommandLine(unittest.TestCase):
    """The help and the subcommands, as git and systemctl users expect them."""

    def help_of(self, *argv):
        r = subprocess.run([LASTCALL, *argv], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_the_help_lists_every_subcommand_and_says_usage_once(self):
        out = self.help_of("--help")
        for sub in ("up", "status", "runs", "jobs"):
            self.assertRegex(out, rf"(?m)^  {sub} ")
        self.assertEqual(out.count("Usage:"), 1, out)
        self.assertIn("lastcall [OPTIONS] [--] COMMAND [ARGS...]", out)
        for sub in ("up", "status", "runs", "jobs"):
            with self.subTest(sub=sub):
                self.assertEqual(self.help_of(sub, "--help").count("Usage:"), 1)

    def test_global_options_go_before_or_after_the_subcommand(self):
        for argv in (["--log-level", "debug", "up", "--help"], ["-v", "up", "--help"],
                     ["up", "-v", "--help"]):
            with self.subTest(argv=argv):
                self.assertIn("Usage: lastcall up", self.help_of(*argv))
        runtime = tempfile.mkdtemp(prefix="lctest-runtime-")
        self.addCleanup(os.rmdir, runtime)
        env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
        for argv in (["-v", "status"], ["status", "-v"], ["--log-format", "json", "status"]):
            with self.subTest(argv=argv):
                r = subprocess.run([LASTCALL, *argv], capture_output=True, text=True, env=env,
                                   timeout=30)
                self.assertEqual(r.returncode, 1, r.stderr)  # nothing running: exit 1
                self.assertIn("no running lastcall", r.stdout)

    def test_a_program_named_like_a_subcommand_runs_after_a_double_dash(self):
        with tempfile.TemporaryDirectory() as d:
            up = os.path.join(d, "up")
            with open(up, "w") as f:
                f.write("#!/bin/sh\nexit 9\n")
            os.chmod(up, 0o755)
            env = dict(os.environ, PATH=d + ":" + os.environ["PATH"])
            r = subprocess.run([LASTCALL, "--", "up"], env=env, capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 9)
            r = subprocess.run([LASTCALL, "--grace", "1s", "--", "up"], env=env,
                               capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 9)
