# SPDX-License-Identifier: Apache-2.0
"""TTY job control on a real pty (issues 5 and 17).

The test forks a child with pty.fork(): it leads a new session with the pty's slave as its
controlling terminal and execs lastcall, as a container's init does under `docker run -t`. ^C and
^Z are written to the master, so the kernel's line discipline delivers SIGINT/SIGTSTP to the
terminal's foreground group, exactly as for a person at a keyboard.
"""
import os
import pty
import re
import select
import signal
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, helper

REAL_TINI = "/usr/bin/tini"
REAL_DUMB_INIT = "/usr/bin/dumb-init"

CTRL_C = b"\x03"
CTRL_Z = b"\x1a"


def proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def proc_stat(pid):
    """(state, pgrp, session, tpgid) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[2]), int(fields[3]), int(fields[5])


class TtyCase(LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.go = os.path.join(self.dir, "go.fifo")
        os.mkfifo(self.go)
        self.log_path = os.path.join(self.dir, "lastcall.log")
        self.pid = None
        self.master = None

    def tearDown(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if self.master is not None:
            os.close(self.master)
        super().tearDown()

    def spawn_on_pty(self, argv, executable=None, stderr_on_pty=False, env=None):
        """Starts argv as the leader of a new session whose controlling terminal is a new pty,
        as `docker run -it` starts a container's init."""
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pid, master = pty.fork()
        if pid == 0:
            # stdin and stdout stay on the pty (the child must see a terminal); the log goes to
            # a file so that nothing needs to drain the master, unless a shell's prompt and job
            # messages (on stderr) are read from it.
            if not stderr_on_pty:
                os.dup2(log, 2)
            try:
                os.execve(executable or argv[0], argv, dict(self.env, **(env or {})))
            finally:
                os._exit(127)
        os.close(log)
        self.pid, self.master = pid, master
        self.screen = b""

    def read_until(self, pattern, timeout=20.0):
        """Reads the terminal until the regex matches what was output since the last match."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.screen)
            if m:
                self.screen = self.screen[m.end():]
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail(f"no {pattern!r} on the terminal; got {self.screen[-2000:]!r}")
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:  # EIO: every process closed the terminal
                    self.fail(f"terminal closed before {pattern!r}; got {self.screen[-2000:]!r}")

    def wait_until(self, what, predicate, timeout=10.0):
        # A process state has no event a third process can wait on; the poll is bounded.
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}; terminal: {self.screen[-2000:]!r}")
            time.sleep(0.01)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_for_state(self, pid, want, timeout=10.0):
        # The state is polled: a stop has no event a third process can wait on (only the parent
        # gets SIGCHLD/WUNTRACED for it), and the poll is bounded.
        deadline = time.monotonic() + timeout
        while True:
            state = proc_state(pid)
            if (state == want) if want == "T" else (state != "T"):
                return state
            if time.monotonic() > deadline:
                self.fail(f"pid {pid} state {state}, wanted {want}; log:\n{self.log()}")
            time.sleep(0.01)

class TtyJobControl(TtyCase):
    def test_default_mode_gives_the_child_group_the_terminal_and_ctrl_c_reaches_it_directly(self):
        self.spawn_on_pty([LASTCALL, "--", helper("sigprobe"), "child", "--default", "--fork",
                           "grandchild"])
        pids = {}
        while len(pids) < 2:
            words = self.fifo.readline().split()
            pids[words[0]] = int(words[2])
        _, pgrp, _, tpgid = proc_stat(pids["child"])
        self.assertEqual((pgrp, tpgid), (pids["child"], pids["child"]),
                         "the child's group is not the terminal's foreground group")
        os.write(self.master, CTRL_C)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        self.assertTrue(os.WIFEXITED(status), status)
        self.assertEqual(os.WEXITSTATUS(status), 128 + signal.SIGINT, self.log())
        self.assertNotIn("received SIGINT", self.log())  # the kernel sent it to the group itself
        self.assertNotIn("SIGKILL", self.log())
        self.assertNoLeftovers()

    def test_ctrl_z_stops_the_child_group_and_sigcont_to_lastcall_resumes_it(self):
        self.spawn_on_pty([LASTCALL, "--", helper("sigprobe"), "child", "--default", "--go",
                           self.go])
        words = self.fifo.readline().split()
        self.assertEqual(words[:2], ["child", "ready"])
        child = int(words[2])

        os.write(self.master, CTRL_Z)
        self.wait_for_state(child, "T")
        self.assertNotEqual(proc_state(self.pid), "T")  # lastcall leads the session: it runs on

        os.kill(self.pid, signal.SIGCONT)
        self.wait_for_state(child, "not T")

        # The resumed child reads its go line and finishes normally, and so does lastcall.
        with open(self.go, "w") as f:
            f.write("go\n")
        self.fifo.expect("child done")
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        self.assertTrue(os.WIFEXITED(status), status)
        self.assertEqual(os.WEXITSTATUS(status), 0, self.log())
        self.assertNoLeftovers()

    def test_tini_mode_gives_the_child_the_terminal_and_ctrl_c_reaches_it_directly(self):
        link = os.path.join(self.dir, "tini")
        os.symlink(os.path.abspath(LASTCALL), link)
        self.spawn_on_pty([link, "-s", "-v", "--", helper("sigprobe"), "child", "--default"])
        words = self.fifo.readline().split()
        child = int(words[2])
        with open(f"/proc/{child}/stat") as f:
            tpgid = int(f.read().rsplit(")", 1)[1].split()[5])
        self.assertEqual(tpgid, child, "the child's group is not the terminal's foreground")
        os.write(self.master, CTRL_C)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        self.assertEqual(os.WEXITSTATUS(status), 128 + signal.SIGINT, self.log())
        self.assertNotIn("received SIGINT", self.log())  # the kernel sent it to the child itself


class ShellJobControl(TtyCase):
    """Item 10 of issue 17: `docker run -it IMAGE bash` with lastcall (or a peer) as PID 1. The
    shell survives ^C, a command in it is interrupted, ^Z and fg work."""

    def inits(self):
        links = {}
        for name in ("tini", "dumb-init"):
            links[name] = os.path.join(self.dir, name)
            os.symlink(os.path.abspath(LASTCALL), links[name])
        out = [("lastcall", LASTCALL, ["lastcall", "--"]),
               ("tini symlink", links["tini"], ["tini", "-s", "--"]),
               ("lastcall --compat tini", LASTCALL, ["lastcall", "--compat", "tini", "-s", "--"]),
               ("tini symlink and --compat tini", links["tini"],
                ["tini", "--compat", "tini", "-s", "--"]),
               ("dumb-init symlink", links["dumb-init"], ["dumb-init"]),
               ("lastcall --compat dumb-init", LASTCALL, ["lastcall", "--compat", "dumb-init"]),
               ("dumb-init symlink and --compat dumb-init", links["dumb-init"],
                ["dumb-init", "--compat", "dumb-init"])]
        if os.path.exists(REAL_TINI):
            out.append(("the real tini", REAL_TINI, ["tini", "-s", "--"]))
        if os.path.exists(REAL_DUMB_INIT):
            out.append(("the real dumb-init", REAL_DUMB_INIT, ["dumb-init"]))
        return out

    def job(self, tag):
        """Starts a 100 s job in the shell; returns its pid once it has the terminal."""
        os.write(self.master, f"sh -c 'echo {tag}-$$; exec sleep 100'\n".encode())
        pid = int(self.read_until(rf"{tag}-(\d+)".encode()).group(1))

        def in_foreground():
            try:
                state, pgrp, _, tpgid = proc_stat(pid)
            except OSError:
                return False
            return state != "T" and pgrp == pid and tpgid == pid

        self.wait_until(f"job {tag} (pid {pid}) in the terminal's foreground", in_foreground)
        return pid

    def alive(self, tag):
        """The shell still reads commands: it answers an echo (the typed line does not match)."""
        os.write(self.master, f"echo {tag}-$((6*7))\n".encode())
        self.read_until(f"{tag}-42".encode())

    def test_shell_survives_ctrl_c_and_ctrl_z_and_fg_work(self):
        for label, executable, argv in self.inits():
            with self.subTest(init=label):
                self.spawn_on_pty(argv + ["bash", "--norc", "--noprofile", "-i"], executable,
                                  stderr_on_pty=True, env={"PS1": "$ ", "HISTFILE": "",
                                                           "TERM": "dumb"})
                self.alive("A")
                self.job("S")
                os.write(self.master, CTRL_C)  # the job ends, the shell does not
                self.alive("B")
                job = self.job("T")
                os.write(self.master, CTRL_Z)
                self.read_until(rb"Stopped")
                self.assertEqual(proc_state(job), "T")
                self.alive("C")
                os.write(self.master, b"fg\n")
                self.wait_until("the job back in the foreground",
                                lambda: proc_stat(job)[0] != "T" and proc_stat(job)[3] == job)
                os.write(self.master, CTRL_C)
                self.alive("D")
                os.write(self.master, b"exit 0\n")
                _, status = os.waitpid(self.pid, 0)
                self.pid = None
                os.close(self.master)
                self.master = None
                self.assertTrue(os.WIFEXITED(status), status)
                self.assertEqual(os.WEXITSTATUS(status), 0)
                self.assertNoLeftovers()

    def test_dumb_init_hands_the_terminal_to_the_child_session_and_swallows_the_echo(self):
        for label, executable, argv in self.inits():
            if "dumb-init" not in label:
                continue
            with self.subTest(init=label):
                self.spawn_on_pty(argv + [helper("sigprobe"), "child"], executable)
                words = self.fifo.readline().split()
                child = int(words[2])
                _, pgrp, sid, tpgid = proc_stat(child)
                self.assertEqual((pgrp, sid, tpgid), (child, child, child))
                # The SIGHUP and SIGCONT the kernel sent when the init let go of the terminal
                # are not forwarded: the first signal the child sees is this SIGUSR1.
                os.kill(self.pid, signal.SIGUSR1)
                self.assertEqual(self.fifo.readline(), "child 10")
                os.kill(self.pid, signal.SIGTERM)
                self.assertEqual(self.fifo.readline(), "child 15")
                _, status = os.waitpid(self.pid, 0)
                self.pid = None
                os.close(self.master)
                self.master = None
                self.assertEqual(os.WEXITSTATUS(status), 0)


if __name__ == "__main__":
    unittest.main()
