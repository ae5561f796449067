# SPDX-License-Identifier: Apache-2.0
"""A disk that does a given number of writes a second, for a ledger that is slow for real
(bench/never_waits.py, tests/e2e/test_records_at_exit.py): ext4 on a loop device, its writes
throttled by the cgroup v1 blkio controller. Needs root, losetup, mkfs.ext4 and blkio's
throttling; raises RuntimeError (or a subprocess error) where it cannot be made."""
import os
import subprocess
import tempfile
import time


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


class SlowDisk:
    """An ext4 file system on a loop device, mounted under `base`; writes to it from the
    processes in a blkio (cgroup v1) group are throttled to `iops` per second. The throttle
    sits in the block layer, below the file system: an fdatasync waits for its turn like on a
    disk that does `iops` writes a second."""

    def __init__(self, base, iops, size_mib=512):
        self.iops = iops
        self.size_mib = size_mib
        self.img = os.path.join(base, "slowdisk.img")
        self.mnt = os.path.join(base, "slowdisk")
        self.loop = None
        self.mounted = False
        self.cgroup = None
        try:
            blkio = "/sys/fs/cgroup/blkio"
            if not os.path.exists(os.path.join(blkio, "blkio.throttle.write_iops_device")):
                raise RuntimeError("no cgroup v1 blkio controller with throttling at " + blkio)
            with open(self.img, "wb") as f:
                f.truncate(size_mib << 20)
            self.loop = sh(["losetup", "-f", "--show", self.img]).strip()
            sh(["mkfs.ext4", "-q", "-F", self.loop])
            os.mkdir(self.mnt)
            sh(["mount", self.loop, self.mnt])
            self.mounted = True
            with open(f"/sys/block/{os.path.basename(self.loop)}/dev") as f:
                self.dev = f.read().strip()
            self.cgroup = os.path.join(blkio, f"lastcall-slowdisk-{os.getpid()}")
            os.mkdir(self.cgroup)
            self.throttle(iops)
        except Exception:
            self.close()
            raise

    def throttle(self, iops):
        """Writes per second from now on (the group's processes keep their membership)."""
        self.iops = iops
        with open(os.path.join(self.cgroup, "blkio.throttle.write_iops_device"), "w") as f:
            f.write(f"{self.dev} {iops}")

    def enter(self):
        """For preexec_fn: the calling (child) process joins the throttled group."""
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def describe(self):
        return (f"ext4 on {self.loop} (a {self.size_mib} MiB file in {tempfile.gettempdir()}), writes "
                f"throttled to {self.iops} IOPS by blkio.throttle.write_iops_device "
                f"{self.dev} (cgroup v1) for lastcall and its children")

    def close(self):
        if self.cgroup and os.path.isdir(self.cgroup):
            for _ in range(50):
                try:
                    os.rmdir(self.cgroup)
                    break
                except OSError:
                    time.sleep(0.1)
        if self.mounted:
            # A file still open on it (a reader's connection being closed) makes umount fail
            # for a moment; a mount left behind would hold its loop device for good.
            for _ in range(50):
                r = subprocess.run(["umount", self.mnt], capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError(f"umount {self.mnt}: {r.stderr.strip()}")
            self.mounted = False
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None
        for p in (self.img,):
            if os.path.exists(p):
                os.unlink(p)
