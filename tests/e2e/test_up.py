# SPDX-License-Identifier: Apache-2.0
"""Issue 7: `lastcall up`, the Procfile dev runner: prefixed output, .env, --only/--except,
Procfile errors, and one Ctrl-C on a real terminal stopping every process tree."""
import os
import pty
import select
import re
import signal
import subprocess
import time
import unittest

from lctest import LASTCALL, LastcallTestCase, helper, marked_pids


def read_until_exit(pid, master, timeout):
    """Drains the pty master until the child exits; returns (wait status, output)."""
    out = b""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"lastcall up did not exit within {timeout}s: {out!r}")
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                out += os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                pass
    while select.select([master], [], [], 0)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return status, out.decode(errors="replace")


def read_until(master, text, timeout):
    """Reads the pty master until `text` has come; returns what was read. A ^C makes the line
    discipline discard output the master has not read yet (no NOFLSH): what must be seen is read
    before it is typed."""
    out = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{text!r} did not come on the terminal: {out!r}")
        if select.select([master], [], [], left)[0]:
            out += os.read(master, 65536)
    return out.decode(errors="replace")


class Up(LastcallTestCase):
    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def up(self, *args, env=None):
        return subprocess.run([LASTCALL, "up"] + list(args), cwd=self.dir, env=env or self.env,
                              capture_output=True, text=True, timeout=60)

    def test_one_ctrl_c_on_the_terminal_stops_every_tree_of_an_npm_like_run(self):
        # web: lastcall's sh -c -> sh -c -> npm_like (server) -> setsid helper; worker beside it.
        self.write("Procfile",
                   f'web: sh -c "{helper("npm_like")}; echo unreachable"; true\n'
                   'worker: sh -c \'echo worker $$ > "$EVENTS"; sleep 1000; true\'\n')
        pid, master = pty.fork()
        if pid == 0:  # the child: session leader with the pty as its controlling terminal
            try:
                os.chdir(self.dir)
                os.execve(LASTCALL, [LASTCALL, "up", "--grace", "5s"], self.env)
            finally:
                os._exit(127)
        try:
            seen = {self.fifo.readline().split()[0] for _ in range(3)}
            self.assertEqual(seen, {"server", "helper", "worker"})
            self.assertGreaterEqual(len(marked_pids(self.marker)), 5)
            before = read_until(master, "listening on http://localhost:3000", 30)
            os.write(master, b"\x03")  # one ^C, delivered by the line discipline as SIGINT
            status, out = read_until_exit(pid, master, 30)
            out = before + out
        finally:
            os.close(master)
        self.assertTrue(os.WIFEXITED(status), out)
        self.assertNoLeftovers()
        self.assertIn("listening on http://localhost:3000", out)
        # On a terminal the prefixes are coloured.
        self.assertIn("\x1b[", out)
        self.assertNotIn("SIGKILL", out, "the helper needed no SIGKILL: SIGTERM reached it")

    def test_no_color_on_a_terminal_gives_plain_prefixes(self):
        self.write("Procfile", "web: echo hello from web\n")
        pid, master = pty.fork()
        if pid == 0:
            try:
                os.chdir(self.dir)
                os.execve(LASTCALL, [LASTCALL, "up"], dict(self.env, NO_COLOR="1"))
            finally:
                os._exit(127)
        try:
            status, out = read_until_exit(pid, master, 30)
        finally:
            os.close(master)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, out)
        self.assertIn("web      | hello from web", out)  # as wide as lastcall's own column
        self.assertNotIn("\x1b[", out)

    def test_output_is_prefixed_aligned_and_uncoloured_on_a_pipe_with_dotenv_applied(self):
        self.write("Procfile", "# services\n"
                               "web: echo \"web says $GREETING\"; cat gate >/dev/null\n"
                               "background_worker: printf 'one\\ntwo\\n'; cat gate >/dev/null\n")
        self.write(".env", "GREETING='hello there'\n")
        os.mkfifo(os.path.join(self.dir, "gate"))
        proc = subprocess.Popen([LASTCALL, "up"], cwd=self.dir, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # lastcall says each start in the process's column too (`web | started pid N`): the
        # processes' own lines are the rest.
        lines = []
        while len(lines) < 3:
            line = proc.stdout.readline()
            self.assertTrue(line, "lastcall up ended early")
            if "| started pid" not in line:
                lines.append(line)
        # Both services block on the gate until here: every line they write is already printed.
        # (cat, not read: both readers see EOF and exit 0 whichever of them gets the data.)
        with open(os.path.join(self.dir, "gate"), "w") as g:
            g.write("go\n")
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err)
        self.assertCountEqual(lines, ["web               | web says hello there\n",
                                      "background_worker | one\n",
                                      "background_worker | two\n"])
        self.assertNotIn("\x1b[", "".join(lines) + out)

    def test_only_and_except_select_processes(self):
        self.write("Procfile", "a: echo ran a\nb: echo ran b\nc: echo ran c\n")
        # Every selected process starts before any exit is handled; which one prints before the
        # first exit stops the others is a race, so the start lines in the columns are the
        # evidence.
        started = lambda r: set(re.findall(r"^(\w) +\| started pid", r.stdout, re.M))
        r = self.up("--only", "a,c")
        self.assertEqual(started(r), {"a", "c"}, r.stdout)
        r = self.up("--except", "a")
        self.assertEqual(started(r), {"b", "c"}, r.stdout)
        r = self.up("--only", "nope")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--only: no process 'nope' in Procfile", r.stderr)

    def test_a_plain_procfile_command_is_the_process_itself_not_a_shell_around_it(self):
        # foreman and honcho exec a plain line: the pid lastcall logs and signals is the app's.
        self.write("Procfile", "web: sleep 1000\nboth: echo one; sleep 1000\n")
        proc = subprocess.Popen([LASTCALL, "up", "-v"], cwd=self.dir, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = {}
        while len(started) < 2:
            line = proc.stderr.readline()
            self.assertTrue(line, "lastcall up ended early")
            m = re.search(r"service (\w+): started pid (\d+)", line)
            if m:
                started[m.group(1)] = int(m.group(2))
        # lastcall logs the pid once the spawn returns, when its shell (`sh -c 'exec sleep
        # 1000'`) has not necessarily reached its own exec yet: web's comm is read once that
        # exec happened (or a deadline passed), a compound line's shell never execs.
        def comm_of(pid):
            with open(f"/proc/{pid}/comm") as f:
                return f.read().strip()
        deadline = time.monotonic() + 20
        while comm_of(started["web"]) == "sh" and time.monotonic() < deadline:
            time.sleep(0.005)
        comm = {name: comm_of(pid) for name, pid in started.items()}
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        self.assertEqual(comm["web"], "sleep")
        self.assertEqual(comm["both"], "sh")  # a compound line keeps its shell
        self.assertNoLeftovers()

    def test_the_first_process_to_exit_stops_the_others_with_its_code(self):
        self.write("Procfile", "quick: exit 4\nslow: sleep 1000\n")
        r = self.up()
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertNoLeftovers()

    def test_a_bad_procfile_line_is_an_error_naming_the_line(self):
        self.write("Procfile", "web: echo ok\n\nthis is not a process line\n")
        r = self.up()
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         "lastcall up: Procfile:3: expected 'name: command', found no ':'")
        self.assertEqual(r.stdout, "")

    def test_a_bad_env_line_is_an_error_naming_the_line(self):
        self.write("Procfile", "web: echo ok\n")
        self.write(".env", "A=1\nB\n")
        r = self.up()
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(), "lastcall up: .env:2: expected KEY=value")

    def test_a_report_into_a_missing_directory_is_an_error_before_anything_starts(self):
        self.write("Procfile", "web: echo started > $EVENTS; exec sleep 100\n")
        r = self.up("--report", "/nonexistent-lastcall/report.json")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(),
                         "lastcall up: --report /nonexistent-lastcall/report.json: directory "
                         "/nonexistent-lastcall: No such file or directory")
        with self.assertRaises(TimeoutError):
            self.fifo.readline(timeout=0.2)  # web never started

    def test_ledger_options_that_up_cannot_use_are_refused(self):
        # A Procfile has no scheduled jobs: --ledger and --replica-id were listed, accepted and
        # ignored.
        self.write("Procfile", "web: echo started > $EVENTS; exec sleep 100\n")
        for option in (["--ledger", "notaurl"], ["--replica-id", "r1"]):
            r = self.up(*option)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(option[0], r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
