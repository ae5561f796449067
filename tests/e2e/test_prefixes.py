# SPDX-License-Identifier: Apache-2.0
"""Issue 41, item 3: every service's and job's output carries its name in every mode, in one
prefix format (`name | line`, the name padded to the longest, coloured on a terminal only), as
foreman prefixes and supercronic tags each line; the main command's own output is untouched.

Synchronisation: lines read from lastcall's stdout as they come, the FIFO, lastcall's exit."""
import os
import pty
import select
import signal
import subprocess
import time
import unittest

from lctest import LASTCALL, LastcallTestCase


def read_lines(stream, count, timeout=20.0):
    """The next `count` lines of a pipe, read from its descriptor as they come (a buffered
    readline would hold lines that select() then does not see)."""
    data = b""
    deadline = time.monotonic() + timeout
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise TimeoutError(f"{count} lines did not come: {data!r}")
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            raise AssertionError(f"stdout closed after {data!r}")
        data += chunk
    return [line + "\n" for line in data.decode().split("\n")[:count]]


class ServicePrefixes(LastcallTestCase):
    CONFIG = """
[services.db]
command = "echo started; exec sleep 1000"

[services.worker]
command = "echo started; echo to stderr >&2; exec sleep 1000"
"""

    def test_two_services_that_print_the_same_line_are_told_apart_and_the_main_command_is_untouched(
            self):
        cfg = self.write_file("lastcall.toml", self.CONFIG)
        proc = subprocess.Popen([LASTCALL, "--config", cfg, "--", "sh", "-c",
                                 "echo main says hi; exec sleep 1000"],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            lines = read_lines(proc.stdout, 4)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        self.assertCountEqual(lines, ["db     | started\n", "worker | started\n",
                                      "worker | to stderr\n", "main says hi\n"])
        self.assertNoLeftovers()


class JobPrefixes(LastcallTestCase):
    def test_a_crontab_lines_output_is_tagged_with_its_job_name(self):
        crontab = self.write_file("crontab", "# name: ticker\n"
                                             '@every 1s echo tick; echo "$LASTCALL_RUN_ID" > '
                                             '"$EVENTS"\n')
        proc = subprocess.Popen([LASTCALL, "--crontab", crontab, "--state-dir",
                                 os.path.join(self.dir, "state")],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            self.fifo.readline()  # the first run has printed its line
            lines = read_lines(proc.stdout, 1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        self.assertEqual(lines, ["ticker | tick\n"])


class Colour(LastcallTestCase):
    def test_a_services_prefix_is_coloured_on_a_terminal(self):
        cfg = self.write_file("lastcall.toml", '[services.web]\ncommand = "echo hello"\n')
        pid, master = pty.fork()
        if pid == 0:
            try:
                os.execve(LASTCALL, [LASTCALL, "--config", cfg], self.env)
            finally:
                os._exit(127)
        out = b""
        try:
            deadline = time.monotonic() + 30
            while b"hello" not in out and time.monotonic() < deadline:
                if select.select([master], [], [], 1)[0]:
                    try:
                        out += os.read(master, 65536)
                    except OSError:
                        break
        finally:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
            os.close(master)
        text = out.decode(errors="replace")
        self.assertIn("\x1b[36mweb |\x1b[0m hello", text)


if __name__ == "__main__":
    unittest.main()
