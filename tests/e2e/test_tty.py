"""TTY job control on a real pty (issue 5).

The test forks a child with pty.fork(): it leads a new session with the pty's slave as its
controlling terminal and execs lastcall, as a container's init does under `docker run -t`. ^C and
^Z are written to the master, so the kernel's line discipline delivers SIGINT/SIGTSTP to the
terminal's foreground group, exactly as for a person at a keyboard.
"""
import os
import pty
import signal
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, helper

CTRL_C = b"\x03"
CTRL_Z = b"\x1a"


def proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class TtyJobControl(LastcallTestCase):
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

    def spawn_on_pty(self, argv):
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pid, master = pty.fork()
        if pid == 0:
            # stdin and stdout stay on the pty (the child must see a terminal); the log goes to
            # a file so that nothing needs to drain the master.
            os.dup2(log, 2)
            try:
                os.execve(argv[0], argv, self.env)
            finally:
                os._exit(127)
        os.close(log)
        self.pid, self.master = pid, master

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

    def test_ctrl_c_ends_the_child_group(self):
        self.spawn_on_pty([LASTCALL, "--", helper("sigprobe"), "child", "--default", "--fork",
                           "grandchild"])
        pids = {}
        while len(pids) < 2:
            words = self.fifo.readline().split()
            pids[words[0]] = int(words[2])
        os.write(self.master, CTRL_C)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        self.assertTrue(os.WIFEXITED(status), status)
        self.assertEqual(os.WEXITSTATUS(status), 128 + signal.SIGINT, self.log())
        self.assertIn("received SIGINT", self.log())
        self.assertNotIn("SIGKILL", self.log())  # the group ended on SIGINT, not on escalation
        self.assertNoLeftovers()

    def test_ctrl_z_stops_child_and_lastcall_and_sigcont_resumes_them(self):
        self.spawn_on_pty([LASTCALL, "--", helper("sigprobe"), "child", "--default", "--go",
                           self.go])
        words = self.fifo.readline().split()
        self.assertEqual(words[:2], ["child", "ready"])
        child = int(words[2])

        os.write(self.master, CTRL_Z)
        _, status = os.waitpid(self.pid, os.WUNTRACED)
        self.assertTrue(os.WIFSTOPPED(status), status)
        self.wait_for_state(child, "T")

        os.kill(self.pid, signal.SIGCONT)
        _, status = os.waitpid(self.pid, os.WCONTINUED)
        self.assertTrue(os.WIFCONTINUED(status), status)
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


if __name__ == "__main__":
    unittest.main()
