# SPDX-License-Identifier: Apache-2.0
"""Shared utilities for lastcall's end-to-end tests.

Tests run the real binary ($LASTCALL) against real process trees. Synchronisation is by events:
a child writes a line to a FIFO the test reads (lastcall closes every fd >= 3 in its child, so
FIFOs are passed by path in the environment), and lastcall's exit is awaited with waitpid.
Leftovers are found by a unique marker in /proc/*/environ, never by process name.
"""
import atexit
import datetime
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

LASTCALL = os.environ.get("LASTCALL", os.path.join(os.path.dirname(__file__), "../../build/lastcall"))
HELPERS = os.environ.get("LASTCALL_HELPERS", os.path.join(os.path.dirname(LASTCALL), "helpers"))
BUILD = os.environ.get("LASTCALL_BUILD", os.path.dirname(LASTCALL))

# Every temporary file and directory of a test process (lctest's own and each test's
# tempfile.mkdtemp) lives under one session directory, removed when the process exits: a run of
# the suite leaves nothing in /tmp. 0755: some tests run lastcall as nobody inside it.
SESSION_DIR = tempfile.mkdtemp(prefix="lctest-session-")
os.chmod(SESSION_DIR, 0o755)
tempfile.tempdir = SESSION_DIR


@atexit.register
def _remove_session_dir():
    shutil.rmtree(SESSION_DIR, ignore_errors=True)


def helper(name):
    return os.path.join(HELPERS, name)


def new_marker():
    return "LCTEST_" + uuid.uuid4().hex


def marked_pids(marker):
    """Pids of live (non-zombie) processes whose environment contains marker."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read():
                    continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def report_time(stamp):
    """A report's UTC timestamp ("2026-12-05T12:24:08.958Z") in seconds since the epoch."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def wait_exit(pid, timeout=30.0):
    """Waits for a process that is not our child to exit, through a pidfd (an event, not a poll).
    True when it exited within the timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        r, _, _ = select.select([fd], [], [], timeout)
        return bool(r)
    finally:
        os.close(fd)


def cgroup2_root():
    """The cgroup2 mount point, read from mountinfo (it is not always /sys/fs/cgroup)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if right.split()[0] == "cgroup2":
                return left.split()[4]
    return None


def cgroup_usable():
    """A writable cgroup2 hierarchy where lastcall's cgroup tracker can make its cgroups (root)."""
    mount = cgroup2_root()
    if mount is None or os.geteuid() != 0:
        return False
    with open("/proc/self/cgroup") as f:
        rel = [l.strip()[3:] for l in f if l.startswith("0::")][0]
    return os.access(mount + rel, os.W_OK)


def remove_cgroup(path):
    """Removes a cgroup a test made: SIGKILL to what is still in it, a wait for each, rmdir."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(p) for p in f.read().split()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in pids:
        wait_exit(pid, timeout=10)
    try:
        os.rmdir(path)
    except OSError:
        pass


def kill_marked(marker):
    for pid in marked_pids(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Fifo:
    """A named pipe the process tree writes lines into; read with a timeout (an event, not a sleep)."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "events.fifo")
        os.mkfifo(self.path)
        # O_RDWR keeps a writer open ourselves, so EOF never arrives between two writers.
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.buffer = b""

    def readline(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line on {self.path} within {timeout}s (have {self.buffer!r})")
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                self.buffer += os.read(self.fd, 65536)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def expect(self, text, timeout=20.0):
        """Reads lines until one equals text; returns the lines before it."""
        seen = []
        while True:
            line = self.readline(timeout)
            if line == text:
                return seen
            seen.append(line)

    def expect_prefix(self, prefix, timeout=20.0):
        """Reads lines until one starts with prefix; returns the rest of that line."""
        while True:
            line = self.readline(timeout)
            if line.startswith(prefix):
                return line[len(prefix):]

    def drain(self):
        """Everything written so far and not read yet (no waiting)."""
        try:
            self.buffer += os.read(self.fd, 65536)
        except BlockingIOError:
            pass
        out, self.buffer = self.buffer, b""
        return out

    def close(self):
        os.close(self.fd)


class Run:
    """A running lastcall: Popen plus its stderr log collected to a file."""

    def __init__(self, args, env=None, pid1=False, argv=None, prefix=(), log_path=None,
                 stderr=None, **kw):
        """args: lastcall's arguments; argv: the whole command instead (a compat symlink);
        prefix: a wrapper command in front (prlimit, setpriv); pid1: run in a new PID namespace."""
        self.pid1 = pid1
        self.tmp = tempfile.mkdtemp(prefix="lctest-")
        self.log_path = log_path or os.path.join(self.tmp, "lastcall.log")
        self.log = open(self.log_path, "wb")
        cmd = list(prefix) + (list(argv) if argv is not None else [LASTCALL] + verbose(args))
        if pid1:
            cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] + cmd
        self.proc = subprocess.Popen(cmd, env=env, stdout=kw.pop("stdout", self.log),
                                     stderr=stderr or self.log, **kw)

    def lastcall_pid(self, timeout=10.0):
        """lastcall's pid as seen from here (for pid1 runs: unshare's forked child)."""
        if not self.pid1:
            return self.proc.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            children = children_of(self.proc.pid)
            if children:
                return children[0]
            time.sleep(0.005)  # bounded wait for unshare's fork, which has no event to wait on
        raise TimeoutError("unshare did not fork lastcall")

    def signal(self, sig):
        os.kill(self.lastcall_pid(), sig)

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


SANITIZED = os.environ.get("LASTCALL_SANITIZED", "").lower() in ("1", "true", "on")


def needs_strace(why):
    """Skips a test that runs lastcall under strace (fault injection widens a race window):
    strace must be installed and ptrace allowed, and LeakSanitizer does not work under ptrace."""
    works = shutil.which("strace") and subprocess.run(
        ["strace", "-o", "/dev/null", "true"], capture_output=True).returncode == 0
    if not works:
        return unittest.skip(f"needs a working strace (ptrace allowed) {why}")
    if SANITIZED:
        return unittest.skip("LeakSanitizer does not work under ptrace (strace)")
    return lambda f: f


def children_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def verbose(args):
    """lastcall's arguments with -v: the tests read the lifecycle lines, which a run prints only
    with -v (by default only warnings, errors and a shutdown's summary). Not for a peer's command
    line (--compat) nor for the subcommands that print tables; `up` takes it after its name.
    A test of the default output passes quiet=True to start()."""
    args = list(args)
    if not args or args[0] == "--compat" or args[0] in ("status", "runs", "jobs", "report"):
        return args
    if args[0] == "up":
        return ["up", "-v"] + args[1:]
    return ["-v"] + args


def build_tool(name):
    """Path of a test driver built beside lastcall (tests/tools, $LASTCALL_BUILD/tools)."""
    build = os.environ.get("LASTCALL_BUILD")
    if not build:
        raise unittest.SkipTest("LASTCALL_BUILD is not set")
    path = os.path.join(build, "tools", name)
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} was not built")
    return path


class LastcallTestCase(unittest.TestCase):
    """Gives each test a temp dir, a FIFO, a marker; kills anything left with the marker at the end
    (after asserting, in tests that care, that nothing was left)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lctest-")
        self.fifo = Fifo(self.dir)
        self.marker = new_marker()
        self.env = dict(os.environ, LCTEST_MARKER=self.marker, EVENTS=self.fifo.path)

    def tearDown(self):
        kill_marked(self.marker)
        self.fifo.close()

    def write_file(self, name, text):
        """Writes text to a file of the test's directory; returns its path."""
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, args, pid1=False, quiet=False, **kw):
        if quiet:  # lastcall's default output: the whole command line as given
            kw["argv"] = [LASTCALL] + list(args)
        return Run(args, env=kw.pop("env", self.env), pid1=pid1, **kw)

    def assertNoLeftovers(self):
        self.assertEqual(marked_pids(self.marker), [], "processes of the test's tree survived lastcall")
