# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 3: a stop is bounded while work starts. Services are started in bounded slices
of the loop, so a SIGTERM during the start-up of many services is acted on at once: nothing not
yet started is started after it (each such start is counted refused), and nothing is left
behind."""
import json
import os
import signal

from lctest import LastcallTestCase
from test_services import LogReader

SERVICES = 500


class StartUpInterrupted(LastcallTestCase):
    def test_sigterm_during_the_start_of_500_services_starts_none_after_it(self):
        lines = []
        for i in range(SERVICES):
            # The first one says when start-up is under way; the rest only run.
            command = 'echo first > \\"$EVENTS\\"; exec sleep 1000' if i == 0 else "exec sleep 1000"
            lines.append(f'[services.s{i:03d}]\ncommand = "{command}"\n')
        cfg = self.write_file("lastcall.toml", "\n".join(lines))
        report = os.path.join(self.dir, "report.json")
        log = LogReader(["--config", cfg, "--report", report], self.env)
        self.assertEqual(self.fifo.readline(), "first")
        log.proc.send_signal(signal.SIGTERM)
        log.finish(timeout=120)
        drain = log.wait_for("in reverse dependency order")  # the stop began
        late = [line for line in log.lines[drain:] if ": started pid " in line]
        self.assertEqual(late, [], "services started after the shutdown began")
        with open(report) as f:
            starts = json.load(f)["admission"]["service_starts"]
        # Slices: the signal came between two of them, and the rest were refused, not started.
        self.assertGreater(starts["refused"], 0, starts)
        self.assertEqual(starts["registered"] + starts["refused"], SERVICES, starts)
        self.assertNoLeftovers()
