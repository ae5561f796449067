# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 4: the teardown of a big tree costs about one signal per process, as tini -g's
and catatonit -g's does, not three /proc reads per process. What lastcall opens in /proc during
the stop is counted (strace on lastcall alone, attached once the tree is up): a count per process
that does not depend on the machine's speed, where a time would.

On c88b909 the whole tree's stop read, for each of 10,000 processes, its children file and its
stat in the walk, its stat again before its signal (the start-time check) and its command line
for the report: 5.3-6.9 s from SIGTERM to an empty namespace where tini -g took 3.8 s
(bench/results/2026-12-07-teardown.md). As PID 1 with the cgroup tracker, the stop now reads the
instance's cgroup.procs once, frozen, and signals each pid through a pidfd whose identity the
namespace's last pid proves (docs/design.md, "The bulk listing"); with the /proc tracker the
start-time read before each signal is gone.

The trees here are 150 processes: enough for the bulk listing (100 or more), quick to fork."""
import json
import os
import re
import signal
import subprocess
import unittest
import uuid

from lctest import LastcallTestCase, cgroup2_root, cgroup_usable, needs_strace, remove_cgroup

MEMBERS = 150
# The main shell, MEMBERS - 1 sleeps, then a line on the FIFO once every fork returned.
TREE = ('for i in $(seq {n}); do sleep 1000 & done; {extra}'
        'echo ready > "$EVENTS"; wait')
PROC_OPEN = re.compile(r'open(at)?\(.*"/proc/\d+/')
PROC_LISTING = re.compile(r'open(at)?\(.*"/proc", .*O_DIRECTORY')
CGROUP_LISTING = re.compile(r'open(at)?\(.*/cgroup\.procs"')


class BigTree(LastcallTestCase):
    def stop_traced(self, tracker, pid1, script, report=None):
        """Starts lastcall over `script`, waits for its "ready", attaches strace to lastcall
        alone, sends SIGTERM; returns the run, its exit code and its opens and pidfd_opens from
        then on."""
        extra = ["--report", report] if report else []
        run = self.start(["--tracker", tracker, "--grace", "30s"] + extra + ["--", "sh", "-c",
                                                                          script], pid1=pid1)
        self.fifo.expect("ready", timeout=60)
        trace = os.path.join(self.dir, "trace")
        pid = run.lastcall_pid()
        strace = subprocess.Popen(["strace", "-qq", "-e", "trace=open,openat,pidfd_open", "-o",
                                   trace, "-p", str(pid)], stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: strace.poll() is None and strace.kill())
        while tracer_of(pid) == 0:  # strace attaches before it traces: bounded by its start
            self.assertIsNone(strace.poll(), "strace could not attach")
        run.signal(signal.SIGTERM)
        code = run.wait()
        strace.wait(timeout=60)
        with open(trace) as f:
            return run, code, f.readlines()

    def assertStoppedClean(self, run, code):
        out = run.output()
        self.assertEqual(code, 128 + signal.SIGTERM, out[-3000:])
        self.assertRegex(out, rf"shutdown clean.* {MEMBERS} sent the stop signal")

    def assertReportItemisesEveryStopSignal(self, report):
        with open(report) as f:
            processes = json.load(f)["processes"]
        self.assertEqual(len([p for p in processes if p.get("stop_signal") == "SIGTERM"]),
                         MEMBERS, processes[:5])

    @needs_strace("(counts what lastcall opens)")
    def test_a_150_process_tree_as_pid1_is_stopped_without_a_proc_read_per_process(self):
        if not cgroup_usable():
            self.skipTest("needs a writable cgroup2 hierarchy (the bulk listing is the cgroup "
                          "tracker's)")
        report = os.path.join(self.dir, "report.json")
        run, code, calls = self.stop_traced("cgroup", True, TREE.format(n=MEMBERS - 1, extra=""),
                                            report)
        opened = [line for line in calls if PROC_OPEN.search(line)]
        self.assertStoppedClean(run, code)
        # c88b909: about four per process (children file, stat twice, cmdline): 600 here. Now
        # the main child's stat and what the reaper reads of processes it did not know.
        self.assertLess(len(opened), MEMBERS // 10, "".join(opened[:40]))
        # The report still itemises every stop signal: by pid (their names were not read).
        self.assertReportItemisesEveryStopSignal(report)
        self.assertNoLeftovers()

    @needs_strace("(counts what lastcall opens)")
    def test_the_cgroup_trackers_stop_of_a_big_tree_lists_the_cgroups_and_proc_once(self):
        if not cgroup_usable():
            self.skipTest("needs a writable cgroup2 hierarchy (the bulk listing is the cgroup "
                          "tracker's)")
        # At b3a717d each pass read the instance's cgroup.procs and all of /proc again (for the
        # processes outside the cgroups), and the first pass read the cgroup.procs the bulk
        # stop's size check had just read: 3 listings of the cgroups and 2 of /proc here, the
        # later ones while the tree the first pass had woken died on every CPU (0.25-0.6 s of a
        # 10,000-process stop each, bench/results). Nobody forks in this tree during the stop:
        # no pid is handed out after the first listing, which stays the whole story, and nobody
        # is outside the cgroups, so /proc is not listed again.
        run, code, calls = self.stop_traced("cgroup", True, TREE.format(n=MEMBERS - 1, extra=""))
        self.assertStoppedClean(run, code)
        self.assertEqual(len([c for c in calls if CGROUP_LISTING.search(c)]), 1, "".join(calls[:60]))
        self.assertEqual(len([c for c in calls if PROC_LISTING.search(c)]), 1, "".join(calls[:60]))
        self.assertNoLeftovers()

    def test_a_member_of_a_big_tree_that_left_the_cgroups_gets_the_stop_signal(self):
        # The cgroup tracker's bulk stop lists the processes outside the instance's cgroups (from
        # /proc) in its first pass, and again only after a pass that found somebody there: a
        # member that moved itself into another cgroup, and the child it started there, still
        # get their SIGTERM (the subshell's trap says so), not only the kill at grace end.
        if not cgroup_usable():
            self.skipTest("needs a writable cgroup2 hierarchy (the bulk listing is the cgroup "
                          "tracker's)")
        with open("/proc/self/cgroup") as f:
            rel = [l.strip()[3:] for l in f if l.startswith("0::")][0]
        outside = os.path.join(cgroup2_root() + (rel if rel != "/" else ""),
                               f"lctest-outside-{uuid.uuid4().hex[:8]}")
        os.mkdir(outside)
        self.addCleanup(remove_cgroup, outside)
        moved = ('( echo 0 > "$OUTSIDE/cgroup.procs" || exit 1; trap \'echo outside-term > '
                 '"$EVENTS"; exit 0\' TERM; sleep 1000 & echo moved > "$EVENTS"; wait ) & ')
        env = dict(self.env, OUTSIDE=outside)
        run = self.start(["--tracker", "cgroup", "--grace", "30s", "--", "sh", "-c",
                          TREE.format(n=MEMBERS - 3, extra=moved)], pid1=True, env=env)
        seen = set()
        while seen != {"moved", "ready"}:
            seen.add(self.fifo.readline(timeout=60))
        with open(os.path.join(outside, "cgroup.procs")) as f:
            self.assertEqual(len(f.read().split()), 2, "the subshell and its sleep moved out")
        run.signal(signal.SIGTERM)
        self.assertEqual(self.fifo.readline(timeout=30), "outside-term")
        self.assertStoppedClean(run, run.wait())
        self.assertNoLeftovers()

    @needs_strace("(counts what lastcall opens)")
    def test_the_proc_tracker_as_pid1_reads_each_process_of_a_big_tree_once(self):
        # At 39756c4 the walk read each process's children file and stat, each pass, and the
        # record its command line: 693 /proc opens for this tree (strace, 4.6 per process). As
        # PID 1 of the namespace /proc shows, one listing of /proc and one stat per process now
        # (149); a member signalled in an earlier pass is not read again.
        report = os.path.join(self.dir, "report.json")
        run, code, calls = self.stop_traced("proc", True, TREE.format(n=MEMBERS - 1, extra=""),
                                            report)
        opened = [line for line in calls if PROC_OPEN.search(line)]
        self.assertStoppedClean(run, code)
        self.assertEqual([c for c in opened if "/children" in c or "/cmdline" in c], [])
        self.assertLess(len(opened), MEMBERS + MEMBERS // 5, "".join(opened[:40]))
        self.assertReportItemisesEveryStopSignal(report)
        self.assertNoLeftovers()

    @needs_strace("(counts what lastcall opens)")
    def test_the_proc_trackers_stop_of_a_big_tree_lists_proc_once_when_nobody_forks(self):
        # At 5a84c37 each pass listed /proc again and read the stat of every process not
        # signalled yet: 3 listings here, the later ones while the woken tree died on every CPU.
        # Nobody forks in this tree during the stop, so no pid is handed out after the first
        # listing, which the first pass went through whole: the passes after it have nobody
        # left to find.
        run, code, calls = self.stop_traced("proc", True, TREE.format(n=MEMBERS - 1, extra=""))
        self.assertStoppedClean(run, code)
        self.assertEqual(len([c for c in calls if PROC_LISTING.search(c)]), 1, "".join(calls[:60]))
        self.assertNoLeftovers()

    @needs_strace("(counts what lastcall opens)")
    def test_the_proc_tracker_signals_a_process_without_reading_its_stat_again_first(self):
        run, code, calls = self.stop_traced("proc", False, TREE.format(n=MEMBERS - 1, extra=""))
        out = run.output()
        self.assertEqual(code, 128 + signal.SIGTERM, out[-3000:])
        self.assertRegex(out, rf"shutdown clean.* {MEMBERS} sent the stop signal")
        # c88b909 read each process's stat between its pidfd_open and its signal (the start-time
        # check): 150 such reads here. The namespace's last pid proves the same now.
        checks = [b for a, b in zip(calls, calls[1:])
                  if (m := re.search(r"pidfd_open\((\d+)", a)) and f'"/proc/{m[1]}/stat"' in b]
        self.assertLess(len(checks), MEMBERS // 10, "".join(checks[:40]))
        self.assertNoLeftovers()

    def test_a_cleanup_helper_of_a_big_tree_is_not_sent_the_stop_signal(self):
        # The main shell's TERM trap starts a helper and waits for it: a helper signalled by the
        # tree's pass would end early, and `cleaned` would never be written. The trap is set
        # after the forks: a child forked with the shell's handler and signalled before its exec
        # takes the SIGTERM in that handler, and its `sleep` then runs on unsignalled.
        script = TREE.format(n=MEMBERS - 1,
                             extra="trap 'sleep 0.3 && echo cleaned > \"$EVENTS\"; exit 0' TERM; ")
        for tracker in trackers():
            with self.subTest(tracker=tracker):
                run = self.start(["--tracker", tracker, "--grace", "30s", "--", "sh", "-c",
                                  script], pid1=True)
                self.fifo.expect("ready", timeout=60)
                run.signal(signal.SIGTERM)
                self.assertEqual(self.fifo.readline(timeout=30), "cleaned")
                self.assertEqual(run.wait(), 0, run.output()[-3000:])
                self.assertIn("shutdown clean", run.output())
                self.assertNoLeftovers()

    def test_a_stopped_member_of_a_big_tree_acts_on_its_stop_signal(self):
        # SIGSTOPped before the SIGTERM: without the SIGCONT after its stop signal it would sleep
        # stopped until the kill at the end of the grace (a forced stop, 137).
        extra = 'sleep 1000 & kill -STOP $!; '
        for tracker in trackers():
            with self.subTest(tracker=tracker):
                run = self.start(["--tracker", tracker, "--grace", "30s", "--", "sh", "-c",
                                  TREE.format(n=MEMBERS - 2, extra=extra)], pid1=True)
                self.fifo.expect("ready", timeout=60)
                run.signal(signal.SIGTERM)
                self.assertEqual(run.wait(), 128 + signal.SIGTERM, run.output()[-3000:])
                self.assertRegex(run.output(),
                                 rf"shutdown clean.* {MEMBERS} sent the stop signal")
                self.assertNoLeftovers()


def trackers():
    """Both trackers where a cgroup can be made here: each has its own bulk listing as PID 1."""
    return ["cgroup", "proc"] if cgroup_usable() else ["proc"]


def tracer_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


if __name__ == "__main__":
    unittest.main()
