# SPDX-License-Identifier: Apache-2.0
"""The test suite itself: a run leaves nothing behind in the temporary directory."""
import os
import subprocess
import sys
import tempfile
import unittest

import lctest


class SuiteHygiene(unittest.TestCase):
    def test_an_e2e_run_leaves_no_directories_in_tmp(self):
        # A real e2e test class (it runs lastcall, FIFOs, per-test and per-run directories) in a
        # child interpreter whose TMPDIR is an empty directory that must stay empty.
        tmp = tempfile.mkdtemp(prefix="lctest-hygiene-")
        env = dict(os.environ, TMPDIR=tmp)
        out = subprocess.run([sys.executable, "-m", "unittest", "test_core.Forwarding",
                              "test_core.ExitCodes"], cwd=os.path.dirname(os.path.abspath(__file__)),
                             env=env, capture_output=True, text=True, timeout=240)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        self.assertEqual(os.listdir(tmp), [], "left behind by the test run")


if __name__ == "__main__":
    unittest.main()
