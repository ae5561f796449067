# SPDX-License-Identifier: Apache-2.0
"""Fault injection, end to end (issue 9): lastcall under resource exhaustion, broken outputs,
signal floods and its own sudden death. Each scenario ends with a clear error or a complete
teardown, and no process of the test's tree left (checked by the marker in /proc/*/environ).
docs/reliability.md lists every scenario with the test that proves it.
"""
import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, Run, helper, marked_pids, report_time, wait_exit

FAULTKIT = helper("faultkit")
IS_ROOT = os.geteuid() == 0
PR_SET_CHILD_SUBREAPER = 36


def sanitizer_env(env, **extra):
    """env with ASAN_OPTIONS extended (a sanitized build reads it; others ignore it)."""
    env = dict(env)
    opts = [o for o in (env.get("ASAN_OPTIONS"), ":".join(f"{k}={v}" for k, v in extra.items())) if o]
    env["ASAN_OPTIONS"] = ":".join(opts)
    return env



def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class Wrapped(Run):
    """lastcall started behind a wrapper command (prlimit, setpriv, unshare), log to a file."""

    def __init__(self, prefix, args, env, directory, stderr=None):
        super().__init__(args, env=env, prefix=prefix,
                         log_path=os.path.join(directory, "lastcall.log"), stderr=stderr)


class FaultTestCase(LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.addCleanup(self._kill_runs)
        self.runs = []

    def _kill_runs(self):
        for r in self.runs:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()

    def wrapped(self, prefix, args, env=None, **kw):
        r = Wrapped(prefix, args, env or self.env, self.dir, **kw)
        self.runs.append(r)
        return r

    def open_to_other_users(self):
        """The FIFO in a 0700 temp dir is out of reach of a child that runs under another uid."""
        os.chmod(self.dir, 0o755)
        os.chmod(self.fifo.path, 0o666)

    def ready_or_exit(self, proc, timeout=20):
        """The child's "ready <pid>" line, or None when lastcall exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.fifo.readline(timeout=0.2)
            except TimeoutError:
                if proc.poll() is not None:
                    return None
                continue
            if line.startswith("ready "):
                return int(line.split()[1])
        raise TimeoutError("neither a ready child nor an exit")

    def subreaper(self):
        """Makes this test process the subreaper of everything it starts, for this test only, so
        that orphans of a killed lastcall come back here (where they can be checked and reaped)."""
        libc = ctypes.CDLL(None, use_errno=True)
        self.assertEqual(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0)
        self.addCleanup(libc.prctl, PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self.addCleanup(self._reap_adopted)

    def _reap_adopted(self):
        from lctest import kill_marked
        kill_marked(self.marker)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                # Killed above; what is left are our own runs, reaped by their Popen.
                return


def unused_uid():
    """A uid with no process and no passwd entry, distinct for concurrent test runs: RLIMIT_NPROC
    counts the processes of the real uid system-wide."""
    return 40000 + os.getpid() % 20000


@unittest.skipUnless(IS_ROOT, "needs root to switch uid and mount tmpfs")
class ResourceExhaustion(FaultTestCase):
    def as_limited_user(self, nproc):
        uid = unused_uid()
        return ["prlimit", f"--nproc={nproc}:{nproc}", "setpriv", f"--reuid={uid}",
                f"--regid={uid}", "--clear-groups"]

    def fork_bomb_is_gone_within_grace_plus_1s_and_reported_forced(self, prefix, args,
                                                                    slack=8.0):
        self.open_to_other_users()
        report = os.path.join(self.dir, "report.json")
        os.chmod(self.dir, 0o777)
        grace = 2.0
        env = sanitizer_env(self.env, detect_leaks=0)
        run = self.wrapped(prefix, ["--grace", "2s", "--report", report] + args +
                           ["--", FAULTKIT, "forkbomb"], env=env)
        self.fifo.expect("bombing", timeout=30)
        t0 = time.monotonic()
        os.kill(run.proc.pid, signal.SIGTERM)
        code = run.wait(timeout=120)
        elapsed = time.monotonic() - t0
        print(f"\nfork bomb: lastcall exited {elapsed:.3f}s after SIGTERM (grace {grace}s)")
        # The harness's own clock includes its waits for a CPU under the bomb (a hand run: 4.99 s
        # by the script's clock, 2.93 s by lastcall's); the report dates each transition.
        if os.path.exists(report):
            with open(report) as f:
                at = {t["state"]: report_time(t["at"]) for t in json.load(f)["transitions"]}
            if "draining" in at and "forcing" in at and "stopped" in at:
                print(f"fork bomb, by lastcall's report: forcing "
                      f"{at['forcing'] - at['draining']:.3f}s and stopped "
                      f"{at['stopped'] - at['draining']:.3f}s after the trigger")
        self.assertEqual(code, 128 + signal.SIGKILL, run.output()[-3000:])
        # grace + 1 s is the target (printed above; measured in bench/). 2,000 processes
        # retrying fork on 2 cores delay lastcall's own timer on a loaded or sanitized run, so
        # the test asserts only a loose bound that still fails a teardown that never escalated
        # (the first version: 211 s).
        self.assertLess(elapsed, grace + slack, run.output()[-3000:])
        # The first /proc-tracker versions spent the force enumerating a live bomb until they
        # gave up on it (21-68 s): the force must end with the tree empty, not abandoned.
        self.assertNotIn("giving up", run.output(), run.output()[-3000:])
        with open(report) as f:
            self.assertEqual(json.load(f)["verdict"], "forced")
        self.assertEqual(marked_pids(self.marker), [])

    def test_a_fork_bomb_is_gone_within_grace_plus_1s_proc_tracker_unprivileged(self):
        # lastcall and the bomb share one user limited to 2000 processes (ulimit -u 2000), with
        # no cgroup to freeze or kill: the /proc tracker alone.
        # Typically 2.3-4.4 s from the kill to the exit; lastcall, starved of CPU by 2,000
        # runnable processes, has been seen to need 22 s on this 2-core machine, hence the
        # slack. What fails the old behaviour for sure is the check that nothing was given up.
        self.fork_bomb_is_gone_within_grace_plus_1s_and_reported_forced(
            self.as_limited_user(2000), ["--tracker", "proc"], slack=40.0)

    def test_a_fork_bomb_is_gone_within_grace_plus_1s_cgroup_tracker(self):
        # lastcall is root (its cgroup); the bomb runs as a user limited to 2000 processes, so
        # that the test does not exhaust the pids of the machine it runs on.
        uid = unused_uid()
        self.fork_bomb_is_gone_within_grace_plus_1s_and_reported_forced(
            ["prlimit", "--nproc=2000:2000"], ["--tracker", "cgroup", "--user", f"{uid}:{uid}"])

    def test_a_fork_refused_by_rlimit_nproc_is_a_clear_error_and_nothing_runs(self):
        self.open_to_other_users()
        # LeakSanitizer needs a thread of its own at exit, which the same limit refuses.
        env = sanitizer_env(self.env, detect_leaks=0)
        run = self.wrapped(self.as_limited_user(1), ["--", FAULTKIT, "wait"], env=env)
        code = run.wait(timeout=30)
        out = run.output()
        self.assertEqual(code, 1, out)
        self.assertIn("fork", out)
        self.assertIn("Resource temporarily unavailable", out)
        self.assertEqual(marked_pids(self.marker), [])
        with self.assertRaises(TimeoutError):
            self.fifo.readline(timeout=0.1)  # the command never ran

    def test_a_pre_stop_hook_that_cannot_fork_does_not_stop_the_teardown(self):
        self.open_to_other_users()
        env = sanitizer_env(self.env, detect_leaks=0)
        # lastcall and its child use up the limit of 2: the hook's fork fails at shutdown.
        run = self.wrapped(self.as_limited_user(2),
                           ["--pre-stop", "true", "--", FAULTKIT, "wait"], env=env)
        self.assertIsNotNone(self.ready_or_exit(run.proc), run.output() if run.proc.poll() else "")
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait(timeout=30)
        out = run.output()
        self.assertIn("pre-stop hook: fork", out)
        self.assertEqual(code, 128 + signal.SIGTERM, out)
        self.assertNoLeftovers()

    def test_every_tiny_rlimit_nofile_ends_in_a_clear_refusal_or_a_complete_teardown(self):
        outcomes = {}
        # From 4: with 3, the dynamic loader cannot even open lastcall's shared libraries.
        if os.environ.get("LASTCALL_SANITIZED") == "1":
            self.skipTest("sanitizer runtimes need descriptors of their own (UBSan's vptr check "
                          "misfires without them); the sweep runs against the plain build")
        # To 15: the default tracker (the cgroup one here) needs 15 descriptors, counted from a
        # parent with only 0, 1 and 2 open, as this test's; `--tracker cgroup` needs 16 and
        # `--tracker proc` 13 (docs/reliability.md). A shell that leaves descriptors of its own
        # open in lastcall adds them: the 17 once written for the cgroup tracker came from one.
        for limit in range(4, 16):
            run = self.wrapped(["prlimit", f"--nofile={limit}:{limit}"],
                               ["--grace", "2s", "--", FAULTKIT, "wait"])
            child = self.ready_or_exit(run.proc)
            if child is None:
                code = run.wait(timeout=30)
                out = run.output()
                self.assertEqual(code, 1, f"limit {limit}: {out}")
                self.assertIn("Too many open files", out, f"limit {limit}")
                outcomes[limit] = "refused"
            else:
                run.proc.send_signal(signal.SIGTERM)
                code = run.wait(timeout=30)
                out = run.output()
                # 143: the child got the stop signal. 137: lastcall had no descriptor left to
                # signal through (a pidfd plus /proc/<pid>/stat to check it), so the stop signal
                # reached nobody and the tree was SIGKILLed at the end of the grace: a known gap
                # (docs/reliability.md), but the tree still ends and nothing is left behind.
                self.assertIn(code, (128 + signal.SIGTERM, 128 + signal.SIGKILL), f"limit {limit}: {out}")
                self.assertNotIn("giving up", out, f"limit {limit}")
                outcomes[limit] = "ran" if code == 128 + signal.SIGTERM else "ran, forced"
            self.assertEqual(marked_pids(self.marker), [], f"limit {limit}: {run.output()}")
        print(f"\nRLIMIT_NOFILE sweep: {outcomes}")
        # Both outcomes occur: the sweep crosses the point where lastcall starts, and with
        # enough descriptors the stop is graceful.
        self.assertIn("refused", outcomes.values())
        self.assertEqual(outcomes[15], "ran")

    def mount_tmpfs(self, size="16k"):
        path = os.path.join(self.dir, "mnt")
        os.mkdir(path)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", path])
        return path

    def test_a_full_report_directory_is_a_logged_error_and_leaves_no_partial_file(self):
        mnt = self.mount_tmpfs()
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"x" * 4096) > 0:
                pass
        except OSError:
            pass  # ENOSPC: the filesystem is full
        finally:
            os.close(fd)
        report = os.path.join(mnt, "report.json")
        run = self.start(["--report", report, "--", "sh", "-c", "exit 3"])
        code = run.wait(timeout=30)
        out = run.output()
        self.assertEqual(code, 3, out)  # the child's code, whatever happened to the record
        self.assertIn("shutdown report not written", out)
        self.assertIn("No space left on device", out)
        self.assertEqual(sorted(os.listdir(mnt)), ["filler"])

    def test_a_read_only_ready_file_directory_is_logged_and_the_child_still_runs(self):
        mnt = self.mount_tmpfs()
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        run = self.start(["--ready-file", os.path.join(mnt, "ready"), "--", FAULTKIT, "wait"])
        self.assertIsNotNone(self.ready_or_exit(run.proc), run.output())
        run.signal(signal.SIGTERM)
        code = run.wait(timeout=30)
        out = run.output()
        self.assertEqual(code, 128 + signal.SIGTERM, out)
        self.assertIn("Read-only file system", out)
        self.assertEqual(os.listdir(mnt), [])
        self.assertNoLeftovers()

    def test_a_read_only_report_directory_is_a_usage_error_before_the_child_starts(self):
        # Known at start, the record could only be lost at the end: refuse to start instead.
        mnt = self.mount_tmpfs()
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        started = os.path.join(self.dir, "started")
        run = self.start(["--report", os.path.join(mnt, "report.json"), "--", "touch", started],
                         quiet=True)
        code = run.wait(timeout=30)
        out = run.output()
        self.assertEqual(code, 2, out)
        self.assertEqual(len(out.splitlines()), 1, out)
        self.assertIn("Read-only file system", out)
        self.assertFalse(os.path.exists(started))


class BrokenOutputs(FaultTestCase):
    def test_a_child_that_closes_its_stdout_and_stderr_is_supervised_as_usual(self):
        run = self.start(["--", FAULTKIT, "close-stdio"])
        self.assertIsNotNone(self.ready_or_exit(run.proc))
        run.signal(signal.SIGTERM)
        code = run.wait(timeout=30)
        self.assertEqual(code, 128 + signal.SIGTERM, run.output())
        self.assertIn("shutdown clean", run.output())
        self.assertNoLeftovers()

    def test_when_the_reader_of_lastcalls_log_goes_away_signals_still_work(self):
        # Every log line then raises SIGPIPE in lastcall. Before the fix, lastcall forwarded it
        # (killing the child) and spun on the SIGPIPEs its own forwarding logs raised, never
        # reading the SIGTERM behind them.
        r, w = os.pipe()
        run = self.wrapped([], ["--", FAULTKIT, "count-signals"], stderr=w)
        os.close(w)
        self.assertIsNotNone(self.ready_or_exit(run.proc))
        os.close(r)
        os.kill(run.proc.pid, signal.SIGHUP)  # logged: the first SIGPIPE
        os.kill(run.proc.pid, signal.SIGUSR1)
        os.kill(run.proc.pid, signal.SIGTERM)
        self.assertEqual(self.fifo.readline(timeout=20), "term hup=1 usr1=1")
        self.assertEqual(run.wait(timeout=30), 0)
        self.assertNoLeftovers()


class Storms(FaultTestCase):
    def fork_storm_during_shutdown(self, tracker):
        grace = 1.0
        run = self.start(["--grace", "1s", "--tracker", tracker, "--", FAULTKIT, "forkstorm", "5000"])
        self.fifo.expect("storming", timeout=30)
        rate = int(self.fifo.readline(timeout=10).split()[1])
        t0 = time.monotonic()
        run.signal(signal.SIGTERM)
        code = run.wait(timeout=60)
        elapsed = time.monotonic() - t0
        print(f"\nfork storm ({tracker} tracker): {rate} forks/s, lastcall exited "
              f"{elapsed:.3f}s after SIGTERM (grace {grace}s)")
        self.assertEqual(code, 128 + signal.SIGKILL, run.output())
        self.assertLess(elapsed, grace + 1.0, run.output())
        self.assertNoLeftovers()

    def test_a_5000_per_second_fork_storm_is_gone_within_grace_plus_1s_proc_tracker(self):
        self.fork_storm_during_shutdown("proc")

    @unittest.skipUnless(IS_ROOT, "a writable cgroup2 needs root")
    def test_a_5000_per_second_fork_storm_is_gone_within_grace_plus_1s_cgroup_tracker(self):
        self.fork_storm_during_shutdown("auto")

    def test_10000_mixed_hup_usr1_term_neither_crash_lastcall_nor_tear_down_twice(self):
        prestop = os.path.join(self.dir, "prestop.log")
        # A 2 s coalescing window: on a loaded machine the sender may stall for more than the
        # default 100 ms between two SIGTERMs, which would (rightly) escalate.
        run = self.start(["--coalesce", "2s", "--pre-stop", f"echo once >> {prestop}",
                          "--", FAULTKIT, "count-signals"])
        self.assertIsNotNone(self.ready_or_exit(run.proc))
        pid = run.proc.pid
        sent = 0
        for i in range(10000):
            sig = signal.SIGTERM if i % 10 == 9 else (signal.SIGHUP if i % 2 else signal.SIGUSR1)
            try:
                os.kill(pid, sig)  # lastcall is our unreaped child: its pid cannot be reused
            except ProcessLookupError:
                break
            sent += 1
        line = self.fifo.readline(timeout=30)
        code = run.wait(timeout=30)
        out = run.output()
        self.assertEqual(code, 0, out)  # the child's own exit: no SIGKILL, no crash
        counts = dict(kv.split("=") for kv in line.split()[1:])
        self.assertGreaterEqual(int(counts["hup"]), 1, line)
        self.assertGreaterEqual(int(counts["usr1"]), 1, line)
        self.assertEqual(out.count("starting shutdown"), 1, out[-2000:])
        self.assertEqual(out.count("state running -> draining"), 1)
        self.assertNotIn("escalating", out)
        with open(prestop) as f:
            self.assertEqual(f.read(), "once\n")
        print(f"\nsignal burst: {sent} signals sent, child saw {line}")
        self.assertNoLeftovers()


class DeathOfLastcall(FaultTestCase):
    """SIGKILL cannot be caught: what survives lastcall's own death."""

    def start_orphan_tree(self, args, pid1=False):
        run = self.start(args + ["--", FAULTKIT, "orphan"], pid1=pid1)
        lines = [self.fifo.readline(timeout=20), self.fifo.readline(timeout=20)]
        pids = dict(line.split() for line in lines)
        return run, int(pids["ready"]), int(pids["grandchild"])

    def test_with_pdeathsig_the_child_dies_with_lastcall_and_its_orphans_reparent(self):
        self.subreaper()
        run, child, grandchild = self.start_orphan_tree(["--pdeathsig", "KILL"])
        run.signal(signal.SIGKILL)
        self.assertEqual(run.wait(timeout=10), -signal.SIGKILL)
        self.assertTrue(wait_exit(child, 10), "the child outlived lastcall despite --pdeathsig")
        # PR_SET_PDEATHSIG is per process: the grandchild is not signalled; it is reparented to
        # the nearest subreaper (this test) like any orphan.
        self.assertIn(grandchild, marked_pids(self.marker))
        self.assertEqual(ppid_of(grandchild), os.getpid())

    def test_without_pdeathsig_the_tree_survives_lastcall_and_reparents_to_the_next_subreaper(self):
        self.subreaper()
        run, child, grandchild = self.start_orphan_tree([])
        run.signal(signal.SIGKILL)
        self.assertEqual(run.wait(timeout=10), -signal.SIGKILL)
        self.assertEqual(sorted(marked_pids(self.marker)), sorted([child, grandchild]))
        self.assertEqual(ppid_of(child), os.getpid())

    @unittest.skipUnless(IS_ROOT, "a PID namespace needs root")
    def test_as_pid1_the_kernel_ends_the_whole_namespace_with_lastcall(self):
        run, child, grandchild = self.start_orphan_tree([], pid1=True)
        os.kill(run.lastcall_pid(), signal.SIGKILL)
        run.wait(timeout=10)
        # The pids above are namespace-local; the marker finds the processes from here.
        self.assertEqual(marked_pids(self.marker), [])


if __name__ == "__main__":
    unittest.main()
