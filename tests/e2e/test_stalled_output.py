# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 5: output to a stalled terminal or pipe never blocks the loop. `lastcall up`
whose stdout nobody reads (`lastcall up | less` scrolled back, a stuck log shipper), and lastcall
under tini's or dumb-init's name writing its verbose lines to a full pipe, still stop their tree
on the first signal: lines are dropped and counted, the stop is not held."""
import fcntl
import os
import signal
import subprocess

from lctest import LASTCALL, LastcallTestCase


def full_pipe():
    """A pipe whose buffer is already full and whose reader never reads: any blocking write to
    its write end waits forever."""
    r, w = os.pipe()
    flags = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    chunk = b"x" * 4096
    try:
        while True:
            os.write(w, chunk)
    except BlockingIOError:
        pass
    try:  # the last bytes a 4 KiB write could not take
        while True:
            os.write(w, b"x")
    except BlockingIOError:
        pass
    fcntl.fcntl(w, fcntl.F_SETFL, flags)
    return r, w


class StalledOutput(LastcallTestCase):
    def stalled(self, args, stdout_full=False, stderr_full=False, cwd=None):
        r, w = full_pipe()
        self.addCleanup(os.close, r)
        try:
            proc = subprocess.Popen([LASTCALL] + args, env=self.env, cwd=cwd,
                                    stdin=subprocess.DEVNULL,
                                    stdout=w if stdout_full else subprocess.DEVNULL,
                                    stderr=w if stderr_full else subprocess.DEVNULL)
        finally:
            os.close(w)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def assert_stops(self, proc):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("lastcall did not stop: blocked writing to a pipe nobody reads")
        self.assertNoLeftovers()

    def test_lastcall_up_whose_stdout_nobody_reads_stops_its_services_on_sigterm(self):
        self.write_file("Procfile",
                        "web: for i in $(seq 2000); do echo line $i of web; done; "
                        "echo started > \"$EVENTS\"; exec sleep 1000\n")
        proc = self.stalled(["up"], stdout_full=True, cwd=self.dir)
        self.assertEqual(self.fifo.readline(), "started")
        self.assert_stops(proc)

    def test_a_configs_services_and_jobs_whose_stdout_nobody_reads_neither_block_nor_hold_the_stop(self):
        # Their lines are prefixed on lastcall's stdout in every mode now (issue 41, item 3),
        # through the same writer that never blocks.
        cfg = self.write_file("lastcall.toml", """
[services.web]
command = 'for i in $(seq 2000); do echo line $i of web; done; echo started > "$EVENTS"; exec sleep 1000'

[jobs.tick]
schedule = "@every 1s"
command = ["sh", "-c", 'for i in $(seq 2000); do echo line $i of tick; done; echo ticked > "$EVENTS"']
""")
        proc = self.stalled(["--config", cfg, "--state-dir", os.path.join(self.dir, "state")],
                            stdout_full=True)
        seen = set()
        while seen != {"started", "ticked"}:  # a second tick may come before web's line
            seen.add(self.fifo.readline())
        self.assert_stops(proc)

    def test_tini_verbose_lines_to_a_full_pipe_do_not_hold_the_stop(self):
        proc = self.stalled(["--compat", "tini", "-vvv", "--", "sh", "-c",
                             'echo started > "$EVENTS"; exec sleep 1000'],
                            stdout_full=True, stderr_full=True)
        self.assertEqual(self.fifo.readline(), "started")
        self.assert_stops(proc)

    def test_dumb_init_verbose_lines_to_a_full_pipe_do_not_hold_the_stop(self):
        proc = self.stalled(["--compat", "dumb-init", "-v", "--", "sh", "-c",
                             'echo started > "$EVENTS"; exec sleep 1000'],
                            stderr_full=True)
        self.assertEqual(self.fifo.readline(), "started")
        self.assert_stops(proc)


class StatusNeverBlocks(LastcallTestCase):
    def test_status_skips_a_fifo_in_the_runtime_directory_instead_of_waiting_for_a_writer(self):
        runtime = os.path.join(self.dir, "runtime")
        os.makedirs(os.path.join(runtime, "lastcall"), 0o700)
        os.chmod(os.path.join(runtime, "lastcall"), 0o711)
        os.mkfifo(os.path.join(runtime, "lastcall", f"{os.getpid()}-0123456789abcdef.status"))
        env = dict(self.env, XDG_RUNTIME_DIR=runtime)
        try:
            r = subprocess.run([LASTCALL, "status"], env=env, capture_output=True, text=True,
                               timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("lastcall status waited on a FIFO for a writer")
        self.assertNotIn("Traceback", r.stderr)
