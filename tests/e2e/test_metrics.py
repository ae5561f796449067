# SPDX-License-Identifier: Apache-2.0
"""--metrics-file (issue 19.16): the Prometheus text format, read by a real parser
(python3-prometheus-client's text_string_to_metric_families), written atomically."""
import os
import re
import signal
import socket
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from lctest import LASTCALL, LastcallTestCase


def samples(path):
    with open(path) as f:
        text = f.read()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class MetricsFile(LastcallTestCase):
    def wait_for_file(self, path, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):  # written at start: bounded wait for the spawn
            self.assertLess(time.monotonic(), deadline, f"{path} never appeared")
            time.sleep(0.01)

    def test_services_jobs_and_the_ending_are_in_the_metrics(self):
        metrics = os.path.join(self.dir, "lastcall.prom")
        state = os.path.join(self.dir, "state")
        cfg = os.path.join(self.dir, "lastcall.toml")
        with open(cfg, "w") as f:
            f.write('[services.web]\ncommand = "sleep 1000"\n\n'
                    '[jobs.tick]\nschedule = "@every 1s"\n'
                    'command = "echo tick > $EVENTS"\n')
        run = self.start(["--config", cfg, "--state-dir", state, "--metrics-file", metrics])
        self.fifo.expect("tick")
        self.wait_for_file(metrics)
        self.assertEqual(samples(metrics)[("lastcall_running", ())], 1)
        # Rewritten while lastcall runs: the service's state reaches the file (bounded wait).
        ready = ("lastcall_service_state", (("service", "web"), ("state", "ready")))
        deadline = time.monotonic() + 30
        while samples(metrics).get(ready) != 1:
            self.assertLess(time.monotonic(), deadline, "the metrics never showed web ready")
            time.sleep(0.05)
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        end = samples(metrics)
        self.assertEqual(end[("lastcall_running", ())], 0)
        self.assertEqual(end[("lastcall_shutdown_verdict", (("verdict", "clean"),))], 1)
        self.assertEqual(end[("lastcall_shutdown_verdict", (("verdict", "forced"),))], 0)
        self.assertGreaterEqual(end[("lastcall_shutdown_duration_seconds", ())], 0)
        self.assertEqual(end[("lastcall_service_state", (("service", "web"), ("state", "stopped")))],
                         1)
        self.assertGreaterEqual(
            end[("lastcall_job_runs_total", (("job", "tick"), ("state", "completed")))], 1)
        self.assertGreater(end[("lastcall_job_last_success_timestamp_seconds", (("job", "tick"),))],
                           time.time() - 600)
        self.assertEqual(end[("lastcall_service_restarts_total", (("service", "web"),))], 0)
        self.assertEqual(sorted(os.listdir(self.dir)).count("lastcall.prom"), 1)
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith(".lastcall.prom")], [],
                         "a temporary file was left beside the metrics")
        self.assertNoLeftovers()

    def test_a_forced_shutdown_says_forced(self):
        metrics = os.path.join(self.dir, "m.prom")
        run = self.start(["--grace", "300ms", "--metrics-file", metrics, "--", "sh", "-c",
                          'trap "" TERM; echo up > "$EVENTS"; while :; do sleep 1; done'])
        self.fifo.expect("up")
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 128 + signal.SIGKILL, run.output())
        end = samples(metrics)
        self.assertEqual(end[("lastcall_shutdown_verdict", (("verdict", "forced"),))], 1)
        self.assertGreaterEqual(end[("lastcall_shutdown_processes", (("treatment", "killed"),))], 1)
        self.assertGreaterEqual(
            end[("lastcall_shutdown_processes", (("treatment", "signalled"),))], 1)

    def test_a_metrics_file_in_a_missing_directory_is_a_usage_error(self):
        r = subprocess.run([LASTCALL, "--metrics-file", "/nonexistent-lastcall/m.prom", "--", "true"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--metrics-file /nonexistent-lastcall/m.prom", r.stderr)


def scrape(port, path="/metrics"):
    """(status, content type, body) of GET http://127.0.0.1:PORT/PATH."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


class MetricsListen(LastcallTestCase):
    """--metrics-listen (issue 19.16, the HTTP half): the same text at /metrics, from
    libmicrohttpd on lastcall's loop, read by python3-prometheus-client's parser."""

    def port_of(self, run):
        """The port lastcall logged (-v) for --metrics-listen 127.0.0.1:0 (bounded wait)."""
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"metrics: serving /metrics on \S+ \(port (\d+)\)", run.output())
            if m:
                return int(m.group(1))
            self.assertLess(time.monotonic(), deadline, run.output())
            time.sleep(0.02)

    def test_metrics_are_served_over_http_while_lastcall_runs(self):
        cfg = os.path.join(self.dir, "lastcall.toml")
        with open(cfg, "w") as f:
            # The listening socket is lastcall's own: the service inherits no socket.
            f.write('[services.web]\ncommand = "echo up $(ls -l /proc/self/fd | grep -c socket:)'
                    ' > $EVENTS; exec sleep 1000"\n')
        run = self.start(["--config", cfg, "--metrics-listen", "127.0.0.1:0"])
        self.fifo.expect("up 0")
        port = self.port_of(run)
        status, ctype, body = scrape(port)
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(body) for s in fam.samples}
        self.assertEqual(got[("lastcall_running", ())], 1)
        self.assertIn(("lastcall_service_restarts_total", (("service", "web"),)), got)
        self.assertEqual(scrape(port, "/other")[0], 404)
        run.signal(signal.SIGTERM)
        self.assertEqual(run.wait(), 0, run.output())
        with self.assertRaises(OSError):  # the port closed with the run
            scrape(port)
        self.assertNoLeftovers()

    def test_a_bad_or_busy_address_is_a_start_up_error(self):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        try:
            port = busy.getsockname()[1]
            for addr, why in (("nonsense", "expected HOST:PORT, :PORT or [IPV6]:PORT"),
                              ("127.0.0.1:70000", "expected HOST:PORT"),
                              (f"127.0.0.1:{port}", "bind: Address already in use")):
                with self.subTest(addr=addr):
                    r = subprocess.run([LASTCALL, "--metrics-listen", addr, "--", "true"],
                                       capture_output=True, text=True, timeout=30)
                    self.assertEqual(r.returncode, 2)
                    self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
                    self.assertIn(f"--metrics-listen", r.stderr)
                    self.assertIn(why, r.stderr)
        finally:
            busy.close()


if __name__ == "__main__":
    unittest.main()
