# SPDX-License-Identifier: Apache-2.0
"""lastcall under systemd, with the test playing systemd.

systemd is a real AF_UNIX datagram socket bound by the test and named in NOTIFY_SOCKET; the test
reads what lastcall tells it (READY=1, STATUS=, STOPPING=1, EXTEND_TIMEOUT_USEC=, WATCHDOG=1) in
order. The binary comes from $LASTCALL, so the same tests cover the libsystemd build and the static
build that sends the datagrams itself.
"""
import json
import os
import select
import signal
import socket
import stat
import subprocess
import time
import unittest

import lctest


class FakeSystemd:
    """The service manager's notify socket: a bound datagram socket read with timeouts."""

    def __init__(self, directory, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "lastcall-test-" + os.path.basename(directory)
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = os.path.join(directory, "systemd-notify.sock")
            self.sock.bind(self.address)
        self.messages = []  # every datagram received, each a list of "KEY=VALUE" lines

    def next(self, timeout=20.0):
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            raise TimeoutError(f"nothing on the notify socket within {timeout}s; had {self.messages}")
        lines = self.sock.recv(65536).decode().split("\n")
        self.messages.append(lines)
        return lines

    def until(self, predicate, timeout=20.0):
        """Reads datagrams until one satisfies predicate; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.next(max(0.0, deadline - time.monotonic()))
            if predicate(lines):
                return lines

    def collect_until_exit(self, run, timeout=60.0):
        """Reads datagrams while lastcall runs (a manager that stops reading would block
        sd_notify), until its exit; returns its exit code."""
        pidfd = os.pidfd_open(run.proc.pid)
        try:
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"lastcall still running after {timeout}s")
                r, _, _ = select.select([self.sock, pidfd], [], [], left)
                if self.sock in r:
                    self.next(0)
                elif pidfd in r:
                    break
        finally:
            os.close(pidfd)
        code = run.wait()
        self.drain()
        return code

    def drain(self):
        """Everything already queued, without waiting."""
        while select.select([self.sock], [], [], 0)[0]:
            self.next(0)

    def close(self):
        self.sock.close()


def has(lines, assignment):
    return assignment in lines


def value(lines, key):
    for line in lines:
        if line.startswith(key + "="):
            return line[len(key) + 1:]
    return None


def index_of(messages, predicate):
    for i, m in enumerate(messages):
        if predicate(m):
            return i
    raise AssertionError(f"no such message in {messages}")


class SystemdNotifyTest(lctest.LastcallTestCase):
    def setUp(self):
        super().setUp()
        self.systemd = FakeSystemd(self.dir)
        self.env["NOTIFY_SOCKET"] = self.systemd.address
        self.go = os.path.join(self.dir, "go.fifo")
        os.mkfifo(self.go)
        # Held open read-write so the child's "read < $GO" blocks until the test writes.
        self.go_fd = os.open(self.go, os.O_RDWR | os.O_NONBLOCK)
        self.env["GO"] = self.go

    def tearDown(self):
        os.close(self.go_fd)
        self.systemd.close()
        super().tearDown()

    def release_child(self):
        os.write(self.go_fd, b"go\n")

    def test_ready_status_watchdog_then_stopping_and_no_watchdog_once_the_child_is_gone(self):
        # The main child exits on the test's word and leaves a TERM-ignoring grandchild behind, so
        # the drain lasts the whole 1s grace: pings during it would show.
        # The grandchild says when it ignores TERM: under load (CI runs a fork bomb test beside
        # this one) it was once still without its trap when the stop signal came, and died of it.
        script = ('(trap "" TERM; echo trapped > "$EVENTS"; exec sleep 60) &\n'
                  'echo "notify=${NOTIFY_SOCKET-unset} watchdog=${WATCHDOG_USEC-unset}" > "$EVENTS"\n'
                  'read go < "$GO"\n'
                  'exit 0\n')
        self.env["WATCHDOG_USEC"] = "200000"
        run = self.start(["--grace", "1s", "--", "sh", "-c", script])
        seen = {self.fifo.readline(), self.fifo.readline()}  # the two shells, in either order
        self.assertEqual(seen, {"trapped", "notify=unset watchdog=unset"},
                         "the child must not see systemd's socket or lastcall's watchdog")

        first = self.systemd.next()
        self.assertIn("READY=1", first)
        self.assertTrue(value(first, "STATUS").startswith("running"), first)
        for _ in range(3):
            self.systemd.until(lambda m: has(m, "WATCHDOG=1"))
        self.release_child()

        self.assertEqual(self.systemd.collect_until_exit(run), 0, run.output())
        msgs = self.systemd.messages
        stopping = index_of(msgs, lambda m: has(m, "STOPPING=1"))
        self.assertEqual(value(msgs[stopping], "STATUS").split(":")[0], "draining")
        extend = int(value(msgs[stopping], "EXTEND_TIMEOUT_USEC"))
        # The remaining 1s grace, the SIGKILL wait (5s) and 1s to finish.
        self.assertGreater(extend, 6_500_000)
        self.assertLessEqual(extend, 7_000_000)
        states = [value(m, "STATUS").split(":")[0] for m in msgs if value(m, "STATUS")]
        self.assertEqual(states, ["running", "draining", "stopping", "forcing", "stopped"])
        for m in msgs:
            if value(m, "STATUS") and value(m, "STATUS").startswith(("stopping", "forcing")):
                self.assertIsNotNone(value(m, "EXTEND_TIMEOUT_USEC"), m)
        after = [m for m in msgs[stopping:] if has(m, "WATCHDOG=1")]
        self.assertEqual(after, [], "WATCHDOG=1 after the main child was gone")
        self.assertNoLeftovers()

    def test_stopping_reaches_systemd_before_the_child_gets_its_signal(self):
        script = ('trap \'echo term > "$EVENTS"; exit 0\' TERM\n'
                  'echo up > "$EVENTS"\n'
                  'while :; do sleep 1; done\n')
        run = self.start(["--", "sh", "-c", script])
        self.fifo.expect("up")
        self.assertIn("READY=1", self.systemd.next())
        run.signal(signal.SIGTERM)
        self.fifo.expect("term")
        # Sent before the signal, so already queued now.
        self.systemd.drain()
        self.assertTrue(any(has(m, "STOPPING=1") for m in self.systemd.messages),
                        self.systemd.messages)
        self.assertEqual(run.wait(), 0, run.output())

    @lctest.needs_strace("to delay lastcall after its signal")
    def test_stopping_reaches_systemd_before_the_child_gets_its_signal_however_slow_lastcall_is(self):
        # Each signal lastcall sends returns 0.5 s late (strace's fault injection): the child's
        # TERM trap runs long before lastcall's next step. STOPPING=1 must already be queued:
        # sent before the signal, not just soon after it (a CI stall once showed the difference).
        script = ('trap \'echo term > "$EVENTS"; exit 0\' TERM\n'
                  'echo up > "$EVENTS"\n'
                  'while :; do sleep 1; done\n')
        run = self.start(["--", "sh", "-c", script],
                         prefix=["strace", "-o", "/dev/null", "-e", "trace=pidfd_send_signal,kill",
                                 "-e", "inject=pidfd_send_signal,kill:delay_exit=500000"])
        self.fifo.expect("up")
        self.assertIn("READY=1", self.systemd.next())
        # lastcall is strace's child (strace traces it alone: no -f); the stop goes to it.
        pids = lctest.children_of(run.proc.pid)
        self.assertEqual(len(pids), 1, pids)
        os.kill(pids[0], signal.SIGTERM)
        self.fifo.expect("term")
        self.systemd.drain()
        self.assertTrue(any(has(m, "STOPPING=1") for m in self.systemd.messages),
                        self.systemd.messages)
        self.assertEqual(run.wait(), 0, run.output())

    def test_watchdog_meant_for_another_pid_sends_no_pings(self):
        # The main child ignores TERM, so it stays alive through the whole 1s drain.
        script = 'trap "" TERM; echo up > "$EVENTS"; exec sleep 60'
        self.env["WATCHDOG_USEC"] = "200000"
        self.env["WATCHDOG_PID"] = "1"
        run = self.start(["--grace", "1s", "--", "sh", "-c", script])
        self.fifo.expect("up")
        self.assertIn("READY=1", self.systemd.next())
        run.signal(signal.SIGTERM)
        self.assertEqual(self.systemd.collect_until_exit(run), 128 + signal.SIGKILL, run.output())
        self.assertTrue(any(has(m, "STOPPING=1") for m in self.systemd.messages))
        self.assertFalse(any(has(m, "WATCHDOG=1") for m in self.systemd.messages),
                         self.systemd.messages)

    def test_abstract_notify_socket(self):
        abstract = FakeSystemd(self.dir, abstract=True)
        try:
            self.env["NOTIFY_SOCKET"] = abstract.address
            run = self.start(["--", "true"])
            self.assertEqual(run.wait(), 0, run.output())
            abstract.drain()
            self.assertIn("READY=1", abstract.messages[0])
            self.assertTrue(any(has(m, "STOPPING=1") for m in abstract.messages))
        finally:
            abstract.close()

    def test_ready_on_notify_waits_for_the_child_and_refuses_outsiders(self):
        self.env["RUNTIME_DIRECTORY"] = self.dir
        child_says = "READY=1\nSTATUS=child ready\nMAINPID=1\nWATCHDOG_USEC=1"
        script = ('echo "sock=$NOTIFY_SOCKET" > "$EVENTS"\n'
                  'read go < "$GO"\n'
                  f'exec "$NOTIFY_SEND" \'{child_says}\' sleep 60\n')
        self.env["NOTIFY_SEND"] = lctest.helper("notify_send")
        run = self.start(["--ready-on", "notify", "--", "sh", "-c", script])
        proxy = self.fifo.readline().split("=", 1)[1]
        self.assertNotEqual(proxy, self.systemd.address)
        self.assertTrue(proxy.startswith(self.dir + "/"), proxy)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(proxy)).st_mode), 0o700)

        first = self.systemd.next()
        self.assertNotIn("READY=1", first, "ready before the child said so")
        self.assertTrue(value(first, "STATUS").startswith("running"), first)

        # An outsider (the test itself) tries first; then the child speaks. Datagrams are read
        # in order, so by the time the child's arrives the outsider's has been judged.
        outsider = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        outsider.sendto(b"READY=1\nSTATUS=intruder", proxy)
        outsider.close()
        self.release_child()
        relayed = self.systemd.until(lambda m: has(m, "READY=1"))
        self.assertEqual(relayed, ["READY=1", "STATUS=child ready"],
                         "only the child's own message, without MAINPID or WATCHDOG_USEC")
        self.assertFalse(any(value(m, "STATUS") == "intruder" for m in self.systemd.messages))

        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGTERM, run.output())
        self.assertIn(f"refused a datagram from pid {os.getpid()}", run.output())
        self.assertFalse(os.path.exists(proxy), "the proxy socket outlived lastcall")

    def test_a_member_flooding_the_notify_socket_does_not_hold_back_the_shutdown(self):
        # Read until EAGAIN, each datagram checked against the whole tree: two senders beside a
        # thousand sleepers kept lastcall from its SIGTERM for more than 50 s.
        self.env["RUNTIME_DIRECTORY"] = self.dir
        app = os.path.join(self.dir, "flood.py")
        with open(app, "w") as f:
            f.write("import os, socket, time\n"
                    "for i in range(1000):\n"
                    "    if os.fork() == 0:\n"
                    "        time.sleep(1000)\n"
                    "        os._exit(0)\n"
                    "for i in range(2):\n"
                    "    if os.fork() == 0:\n"
                    "        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                    "        while True:\n"
                    "            try:\n"
                    "                s.sendto(b'X_FLOOD=1', os.environ['NOTIFY_SOCKET'])\n"
                    "            except OSError:\n"
                    "                pass\n"
                    "with open(os.environ['EVENTS'], 'w') as e:\n"
                    "    e.write('flooding\\n')\n"
                    "time.sleep(1000)\n")
        run = self.start(["--ready-on", "notify", "--grace", "10s", "--", "python3", app],
                         quiet=True)
        self.assertEqual(self.fifo.readline(timeout=60), "flooding")
        run.signal(signal.SIGTERM)
        try:
            code = run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            run.proc.kill()  # a lastcall that never got to its SIGTERM; tearDown kills the tree
            raise
        self.assertEqual(code, 128 + signal.SIGTERM, run.output())
        self.assertNoLeftovers()

    @lctest.needs_strace("to count lastcall's reads of its notify socket")
    def test_the_notify_socket_is_read_when_a_datagram_comes_not_at_every_reaped_process(self):
        # Read at every reap (before d619467), a flood cost a read and a walk of the tree per
        # reaped process. Counted in system calls, not in time: 50 orphans reaped by lastcall
        # beside one datagram must not cost 50 reads of the socket.
        self.env["RUNTIME_DIRECTORY"] = self.dir
        orphans = 50
        # The main command says READY=1 itself (a sender already gone is refused), then makes
        # the orphans, each reparented to lastcall and reaped there.
        script = f'i=0; while [ $i -lt {orphans} ]; do (true &); i=$((i+1)); done'
        trace = os.path.join(self.dir, "strace")
        report = os.path.join(self.dir, "report.json")
        # Without -f: lastcall's own calls only (its loop is its main thread), not its units'.
        run = self.start(["--ready-on", "notify", "--report", report, "--",
                          lctest.helper("notify_send"), "READY=1", "sh", "-c", script],
                         prefix=("strace", "-qq", "-e", "trace=recvmsg", "-o", trace))
        self.assertEqual(self.systemd.collect_until_exit(run), 0, run.output())
        self.assertTrue(any(has(m, "READY=1") for m in self.systemd.messages), run.output())
        with open(report) as f:
            reaped = json.load(f)["reaped_total"]
        self.assertGreaterEqual(reaped, orphans, "lastcall did not reap the orphans")
        with open(trace) as f:
            reads = sum(1 for line in f if line.startswith("recvmsg("))
        # One datagram: its wake-up reads it and finds the socket empty, the main command's exit
        # reads it once more; never one read per reaped process.
        self.assertLess(reads, orphans // 5, f"{reads} reads of the notify socket for {reaped} reaps")

    def test_ready_from_a_child_that_exits_at_once_is_relayed_before_stopping(self):
        self.env["RUNTIME_DIRECTORY"] = self.dir
        run = self.start(["--ready-on", "notify", "--", lctest.helper("notify_send"), "READY=1"])
        self.assertEqual(run.wait(), 0, run.output())
        self.systemd.drain()
        msgs = self.systemd.messages
        ready = index_of(msgs, lambda m: has(m, "READY=1"))
        self.assertLess(ready, index_of(msgs, lambda m: has(m, "STOPPING=1")), msgs)
        self.assertNotIn("refused", run.output())

    def test_without_notify_socket_the_child_gets_none(self):
        del self.env["NOTIFY_SOCKET"]
        run = self.start(["--ready-on", "notify", "--", "sh", "-c",
                          'echo "notify=${NOTIFY_SOCKET-unset}" > "$EVENTS"'])
        self.assertEqual(self.fifo.readline(), "notify=unset")
        self.assertEqual(run.wait(), 0, run.output())
        self.systemd.drain()
        self.assertEqual(self.systemd.messages, [])

    def test_a_notify_socket_lastcall_cannot_use_is_a_warning_and_the_command_runs(self):
        # An empty value, or systemd 253's vsock: address: sd_notify() fails and its caller goes
        # on; lastcall refused to start the command at all (exit 1).
        for value in ("", "vsock:2:1234"):
            with self.subTest(value=value):
                env = dict(self.env, NOTIFY_SOCKET=value)
                run = self.start(["--", "sh", "-c", 'echo "ran notify=${NOTIFY_SOCKET-unset}" > "$EVENTS"'],
                                 env=env, quiet=True)
                self.assertEqual(self.fifo.readline(), "ran notify=unset")
                self.assertEqual(run.wait(), 0, run.output())
                self.assertIn("no notifications will be sent", run.output())


class ExampleUnitTest(lctest.LastcallTestCase):
    """systemd/lastcall-example.service against what lastcall really exits with."""

    def success_exit_statuses(self):
        unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "systemd",
                            "lastcall-example.service")
        codes = set()
        with open(unit) as f:
            for line in f:
                if line.startswith("SuccessExitStatus="):
                    codes.update(int(w) for w in line.split("=", 1)[1].split() if w.isdigit())
        return codes

    def test_a_stop_whose_child_dies_of_the_stop_signal_counts_as_success_in_the_example_unit(self):
        # systemd sends SIGTERM (or SIGINT with KillSignal=SIGINT); a child that dies of it makes
        # lastcall exit 128+N, which systemd calls a failure unless the unit lists it.
        codes = self.success_exit_statuses()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                run = self.start(["--", "sh", "-c", 'echo up > "$EVENTS"; exec sleep 60'])
                self.fifo.expect("up")
                run.signal(sig)
                code = run.wait()
                self.assertEqual(code, 128 + sig, run.output())
                self.assertIn(code, codes, "SuccessExitStatus= of the example unit")
                self.assertNoLeftovers()


CHILD_REPORT = r"""
import json, os, socket, stat
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.readlink("/proc/self/fd/" + name)  # the listing's own fd is closed by now
        fds.append(int(name))
    except OSError:
        pass
st = os.fstat(3)
s = socket.socket(fileno=os.dup(3))
report = {"listen_pid": os.environ.get("LISTEN_PID"), "pid": os.getpid(),
          "listen_fds": os.environ.get("LISTEN_FDS"), "ino": st.st_ino,
          "is_socket": stat.S_ISSOCK(st.st_mode),
          "listening": s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN),
          "fds": sorted(fds)}
with open(os.environ["EVENTS"], "w") as f:
    f.write(json.dumps(report) + "\n")
"""


class SocketActivationTest(lctest.LastcallTestCase):
    def test_listen_fds_go_to_the_child_with_its_own_pid(self):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.path.join(self.dir, "activated.sock"))
        listener.listen()
        fd = listener.fileno()
        # $$ of the shell is lastcall's pid after the exec; the socket is moved to fd 3.
        wrapper = f'LISTEN_PID=$$ LISTEN_FDS=1 exec "$@" 3<&{fd} {fd}<&-'
        log_path = os.path.join(self.dir, "lastcall.log")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                ["sh", "-c", wrapper, "sh", lctest.LASTCALL, "--", "/usr/bin/python3", "-c",
                 CHILD_REPORT],
                env=self.env, pass_fds=[fd], stdout=log, stderr=log)
            report = json.loads(self.fifo.readline())
            code = proc.wait(timeout=60)
        with open(log_path) as f:
            output = f.read()
        self.assertEqual(code, 0, output)
        self.assertEqual(report["listen_pid"], str(report["pid"]))
        self.assertEqual(report["listen_fds"], "1")
        self.assertTrue(report["is_socket"])
        self.assertEqual(report["ino"], os.fstat(fd).st_ino)
        self.assertEqual(report["listening"], 1)
        self.assertEqual(report["fds"], [0, 1, 2, 3], "lastcall leaked descriptors to the child")
        listener.close()

    def test_listen_fds_for_another_pid_are_not_passed(self):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = listener.fileno()
        wrapper = f'LISTEN_PID=1 LISTEN_FDS=1 exec "$@" 3<&{fd} {fd}<&-'
        with open(os.path.join(self.dir, "lastcall.log"), "wb") as log:
            proc = subprocess.Popen(
                ["sh", "-c", wrapper, "sh", lctest.LASTCALL, "--", "sh", "-c",
                 'if [ -e /proc/$$/fd/3 ]; then s=open; else s=closed; fi; '
                 'echo "$LISTEN_PID $s" > "$EVENTS"'],
                env=self.env, pass_fds=[fd], stdout=log, stderr=log)
            line = self.fifo.readline()
            self.assertEqual(proc.wait(timeout=60), 0)
        self.assertEqual(line, "1 closed", "fd 3 reached a child it was not meant for")
        listener.close()


if __name__ == "__main__":
    unittest.main()
