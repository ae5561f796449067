# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 3: the stop of many services holds the grace because its cost grows with the
number of services, not with its square. What lastcall does for each service is counted from
the kernel's own accounting of its system calls (/proc/PID/io, read while lastcall is a zombie,
after its last call): a count per service that does not depend on the machine's speed, where a
time would (the sanitizers make everything 3-10x slower).

On 6930258 the /proc tracker listed each service's members by walking lastcall's whole tree, in
every pass of its stop and at every poll after it: 1,000 services took 51 s to stop with a 10 s
grace (bench/services_stop.py); at 150, about 1,080 reads per service. And each service's change of
state rewrote the status file (a row per service, fsynced): two writes per service that stopped,
most of a 41 s stop of 1,000 services with the cgroup tracker, and 923 more when a SIGTERM
during start-up refused the rest."""
import os
import select
import signal
import subprocess

from lctest import LASTCALL, LastcallTestCase, cgroup_usable

SERVICES = 150


class ManyServices(LastcallTestCase):
    def start_services(self, tracker, first_only=False):
        lines = []
        for i in range(SERVICES):
            # The first one says when start-up is under way; every one sleeps until stopped.
            say = 'echo first > \\"$EVENTS\\"; ' if i == 0 else ""
            lines.append(f'[services.s{i:03d}]\ncommand = "{say}exec sleep 1000"\n')
        cfg = self.write_file("lastcall.toml", "\n".join(lines))
        proc = subprocess.Popen(
            [LASTCALL, "--tracker", tracker, "--grace", "60s", "--config", cfg, "--state-dir",
             os.path.join(self.dir, "state")], env=self.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        log = b""
        if first_only:
            self.assertEqual(self.fifo.readline(), "first")
        else:
            while log.count(b": started pid ") < SERVICES:
                chunk = self.read_log(proc)
                self.assertTrue(chunk, "lastcall ended during start-up:\n" + log.decode())
                log += chunk
        return proc, log

    def read_log(self, proc):
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        self.assertTrue(ready, "no log line for 60 s")
        return os.read(proc.stderr.fileno(), 1 << 16)

    def io(self, pid):
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}

    def stop(self, proc):
        """SIGTERM, then lastcall's log, exit code and the read and write calls it made after
        the SIGTERM (counted once it has exited, before its reap)."""
        # Lines already in the pipe were written before: read them first, so that the lines
        # counted after are the writes counted after.
        while select.select([proc.stderr], [], [], 0)[0] and os.read(proc.stderr.fileno(), 1 << 16):
            pass
        before = self.io(proc.pid)
        proc.send_signal(signal.SIGTERM)
        log = b""
        while chunk := self.read_log(proc):
            log += chunk
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        after = self.io(proc.pid)
        code = proc.wait()
        return (log.decode(errors="replace"), code, after["syscr"] - before["syscr"],
                after["syscw"] - before["syscw"])

    def test_stopping_150_services_reads_proc_per_service_not_per_service_and_process_proc_tracker(
            self):
        proc, _ = self.start_services("proc")
        log, code, reads, _ = self.stop(proc)
        self.assertEqual(code, 0, log)
        # Every service had its SIGTERM, none needed the kill.
        self.assertEqual(log.count("sent SIGTERM to 1 process(es)"), SERVICES, log)
        self.assertNotIn("SIGKILL", log)
        # A handful of /proc reads per service and pass (its leader's stat and children, its
        # session among lastcall's children); on 6930258, about 1,080 each (a walk of all 150).
        self.assertLess(reads / SERVICES, 250, f"{reads} read calls for {SERVICES} services")
        self.assertNoLeftovers()

    def check_no_write_per_service_but_the_log(self, tracker, first_only):
        proc, _ = self.start_services(tracker, first_only)
        log, code, _, writes = self.stop(proc)
        self.assertEqual(code, 0, log)
        # One write per log line (stderr is a pipe); the status file once per turn of the loop,
        # not once for each service that changed state in it.
        lines = log.count("\n")
        others = writes - lines
        if tracker == "cgroup":
            others -= 2 * log.count("sent SIGTERM to")  # each stopped service's freeze and thaw
        self.assertLess(others, SERVICES // 3, f"{writes} write calls for {lines} log lines")
        self.assertNoLeftovers()

    def test_stopping_150_services_writes_the_status_file_per_turn_not_per_service_proc_tracker(
            self):
        self.check_no_write_per_service_but_the_log("proc", first_only=False)

    def test_a_sigterm_during_the_start_of_150_services_writes_the_status_file_per_turn(self):
        # Those not started yet are refused: each such refusal was a rewrite of the file. With
        # the cgroup tracker where there is one (the default tracker), else /proc.
        tracker = "cgroup" if cgroup_usable() else "proc"
        self.check_no_write_per_service_but_the_log(tracker, first_only=True)
