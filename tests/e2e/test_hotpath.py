# SPDX-License-Identifier: Apache-2.0
"""The init hot path (issue 18): what happens between a stop request and the main child."""
import os
import re
import select
import signal
import threading
import unittest

from lctest import LastcallTestCase, helper


def fill_pipe(fd):
    """Writes into the pipe (fd is non-blocking) until it is full: the next blocking write waits."""
    chunk = 65536
    while chunk:
        try:
            os.write(fd, b"x" * chunk)
        except BlockingIOError:
            chunk //= 2


class StopSignalFirst(LastcallTestCase):
    def check_before_any_log_line(self, args, expected_exit):
        # lastcall's stderr is a pipe this test fills up once the child runs: any log line that
        # lastcall writes from then on blocks until the test reads. The child can only get its
        # SIGTERM while lastcall is stuck in that write if the signal went out first.
        # A FIFO, so that lastcall's stderr (blocking) and the test's filler (non-blocking) are
        # two open files of one pipe: O_NONBLOCK on a shared one would make lastcall's write
        # fail instead of wait.
        fifo = os.path.join(self.dir, "stderr.fifo")
        os.mkfifo(fifo)
        r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        stderr = os.open(fifo, os.O_WRONLY)
        w = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        run = self.start(args + ["--", helper("termlog"), str(expected_exit)], stderr=stderr)
        os.close(stderr)
        try:
            self.fifo.expect("started")
            # What lastcall logs while starting, up to its last line before the signal (the
            # child may run before lastcall logs that it spawned it).
            started = b""
            while not re.search(rb"spawned pid \d+: .*\n", started):
                select.select([r], [], [], 10)
                try:
                    data = os.read(r, 65536)
                except BlockingIOError:
                    continue
                self.assertTrue(data, "lastcall closed its stderr")
                started += data
            fill_pipe(w)
            run.signal(signal.SIGTERM)
            self.assertEqual(self.fifo.readline(timeout=10).split()[0], "TERM",
                             "the child's SIGTERM waited for a log line")
        finally:
            os.close(w)
            os.set_blocking(r, True)
            log = []
            reader = threading.Thread(target=lambda: log.append(self._drain(r)))
            reader.start()
            code = run.wait()
            reader.join(30)
            os.close(r)
        text = log[0].lstrip("x") if log else ""  # the filler comes first
        self.assertEqual(code, expected_exit, text)
        self.assertIn("received SIGTERM: starting shutdown", text)
        # Sent once, and counted in the usual summary line.
        self.assertRegex(text, r"sent SIGTERM to 1 process\(es\)")
        self.assertNoLeftovers()

    @staticmethod
    def _drain(fd):
        out = b""
        while True:
            data = os.read(fd, 65536)
            if not data:
                return out.decode(errors="replace")
            out += data

    def test_the_stop_signal_reaches_the_main_child_before_lastcall_logs_anything(self):
        self.check_before_any_log_line([], 3)

    def test_with_kill_scope_child_the_stop_signal_also_goes_out_first_and_once(self):
        self.check_before_any_log_line(["--kill-scope", "child"], 4)


if __name__ == "__main__":
    unittest.main()
