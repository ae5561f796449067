# SPDX-License-Identifier: Apache-2.0
"""lastcall bounded and self-protecting under load (issue 42, items 1 and 2).

- A crash-looping service held one cgroup directory and its descriptor per restart (245
  descriptors and 224 cgroup directories after ~50 s, still growing).
- lastcall ran with the descriptor limit it was given (systemd's 1,024: half of 1,000 services
  failed with EMFILE), and passed whatever it had to its units.
- In a memory-limited cgroup filled by small children the OOM killer chose lastcall, and the
  whole namespace died with it, without a report.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

from lctest import LastcallTestCase, cgroup2_root, cgroup_usable, helper, remove_cgroup

# Restarts between the two samples of the flatness test (and before the first). The issue asks
# for 10,000, but each restart also rewrites the services' status file (an fsync), and 2 x 10,000
# took minutes: far over the suite's budget for one test. 400 (800 restarts) take ~10 s on the
# loaded 2-core development VM with the status file on tmpfs, about 90 restarts a second. A leak
# shows at any count: it grew by one cgroup directory and one descriptor per restart.
# Under the sanitizers (make test-sanitize) a restart costs several times as much, and 100 show a
# leak as well as 400 do.
RESTARTS = int(os.environ.get("LCTEST_LIMITS_RESTARTS",
                              "100" if "ASAN_OPTIONS" in os.environ else "400"))


def can_lower_oom_score_adj():
    """CAP_SYS_RESOURCE in the effective set: what lowering oom_score_adj takes (root alone is
    not enough in a container that drops it)."""
    with open("/proc/self/status") as f:
        caps = [l.split()[1] for l in f if l.startswith("CapEff:")][0]
    return bool(int(caps, 16) & (1 << 24))


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def instance_cgroup(pid):
    """lastcall's instance cgroup ("lastcall-<pid>-<random>" in its own cgroup), or None."""
    mount = cgroup2_root()
    with open(f"/proc/{pid}/cgroup") as f:
        rel = [l.strip()[3:] for l in f if l.startswith("0::")][0]
    own = mount + (rel if rel != "/" else "")
    for name in os.listdir(own):
        if name.startswith(f"lastcall-{pid}-"):
            return os.path.join(own, name)
    return None


def cgroup_dirs(top):
    """Directories below `top` (its unit scopes and theirs), `top` itself not counted."""
    if top is None:
        return 0
    return sum(len(dirs) for _, dirs, _ in os.walk(top))


class LogWatch:
    """Reads lastcall's log from a pipe as it comes (a stalled pipe would hold it or lose lines)
    and says when a service's restart count has reached a number."""

    RESTART = re.compile(r"service \S+: started pid \d+ \(restart (\d+)\)")

    def __init__(self, pipe):
        self.pipe = pipe
        self.restarts = 0
        self.tail = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.pipe:
            line = raw.decode(errors="replace")
            m = self.RESTART.search(line)
            with self.cond:
                self.tail = (self.tail + [line])[-30:]
                if m:
                    self.restarts = int(m.group(1))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_restarts(self, n, timeout):
        with self.cond:
            ok = self.cond.wait_for(lambda: self.restarts >= n or not self.thread.is_alive(),
                                    timeout)
            return ok and self.restarts >= n

    def last_lines(self):
        with self.cond:
            return "".join(self.tail)


class DescriptorsAndCgroups(LastcallTestCase):
    def crash_loop(self, tracker):
        """lastcall's open descriptors and instance cgroup directories after RESTARTS restarts of
        a service that exits at once, and after twice as many."""
        cfg = self.write_file("crash.toml", """[services.crash]
command = ["true"]
restart = "always"
backoff = { initial = "1ms", factor = 1, max = "1ms" }
restart_limit = { burst = 1000000, interval = "1ms" }
""")
        # The status file, rewritten and fsynced at every start and exit, on tmpfs where there
        # is one: on a busy disk the fsyncs, not lastcall, set the pace of the restarts (17 a
        # second against 90).
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        runtime = tempfile.mkdtemp(prefix="lctest-runtime-", dir=shm)
        self.addCleanup(shutil.rmtree, runtime, True)
        env = dict(self.env, XDG_RUNTIME_DIR=runtime)
        run = self.start(["--tracker", tracker, "--config", cfg], env=env, stderr=subprocess.PIPE)
        log = LogWatch(run.proc.stderr)

        def look():
            return open_fds(run.proc.pid), cgroup_dirs(instance_cgroup(run.proc.pid))

        try:
            self.assertTrue(log.wait_restarts(RESTARTS, timeout=240), log.last_lines())
            # The service keeps restarting while we look, and an instance in flight holds its
            # scope, pidfd, pipes, and the status file being rewritten (here 18-23 descriptors
            # in a second of looks). The level between two instances is the fewest of a second
            # of looks: a restart every ~10 ms leaves at least its 1 ms backoff in each.
            looks, end = [], time.monotonic() + 1.0
            while time.monotonic() < end or len(looks) < 20:
                looks.append(look())
            fds1, dirs1 = min(f for f, _ in looks), min(d for _, d in looks)
            self.assertTrue(log.wait_restarts(2 * RESTARTS, timeout=240), log.last_lines())
            # Flat: after as many restarts again the same level comes back (a few of slack). A
            # leak of one per restart stays RESTARTS above it for ever, so the wait, bounded,
            # decides; the fewest seen is what the message reports.
            fds2, dirs2, end = None, None, time.monotonic() + 10.0
            while True:
                fds, dirs = look()
                fds2 = fds if fds2 is None else min(fds2, fds)
                dirs2 = dirs if dirs2 is None else min(dirs2, dirs)
                if (fds2 <= fds1 + 3 and dirs2 <= dirs1 + 2) or time.monotonic() > end:
                    break
        finally:
            run.signal(signal.SIGTERM)
            run.wait()
            log.thread.join(timeout=30)
            run.proc.stderr.close()
        return (fds1, dirs1), (fds2, dirs2)

    def check_flat(self, tracker):
        (fds1, dirs1), (fds2, dirs2) = self.crash_loop(tracker)
        print(f"\n{tracker} tracker: after {RESTARTS} restarts {fds1} descriptors, {dirs1} cgroups;"
              f" after {2 * RESTARTS} {fds2}, {dirs2}")
        # Flat: nothing that grew per restart. A few of slack for what a restart in flight holds.
        self.assertLessEqual(fds2, fds1 + 3, f"descriptors {fds1} -> {fds2} over {RESTARTS} restarts")
        self.assertLessEqual(dirs2, dirs1 + 2, f"cgroups {dirs1} -> {dirs2} over {RESTARTS} restarts")
        return dirs2

    @unittest.skipUnless(cgroup_usable(), "needs a writable cgroup2 hierarchy (root)")
    def test_a_crash_looping_service_keeps_lastcalls_descriptors_and_cgroups_flat_cgroup_tracker(self):
        self.check_flat("cgroup")

    def test_a_crash_looping_service_keeps_lastcalls_descriptors_flat_proc_tracker(self):
        # The /proc tracker holds no descriptor per unit: this guards the property (the earlier
        # instances' scopes were kept there too, as memory and a /proc walk each per stop).
        self.assertEqual(self.check_flat("proc"), 0)


class Limits(LastcallTestCase):
    def test_lastcall_raises_its_own_descriptor_limit_and_its_units_get_the_one_it_was_given(self):
        # Started under `ulimit -n 256` (hard 4096): lastcall's own soft limit is the hard one,
        # and the main command and a service each get 256 back.
        cfg = self.write_file("svc.toml", """[services.side]
command = 'ulimit -Sn > "$OUT.svc.tmp" && mv "$OUT.svc.tmp" "$OUT.svc" && echo svc > "$EVENTS" && exec sleep 1000'
""")
        out = os.path.join(self.dir, "nofile")
        env = dict(self.env, OUT=out)
        script = 'ulimit -Sn > "$OUT.main"; echo main > "$EVENTS"; exec sleep 1000'
        run = self.start(["--config", cfg, "--", "sh", "-c", script], env=env,
                         prefix=["prlimit", "--nofile=256:4096", "--"])
        try:
            self.assertEqual(sorted([self.fifo.readline(), self.fifo.readline()]), ["main", "svc"])
            with open(f"/proc/{run.proc.pid}/limits") as f:
                nofile = [l.split()[3:5] for l in f if l.startswith("Max open files")][0]
            self.assertEqual(nofile, ["4096", "4096"], "lastcall's own soft limit is not the hard one")
            for unit in ("main", "svc"):
                with open(f"{out}.{unit}") as f:
                    self.assertEqual(f.read().strip(), "256", f"the {unit} unit's soft limit")
        finally:
            run.signal(signal.SIGTERM)
            run.wait()
        self.assertNoLeftovers()

    @unittest.skipUnless(can_lower_oom_score_adj(), "lowering oom_score_adj needs CAP_SYS_RESOURCE")
    def test_lastcall_is_never_the_oom_killers_choice_and_its_units_keep_the_score_they_inherited(self):
        out = os.path.join(self.dir, "oom")
        env = dict(self.env, OUT=out)
        script = 'cat /proc/self/oom_score_adj > "$OUT"; echo main > "$EVENTS"; exec sleep 1000'
        run = self.start(["--", "sh", "-c", script], env=env, prefix=["choom", "-n", "100", "--"])
        try:
            self.assertEqual(self.fifo.readline(), "main")
            with open(f"/proc/{run.proc.pid}/oom_score_adj") as f:
                self.assertEqual(f.read().strip(), "-1000", "lastcall's own oom_score_adj")
            with open(out) as f:
                self.assertEqual(f.read().strip(), "100", "the main command's oom_score_adj")
        finally:
            run.signal(signal.SIGTERM)
            run.wait()
        self.assertNoLeftovers()


def _v1_memory_dir():
    """The test's own cgroup of the v1 memory controller (a hybrid hierarchy), or None."""
    rel = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                rel = path
    if rel is None:
        return None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _, options = right.split()[:3]
            if fstype == "cgroup" and "memory" in options.split(","):
                root, mountpoint = left.split()[3:5]
                if root != "/" and not rel.startswith(root):
                    continue
                inside = rel if root == "/" else rel[len(root):]
                return mountpoint + inside.rstrip("/")
    return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


class MemoryCgroup:
    """A memory-limited cgroup the test creates: cgroup v2 (memory.max) where the memory
    controller can be enabled for it, else the v1 memory controller (memory.limit_in_bytes) of a
    hybrid hierarchy. `why_not` says why neither could be made."""

    def __init__(self, limit):
        self.path = None
        self.why_not = []
        name = "lctest-oom-" + uuid.uuid4().hex[:12]
        mount = cgroup2_root()
        if mount is not None:
            with open("/proc/self/cgroup") as f:
                rel = [l.strip()[3:] for l in f if l.startswith("0::")][0]
            # The test's own cgroup, else the hierarchy's root: a cgroup with processes cannot
            # pass the memory controller on (no internal processes), the root can.
            for parent in dict.fromkeys([mount + (rel if rel != "/" else ""), mount]):
                if self._make_v2(parent, name, limit):
                    return
        v1 = _v1_memory_dir()
        if v1 is None:
            self.why_not.append("no v1 memory controller")
            return
        try:
            path = os.path.join(v1, name)
            os.mkdir(path)
            self.path = path
            _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
        except OSError as e:
            self.why_not.append(f"v1 {v1}: {e}")
            self.remove()

    def _make_v2(self, parent, name, limit):
        try:
            with open(os.path.join(parent, "cgroup.controllers")) as f:
                if "memory" not in f.read().split():
                    self.why_not.append(f"{parent}: no memory controller in cgroup v2")
                    return False
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                enabled = "memory" in f.read().split()
            if not enabled:
                _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
            path = os.path.join(parent, name)
            os.mkdir(path)
            self.path = path
            _write(os.path.join(path, "memory.max"), str(limit))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
            return True
        except OSError as e:
            self.why_not.append(f"v2 {parent}: {e}")
            self.remove()
            return False

    def enter(self):
        """For preexec_fn: moves the calling process (the child about to exec) into the cgroup."""
        _write(os.path.join(self.path, "cgroup.procs"), str(os.getpid()))

    def remove(self):
        if self.path is None:
            return
        remove_cgroup(self.path)
        self.path = None


class OutOfMemory(LastcallTestCase):
    def fill_memory(self, *memfill_args):
        """lastcall as PID 1 of its namespace in a 64 MiB cgroup of its own, its main command
        filling it with 512 KiB children until the OOM killer takes one: the issue's probe
        (1,000 small children, none larger than the init), smaller."""
        if os.geteuid() != 0:
            self.skipTest("needs root to create a memory cgroup")
        if "ASAN_OPTIONS" in os.environ:
            # AddressSanitizer's shadow memory and quarantine alone outgrow the 64 MiB: the
            # namespace's first process fails before lastcall runs (make test runs this case).
            self.skipTest("the 64 MiB limit is sized for the optimized build, not for ASan")
        cgroup = MemoryCgroup(64 * 1024 * 1024)
        if cgroup.path is None:
            self.skipTest("cannot create a memory-limited cgroup: " + "; ".join(cgroup.why_not))
        self.addCleanup(cgroup.remove)
        report = os.path.join(self.dir, "report.json")
        run = self.start(["--report", report, "--", helper("memfill"), "4000", "512"] +
                         list(memfill_args), pid1=True, preexec_fn=cgroup.enter)
        code = run.wait(timeout=120)
        output = run.output()
        self.assertIn("oom-killed", output, output[-3000:])
        self.assertTrue(os.path.exists(report), "no report: lastcall died\n" + output[-3000:])
        self.assertEqual(code, 0, output[-3000:])
        with open(report) as f:
            doc = json.load(f)
        self.assertGreaterEqual(doc.get("oom_kills") or 0, 1,
                                f"the report has no OOM kill: {doc.get('oom_kills')!r}")
        self.assertIn("killed by the OOM killer", output)

    @unittest.skipUnless(can_lower_oom_score_adj(),
                         "lastcall can protect itself only with CAP_SYS_RESOURCE (root)")
    def test_lastcall_outlives_an_oom_in_its_cgroup_and_reports_the_oom_kill(self):
        # The children keep the score lastcall was given (0): the OOM killer chose lastcall,
        # the largest process, and the namespace and its report died with it.
        self.fill_memory()

    def test_an_oom_kill_of_a_unit_is_in_the_report(self):
        # The children raise their own score to 1000, so that the OOM killer chooses one of
        # them whatever lastcall's own (where lastcall cannot protect itself, without
        # CAP_SYS_RESOURCE): this is about the report, which said nothing of an OOM kill.
        self.fill_memory("1000")
