# SPDX-License-Identifier: Apache-2.0
"""Issue 3: the whole tree (escapees included) with both trackers, the drain sequence, the report."""
import glob
import json
import os
import signal
import time
import unittest

from lctest import LastcallTestCase, cgroup2_root, children_of, helper

# A tree that escapes a process group in three ways, each ignoring SIGTERM so only lastcall's
# whole-tree SIGKILL can end it: a grandchild that called setsid, a double-forked daemon, and a
# process that moved itself to a new process group.
ESCAPEES = r'''
setsid sh -c 'trap "" TERM; while :; do sleep 1; done' &
sh -c '(trap "" TERM; while :; do sleep 1; done) &' &
perl -e '$SIG{TERM} = "IGNORE"; setpgrp(0, 0); sleep 1000 while 1' &
trap 'exit 0' TERM
sleep 0.2
echo ready > "$EVENTS"
while :; do sleep 1; done
'''


class Escapees(LastcallTestCase):
    def check_escapees_are_gone(self, tracker, pid1):
        report = os.path.join(self.dir, "report.json")
        # The grace is generous so the obedient main shell certainly exits within it even on a
        # loaded machine; the escapees ignore SIGTERM and must be SIGKILLed whatever the grace.
        run = self.start(["--tracker", tracker, "--grace", "3s", "--report", report, "--",
                          "sh", "-c", ESCAPEES], pid1=pid1)
        self.fifo.expect("ready")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        self.assertIn(f"with the {tracker} tracker", run.output())
        self.assertNoLeftovers()
        with open(report) as f:
            doc = json.load(f)
        self.assertEqual(doc["verdict"], "forced")
        self.assertEqual(doc["tracker"], tracker)
        # The setsid grandchild and the setpgrp process left the group; the double-forked daemon
        # keeps the group id (a double fork alone does not change it) but not its parent.
        killed = [p for p in doc["processes"] if p["ending"] == "killed"]
        self.assertGreaterEqual(len([p for p in killed if p["left_group"]]), 2, doc["processes"])
        # By its comm: the report reads a process's cmdline only when it is asleep or stopped
        # (a running one may hold its mmap lock; report.cpp), and perl was still starting up,
        # running, when the pass came in one CI run under load (cmdline "").
        self.assertTrue(any(p["comm"] == "perl" for p in killed), doc["processes"])

    def test_cgroup_tracker_ends_escaped_descendants(self):
        self.check_escapees_are_gone("cgroup", pid1=False)

    def test_cgroup_tracker_ends_escaped_descendants_as_pid1(self):
        self.check_escapees_are_gone("cgroup", pid1=True)

    def test_proc_tracker_ends_escaped_descendants(self):
        self.check_escapees_are_gone("proc", pid1=False)

    def test_proc_tracker_ends_escaped_descendants_as_pid1(self):
        self.check_escapees_are_gone("proc", pid1=True)

    def test_a_tree_that_keeps_forking_and_ignores_sigterm_is_gone_after_the_grace(self):
        for tracker in ("cgroup", "proc"):
            with self.subTest(tracker=tracker):
                run = self.start(["--tracker", tracker, "--grace", "1s", "--", helper("forker")])
                self.fifo.expect("forking")
                time.sleep(0.3)  # let the tree grow to a few dozen processes
                run.signal(signal.SIGTERM)
                self.assertEqual(run.wait(), 128 + signal.SIGKILL, run.output())
                self.assertNoLeftovers()

    def test_a_cleanup_helper_started_by_a_term_trap_is_not_signalled_and_finishes(self):
        # The main child traps TERM and runs a cleanup that takes a while (a flush, an upload).
        # The cleanup process did not exist when the stop signal went out: it is not a process
        # to stop but one that is stopping the app, and it must be allowed to finish within the
        # grace. Before the one stop primitive, the drain's rescans sent it SIGTERM every 50 ms;
        # before the freeze, a helper forked while the first pass was still signalling the
        # other members was found by the second pass and signalled. 300 sleepers make that
        # pass long enough for the trap to fork its helper during it.
        done = os.path.join(self.dir, "done")
        script = r'''
        trap 'sh -c "trap \"echo helper-got-term > \\\"\$EVENTS\\\"\" TERM; sleep 0.5; touch \"$DONE\""; exit 0' TERM
        i=0
        while [ $i -lt 300 ]; do sleep 1000 & i=$((i+1)); done
        echo ready > "$EVENTS"
        wait
        '''
        env = dict(self.env, DONE=done)
        # The main child gets its stop signal first, before the passes over the 300 sleepers: its
        # helper is born while they run, and the birth line read before that signal tells them so.
        for tracker, attempt in [(t, a) for t in ("cgroup", "proc") for a in range(2)]:
            with self.subTest(tracker=tracker, attempt=attempt):
                if os.path.exists(done):
                    os.unlink(done)
                run = self.start(["--tracker", tracker, "--grace", "5s", "--", "sh", "-c", script],
                                 env=env)
                self.fifo.expect("ready")
                run.signal(signal.SIGTERM)
                self.assertEqual(run.wait(), 0, run.output())
                self.assertTrue(os.path.exists(done), run.output())
                self.assertNotIn(b"helper-got-term", self.fifo.drain())
                self.assertNoLeftovers()


class StaleInstanceCgroups(LastcallTestCase):
    """A lastcall killed with SIGKILL (the OOM killer, kill -9) cannot remove its instance cgroup;
    the next lastcall that ends beside it does, once nothing runs in it."""

    def instance_of(self, run):
        """(the instance cgroup's directory, the main child's pid) of a running lastcall."""
        child = children_of(run.proc.pid)[0]
        with open(f"/proc/{child}/cgroup") as f:
            path = next(line[3:] for line in f.read().splitlines() if line.startswith("0::"))
        # The main command alone runs in the instance's cgroup itself (no leaf "main").
        self.assertTrue(os.path.basename(path).startswith("lastcall-"), path)
        return os.path.join(cgroup2_root(), path[1:]), child

    def backdate(self, directory):
        # A sweep leaves a cgroup younger than 10 s alone (its lastcall may be between its mkdir
        # and its lock): these stand for cgroups left long ago.
        then = time.time() - 120
        os.utime(directory, (then, then))

    def sweep(self):
        """A lastcall that runs for more than the 1 s after which its exit sweeps."""
        run = self.start(["--tracker", "cgroup", "--", "sleep", "1.1"])
        self.assertEqual(run.wait(), 0, run.output())

    def live_instance_without_processes(self):
        """A running lastcall with a yearly job and no command: its instance cgroup is empty, so
        only its lock tells that it is alive."""
        cfg = self.write_file("jobs.toml", '[jobs.yearly]\nschedule = "@yearly"\ncommand = "true"\n')
        # Its ledger in the test's own directory, not in /var/lib/lastcall.
        live = self.start(["--tracker", "cgroup", "--config", cfg, "--state-dir",
                           os.path.join(self.dir, "state")])
        pattern = os.path.join(cgroup2_root(), "**", f"lastcall-{live.proc.pid}-*")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bounded wait for its mkdir
            found = glob.glob(pattern, recursive=True)
            if found:
                return live, found[0]
            time.sleep(0.01)
        self.fail(f"no instance cgroup appeared for lastcall {live.proc.pid}: {live.output()}")

    def test_a_killed_instances_cgroup_is_removed_by_the_next_lastcall_once_empty(self):
        root = cgroup2_root()
        if not root:
            self.skipTest("no cgroup2 hierarchy")
        killed = self.start(["--tracker", "cgroup", "--", helper("termlog"), "0"])
        self.fifo.expect("started")
        stale, orphan = self.instance_of(killed)
        os.kill(killed.proc.pid, signal.SIGKILL)
        killed.wait()
        self.backdate(stale)
        live, alive = self.live_instance_without_processes()
        self.backdate(alive)  # old and empty: only its lock protects it
        # The killed lastcall's child still runs in its cgroup: the cgroup stays.
        self.sweep()
        self.assertTrue(os.path.isdir(stale))
        self.assertTrue(os.path.isdir(alive), "a live lastcall's cgroup was removed")
        os.kill(orphan, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bounded wait for the kernel's "populated 0"
            # Once empty, any lastcall that ends beside it may sweep it, not only ours: another
            # test's, under ctest -j (CI, 2026-12-07: cgroup.events gone during this wait).
            try:
                with open(os.path.join(stale, "cgroup.events")) as f:
                    if "populated 0" in f.read():
                        break
            except FileNotFoundError:
                break
            time.sleep(0.01)
        young = os.path.join(os.path.dirname(stale), "lastcall-0-" + self.marker[-12:])
        os.mkdir(young)
        try:
            self.sweep()
            self.assertFalse(os.path.exists(stale), "the killed lastcall's cgroup is still there")
            self.assertTrue(os.path.isdir(alive), "a live lastcall's cgroup was removed")
            self.assertTrue(os.path.isdir(os.path.join(alive, "main")), "a live lastcall's leaf")
            self.assertTrue(os.path.isdir(young), "a cgroup created a moment ago was removed")
        finally:
            os.rmdir(young)
        live.signal(signal.SIGTERM)
        self.assertEqual(live.wait(), 0, live.output())
        self.assertFalse(os.path.exists(alive))
        self.assertNoLeftovers()


class DrainSequence(LastcallTestCase):
    def test_the_ready_file_is_gone_when_the_childs_sigterm_handler_runs(self):
        ready = os.path.join(self.dir, "ready")
        env = dict(self.env, READY_FILE=ready)
        run = self.start(["--ready-file", ready, "--", helper("termlog")], env=env)
        self.fifo.expect("started")
        # lastcall creates the file right after the spawn returns; the child may be faster.
        deadline = time.monotonic() + 10
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(os.path.exists(ready))
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline().split()[2], "ready=0")
        self.assertEqual(run.wait(), 0)

    def test_the_drain_delay_holds_the_stop_signal_back(self):
        ready = os.path.join(self.dir, "ready")
        env = dict(self.env, READY_FILE=ready)
        run = self.start(["--ready-file", ready, "--drain-delay", "700ms", "--grace", "5s", "--",
                          helper("termlog")], env=env)
        self.fifo.expect("started")
        sent = time.monotonic_ns()
        run.signal(signal.SIGTERM)
        name, handled_ns, ready_state = self.fifo.readline().split()
        self.assertEqual(name, "TERM")
        self.assertEqual(ready_state, "ready=0")
        self.assertGreaterEqual(int(handled_ns) - sent, 700_000_000)
        self.assertEqual(run.wait(), 0)

    def test_pre_stop_runs_exactly_once_under_repeated_signals(self):
        count = os.path.join(self.dir, "pre-stop-count")
        run = self.start(["--pre-stop", f"echo ran >> {count}; echo hook-output",
                          "--drain-delay", "300ms", "--grace", "5s", "--", helper("termlog")])
        self.fifo.expect("started")
        for _ in range(20):
            run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline().split()[0], "TERM")
        self.assertEqual(run.wait(), 0, run.output())
        with open(count) as f:
            self.assertEqual(f.read(), "ran\n")
        self.assertIn("pre-stop: hook-output", run.output())

    def test_a_pre_stop_hooks_output_is_shown_at_the_default_level_and_its_failure_is_a_warning(
            self):
        # Without -v the hook's output is shown (as systemd shows ExecStop's), and its failure
        # is a warning with its last line.
        run = self.start(["--pre-stop", "echo working; echo 'lb: connection refused' >&2; exit 3",
                          "--grace", "5s", "--", helper("termlog")], quiet=True)
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline().split()[0], "TERM")
        self.assertEqual(run.wait(), 0, run.output())
        self.assertIn("warning: pre-stop hook exited with code 3 (its last line: lb: connection refused)",
                      run.output())
        self.assertIn("info: pre-stop: working", run.output())

    def test_the_stop_signal_option_chooses_what_the_tree_receives(self):
        run = self.start(["--stop-signal", "QUIT", "--", helper("termlog")])
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline().split()[0], "QUIT")
        self.assertEqual(run.wait(), 0)


class Report(LastcallTestCase):
    def test_a_tree_that_obeys_sigterm_is_reported_clean(self):
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--report", report, "--", "sh", "-c",
                          f'{helper("termlog")} 0 & exec {helper("termlog")} 3'])
        self.fifo.expect("started")
        self.fifo.expect("started")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 3)
        with open(report) as f:
            doc = json.load(f)
        self.assertEqual(doc["verdict"], "clean")
        self.assertEqual(doc["forced"], [])
        self.assertEqual(doc["trigger"], {"kind": "signal", "signal": "SIGTERM",
                                          "at": doc["trigger"]["at"]})
        self.assertEqual([t["state"] for t in doc["transitions"]],
                         ["running", "draining", "stopping", "stopped"])
        self.assertEqual(doc["exit_code"], 3)
        # The two termlogs (slower builds may also list the short-lived sh before its exec).
        self.assertGreaterEqual(len(doc["processes"]), 2)
        self.assertTrue(all(p["within_grace"] for p in doc["processes"]))
        self.assertIn("shutdown clean", run.output())

    def test_a_tree_that_ignores_sigterm_is_reported_forced_with_its_pids(self):
        report = os.path.join(self.dir, "report.json")
        script = r'''
        trap "" TERM
        sh -c 'trap "" TERM; echo "ignorer $$" > "$EVENTS"; while :; do sleep 1; done' &
        trap 'exit 0' TERM
        echo "main $$" > "$EVENTS"
        while :; do sleep 1; done
        '''
        run = self.start(["--grace", "3s", "--report", report, "--", "sh", "-c", script])
        pids = dict(self.fifo.readline().split() for _ in range(2))
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0)
        with open(report) as f:
            doc = json.load(f)
        self.assertEqual(doc["verdict"], "forced")
        self.assertIn(int(pids["ignorer"]), doc["forced"])
        self.assertNotIn(int(pids["main"]), doc["forced"])
        main = [p for p in doc["processes"] if p["main"]][0]
        self.assertEqual((main["ending"], main["exit_code"], main["within_grace"]),
                         ("exited", 0, True))
        self.assertIn("shutdown forced", run.output())

    def test_workers_forked_while_the_stop_passes_run_get_the_stop_signal_too(self):
        # A pre-fork server that has not had the stop signal yet forks workers while the passes
        # walk the tree; they are born after the stop began, but to a process that was not
        # stopping: members, not cleanup helpers. They used to get nothing but the SIGKILL at
        # grace end, and a tree that obeys SIGTERM was reported forced. 300 sleepers started
        # before the server come before it in both trackers' walks: the server gets its signal
        # tens of milliseconds after the stop began, a few dozen workers later.
        # One worker may still be taken for a helper, and is then killed at grace end and the
        # stop reported forced: the one whose fork was under way when the server's own signal
        # came. The kernel completes that fork, allocating the pid after the signal went out,
        # and the server takes the signal on its way out of it; nothing lastcall can read
        # afterwards tells that child from a cleanup helper forked by the server's reaction
        # (docs/design.md, "known limit"). The test's SIGTERM follows the server's report by
        # about as long as the server waits between forks: that child came in one run in five.
        script = ("i=0; while [ $i -lt 300 ]; do sleep 1000 & i=$((i+1)); done; "
                  f"{helper('prefork')} & trap 'exit 0' TERM; while :; do sleep 0.05; done")
        for tracker in ("cgroup", "proc"):
            with self.subTest(tracker=tracker):
                report = os.path.join(self.dir, f"report-{tracker}.json")
                run = self.start(["--tracker", tracker, "--grace", "20s", "--report", report, "--",
                                  "sh", "-c", script])
                server = int(self.fifo.expect_prefix("prefork "))
                run.signal(signal.SIGTERM)
                self.assertEqual(run.wait(), 0, run.output())
                with open(report) as f:
                    doc = json.load(f)
                workers = [p for p in doc["processes"]
                           if p["comm"] == "prefork" and p["pid"] > server]
                unsignalled = [p["pid"] for p in workers if not p.get("stop_signal")]
                self.assertGreaterEqual(len(workers), 11)  # the report lists them at all
                # The fork in flight at the server's signal is its last: the server exits in
                # the handler it runs on the way out of that fork.
                if unsignalled:
                    self.assertEqual(unsignalled, [max(p["pid"] for p in workers)],
                                     run.output()[-2000:])
                self.assertEqual((doc["verdict"], doc["forced"]),
                                 ("forced", unsignalled) if unsignalled else ("clean", []))
                self.assertNoLeftovers()

    def test_a_report_path_in_a_missing_directory_is_a_usage_error_before_the_command_starts(self):
        marker = os.path.join(self.dir, "started")
        run = self.start(["--report", "/nonexistent-lastcall-dir/report.json", "--",
                          "touch", marker], quiet=True)
        self.assertEqual(run.wait(timeout=20), 2)
        lines = run.output().splitlines()
        self.assertEqual(len(lines), 1, run.output())
        self.assertIn("/nonexistent-lastcall-dir", lines[0])
        self.assertIn("No such file or directory", lines[0])
        self.assertFalse(os.path.exists(marker))

    def test_a_report_path_that_could_never_be_written_is_a_usage_error_before_the_command_starts(self):
        # Both passed the start-up check and lost the record at exit: a name that fits, but whose
        # temporary name (NAME.tmp.XXXXXX) does not; an existing directory.
        marker = os.path.join(self.dir, "started")
        for flag in ("--report", "--metrics-file"):
            for path, says in ((os.path.join(self.dir, "r" * 250), "file name longer"),
                               (self.dir, "is a directory")):
                with self.subTest(flag=flag, path=path):
                    run = self.start([flag, path, "--", "touch", marker], quiet=True)
                    self.assertEqual(run.wait(timeout=20), 2, run.output())
                    lines = run.output().splitlines()
                    self.assertEqual(len(lines), 1, run.output())
                    self.assertIn(flag, lines[0])
                    self.assertIn(says, lines[0])
                    self.assertFalse(os.path.exists(marker))

    def test_a_report_that_cannot_be_written_at_exit_is_a_logged_error_not_a_hang(self):
        # The directory was there at start and is gone at exit: the error is logged, the
        # child's code is kept.
        d = os.path.join(self.dir, "reports")
        os.mkdir(d)
        run = self.start(["--report", os.path.join(d, "report.json"), "--",
                          "sh", "-c", 'rmdir "$0"; exit 6', d])
        self.assertEqual(run.wait(timeout=20), 6)
        self.assertIn("shutdown report not written", run.output())
        self.assertIn(d, run.output())

if __name__ == "__main__":
    unittest.main()
