# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 6: a state directory removed while lastcall runs is detected and reported,
never silently written into deleted files: no run starts from the deleted ledger (a second
lastcall on a recreated directory would take a fresh lock and run the same fire times)."""
import shutil
import signal

from lctest import LastcallTestCase
from test_services import LogReader


class StateDirRemoved(LastcallTestCase):
    def test_a_removed_state_dir_stops_runs_and_says_so_instead_of_recording_nowhere(self):
        state = self.dir + "/state"
        cfg = self.write_file("jobs.toml", """
[jobs.tick]
schedule = "@every 1s"
command = 'echo ran > "$EVENTS"'
""")
        log = LogReader(["--config", cfg, "--state-dir", state, "--", "sleep", "1000"], self.env)
        self.assertEqual(self.fifo.readline(), "ran")
        log.wait_for("job tick: run 1 completed")
        shutil.rmtree(state)
        removed = log.wait_for("was removed while lastcall ran")
        log.proc.send_signal(signal.SIGTERM)
        log.finish(timeout=60)
        started = [line for line in log.lines[removed:] if ") started, pid" in line]
        self.assertEqual(started, [], "a run started from the deleted ledger")
        self.assertNoLeftovers()
