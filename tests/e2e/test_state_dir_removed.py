# SPDX-License-Identifier: Apache-2.0
"""Issue 42, item 6: a state directory removed while lastcall runs is detected and reported,
never silently written into deleted files: no run starts from the deleted ledger (a second
lastcall on a recreated directory would take a fresh lock and run the same fire times). The same
for a ledger database moved or replaced under the directory that stays (SQLite's
SQLITE_FCNTL_HAS_MOVED)."""
import os
import shutil
import signal

from lctest import LastcallTestCase
from test_services import LogReader


class StateDirRemoved(LastcallTestCase):
    def start_ticking(self, state):
        cfg = self.write_file("jobs.toml", """
[jobs.tick]
schedule = "@every 1s"
command = 'echo ran > "$EVENTS"'
""")
        log = LogReader(["--config", cfg, "--state-dir", state, "--", "sleep", "1000"], self.env)
        self.assertEqual(self.fifo.readline(), "ran")
        log.wait_for("job tick: run 1 completed")
        return log

    def assert_runs_stop_after(self, change, says):
        """change(state dir) while a job ticks: the log says `says`, and no run starts after."""
        state = self.dir + "/state"
        log = self.start_ticking(state)
        change(state)
        said = log.wait_for(says)
        log.proc.send_signal(signal.SIGTERM)
        log.finish(timeout=60)
        started = [line for line in log.lines[said:] if ") started, pid" in line]
        self.assertEqual(started, [], "a run started from the deleted ledger")
        self.assertNoLeftovers()

    def test_a_removed_state_dir_stops_runs_and_says_so_instead_of_recording_nowhere(self):
        self.assert_runs_stop_after(shutil.rmtree, "was removed while lastcall ran")

    def test_a_ledger_database_moved_aside_stops_runs_and_says_so(self):
        # The directory and its lock stay: only the database is gone from its path, so the
        # lock's link count cannot tell. Before, every later run was recorded in the moved file.
        self.assert_runs_stop_after(
            lambda state: os.rename(state + "/ledger.sqlite", state + "/moved.sqlite"),
            "was moved, removed or replaced while lastcall ran")

    def test_a_ledger_database_replaced_by_another_file_stops_runs_and_says_so(self):
        # A restore puts another file under the name: the open database is not the one at the
        # path any more, though both exist.
        def restore(state):
            shutil.copyfile(state + "/ledger.sqlite", state + "/restored.sqlite")
            os.rename(state + "/restored.sqlite", state + "/ledger.sqlite")

        self.assert_runs_stop_after(restore, "was moved, removed or replaced while lastcall ran")
