# SPDX-License-Identifier: Apache-2.0
"""A real PostgreSQL for the cluster tests: initdb and pg_ctl in a temporary directory, a Unix
socket only (listen_addresses = ''), as nobody when the tests run as root (PostgreSQL refuses
root). Queries go through psql, whose JSON output is parsed here: no Python driver needed."""
import glob
import json
import os
import pwd
import shutil
import subprocess
import tempfile


def find_bindir():
    env = os.environ.get("LASTCALL_PG_BINDIR")
    if env:
        return env
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


class PgServer:
    def __init__(self, fsync=False):
        self.fsync = fsync
        self.bindir = find_bindir()
        if not self.bindir:
            raise FileNotFoundError(
                "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb; "
                "apt-get install postgresql-15, or set LASTCALL_PG_BINDIR)")
        self.dir = tempfile.mkdtemp(prefix="lctest-pg-")
        self.sock = os.path.join(self.dir, "sock")
        self.data = os.path.join(self.dir, "data")
        os.mkdir(self.sock)
        self.uid = self.gid = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            self.uid, self.gid = pw.pw_uid, pw.pw_gid
            for path in (self.dir, self.sock):
                os.chown(path, self.uid, self.gid)
        os.chmod(self.dir, 0o755)
        self.databases = 0
        self._run([self.bindir + "/initdb", "-D", self.data, "-U", "lastcall", "-A", "trust",
                   "--no-sync", "-E", "UTF8"])
        self.start()

    def _demote(self):
        if self.uid is not None:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)

    def _run(self, argv, check=True, **kw):
        return subprocess.run(argv, preexec_fn=self._demote, check=check, capture_output=True,
                              text=True, timeout=120, **kw)

    def start(self):
        # fsync off (-F) unless asked for: the tests check lastcall's rules, not the disk's
        # durability; bench/ledger.py measures with fsync on.
        self._run([self.bindir + "/pg_ctl", "-D", self.data, "-l",
                   os.path.join(self.dir, "server.log"), "-w", "-t", "60", "-o",
                   f"-k {self.sock} -c listen_addresses=''" + ("" if self.fsync else " -F"),
                   "start"])

    def stop(self):
        """A fast stop: every connection is closed, as when the database goes away."""
        self._run([self.bindir + "/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"])

    def close(self):
        self._run([self.bindir + "/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"],
                  check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def new_database(self):
        self.databases += 1
        name = f"t{self.databases}"
        self._run([self.bindir + "/createdb", "-h", self.sock, "-U", "lastcall", name])
        return name

    def url(self, db, password=None):
        user = "lastcall" + (f":{password}" if password else "")
        return f"postgresql://{user}@/{db}?host={self.sock}"

    def psql(self, db, sql, check=True):
        return self._run([self.bindir + "/psql", "-q", "-X", "-At", "-v", "ON_ERROR_STOP=1",
                          "-h", self.sock, "-U", "lastcall", "-d", db, "-c", sql], check=check)

    def rows(self, db, where="true"):
        """The ledger's runs as dicts, in id order."""
        out = self.psql(db, "SELECT coalesce(json_agg(r ORDER BY r.id), '[]') FROM "
                            f"(SELECT * FROM lastcall.runs WHERE {where}) r").stdout
        return json.loads(out)
