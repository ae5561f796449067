#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The init never waits (issue 38): signal delay to the main command while a burst of jobs is
claimed in the run ledger, and the ledger's claim throughput.

Usage: bench/never_waits.py --binary PATH --label TEXT [--jobs 1000]
                            [--cases pg-0ms,pg-50ms,pg-50ms:200,sqlite-slow] [--replicas 3]
                            [--interval-ms 50] [--lead 10] [--after 20] [--cap 120]
                            [--disk-iops 20] [--grace 8s] [--out FILE] [--note TEXT]
A case may carry its own job count: --cases pg-0ms:1000,pg-50ms:200. Cases: pg-0ms (PostgreSQL
on its Unix socket), pg-50ms (the same server behind a TCP proxy of this script that holds every
chunk 25 ms in each direction), sqlite (one replica, state dir in the temp dir), sqlite-slow (one
replica, state dir on an ext4 loop device whose writes are throttled by the blkio cgroup to
--disk-iops; if that cannot be built here, the case says so and runs on the temp dir).
Appends one section (--label) to <out> (default bench/results/<date>-never-waits.md), so that
"before" and "after" sit in one file. Needs root (loop device, cgroup), cc, PostgreSQL 15.

Per case: a fresh database, a config of N jobs (`command = ["/bin/true"]`) whose 6-field
schedule names one second B, `--lead` s after the replicas are started, and `--replicas`
lastcalls (1 for SQLite) whose main command is bench/src/sigstamp.c: its SIGUSR1 handler takes
CLOCK_MONOTONIC and writes it to a FIFO. Every --interval-ms this script sends SIGUSR1 to each
lastcall, taking CLOCK_MONOTONIC just before kill(). A signal sent while the previous one to the
same lastcall has not reached the main command yet would merge with it in the kernel (a pending
standard signal is one bit), so it is not sent: it is counted as delivered when the pending one
is (the same moment it would have been). Every tick is therefore one sample of "a signal sent at
this moment reached the main command after ...", uniform in time: a 10 s stall gives 200
samples from 10 s down, not one. Ticks go on from the replicas' start until B + --after s and
then until the burst is settled (every fire time claimed, or the rows stop growing and no signal
is pending for more than 1 s), at most B + --cap s. Then SIGTERM to every lastcall: when it
reached the main command, when lastcall exited (SIGKILL at grace + 5 s).

The ledger afterwards: the rows of fire time B (`lastcall.runs`, or the state dir's
ledger.sqlite). created_ms is the claim's commit (PostgreSQL: the database's clock_timestamp(),
the same clock as this machine's), so: first and last claim after B, the share claimed within
1 s of B, claim throughput = rows / (last created_ms - first created_ms), and the fire times
that no replica claimed (N - rows).
"""
import argparse
import asyncio
import datetime
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import pgserver  # noqa: E402
from slowdisk import SlowDisk  # noqa: E402
from run import machine_basics, pct  # noqa: E402  (bench/run.py: the same machine lines)

MARK_VAR = "NEVER_WAITS_BENCH"  # in every process this script starts: leftovers are found by it
RECORD = struct.Struct("=iiqq")  # sigstamp's record: index, signo, CLOCK_MONOTONIC ns, pid


def log(*a):
    print("[bench-never-waits]", *a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def fmt(v, nd=0):
    if v is None or v != v:
        return "–"
    return f"{v:,.{nd}f}"


def ms(ns_value, nd=1):
    return fmt(None if ns_value is None else ns_value / 1e6, nd)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------- the delaying proxy

def serve_proxy(upstream, delay_s):
    """TCP on 127.0.0.1 (a free port, printed on stdout) to the server's Unix socket; every
    chunk read in either direction is written out delay_s later, in order (a latency, no
    bandwidth limit). Runs in its own process (`--serve-proxy`), so that its timers do not share
    an interpreter with the signal sender."""

    async def one_way(reader, writer):
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()

        async def deliver():
            while True:
                at, data = await queue.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    try:
                        writer.close()
                    except Exception:
                        pass
                    return
                writer.write(data)
                try:
                    await writer.drain()
                except Exception:
                    return

        task = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(1 << 16)
                queue.put_nowait((loop.time() + delay_s, data))
                if not data:
                    break
        except Exception:
            queue.put_nowait((loop.time() + delay_s, b""))
        await task

    async def on_client(creader, cwriter):
        try:
            ureader, uwriter = await asyncio.open_unix_connection(upstream)
        except Exception:
            cwriter.close()
            return
        await asyncio.gather(one_way(creader, uwriter), one_way(ureader, cwriter))

    async def main():
        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def proxy_rtt(port, n=7):
    """One PostgreSQL round trip through the proxy, n times: an SSLRequest answered 'N'."""
    ts = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            t = time.monotonic_ns()
            s.sendall(struct.pack("!ii", 8, 80877103))
            if s.recv(1) != b"N":
                raise RuntimeError("the proxy's server did not answer the SSLRequest with N")
            ts.append(time.monotonic_ns() - t)
        finally:
            s.close()
    return pct(ts, 50)


# ---------------------------------------------------------------- the slowed disk

# SlowDisk (tests/e2e/slowdisk.py): the end-to-end tests of a slow ledger use the same disk.


FSYNC_PROBE = r"""
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
path = os.path.join(d, "fsync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
ts = []
for i in range(n):
    os.pwrite(fd, b"x" * 4096, i * 4096)
    t = time.perf_counter()
    os.fdatasync(fd)
    ts.append((time.perf_counter() - t) * 1e3)
os.close(fd)
os.unlink(path)
ts.sort()
print(ts[len(ts) // 2], ts[-1])
"""


def fsync_probe(directory, n=60, preexec=None):
    """p50 and max of a 4 KiB append + fdatasync in `directory`, ms (in the throttled group when
    preexec puts the probe there)."""
    out = subprocess.run([sys.executable, "-c", FSYNC_PROBE, directory, str(n)], check=True,
                         capture_output=True, text=True, preexec_fn=preexec).stdout.split()
    return float(out[0]), float(out[1])


# ---------------------------------------------------------------- one case

def config_text(n_jobs, burst, grace):
    t = datetime.datetime.fromtimestamp(burst, datetime.timezone.utc)
    sched = f"{t.second} {t.minute} {t.hour} {t.day} {t.month} *"
    out = ['timezone = "UTC"', ""]
    for i in range(n_jobs):
        out += [f"[jobs.j{i:04d}]", f'schedule = "{sched}"', 'command = ["/bin/true"]', ""]
    return "\n".join(out), sched


class Replica:
    def __init__(self, index, name):
        self.index = index
        self.name = name
        self.proc = None
        self.main_pid = None
        self.ready_ns = None
        self.pending = None      # tick times (ns) waiting for the SIGUSR1 in flight
        self.samples = []        # (tick ns, delay ns, really sent)
        self.unexpected = 0      # SIGUSR1 records with nothing in flight
        self.term_sent = None
        self.term_recv = None
        self.exited = None
        self.killed = False
        self.exit_code = None
        self.log = None


def kill_marked(marker, spare=()):
    needle = f"{MARK_VAR}={marker}".encode()
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or int(entry) in spare:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            n += 1
        except OSError:
            continue
    return n


def run_case(a, case, n_jobs, ctx):
    """One case; returns its result dict."""
    kind = case
    work = tempfile.mkdtemp(prefix=f"{case}-", dir=ctx["tmp"])
    os.chmod(work, 0o755)
    res = {"case": case, "jobs": n_jobs, "notes": []}
    marker = uuid.uuid4().hex
    env = dict(os.environ, **{MARK_VAR: marker})
    for k in list(env):
        if k.startswith("LASTCALL_") or k == "NOTIFY_SOCKET":
            del env[k]
    pg, proxy, disk = ctx.get("pg"), None, None
    preexec = None
    replicas = []
    fifo_fd = None
    try:
        # ------------------------------------------------ where the ledger is
        if kind.startswith("pg-"):
            db = pg.new_database()
            res["db"] = db
            if kind == "pg-0ms":
                url = pg.url(db)
                res["ledger"] = "PostgreSQL 15, Unix socket"
            elif kind == "pg-50ms":
                proxy = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--serve-proxy",
                     os.path.join(pg.sock, ".s.PGSQL.5432"), str(a.proxy_delay_ms)],
                    stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
                port = int(proxy.stdout.readline())
                rtt = proxy_rtt(port)
                url = f"postgresql://lastcall@127.0.0.1:{port}/{db}"
                res["ledger"] = (f"PostgreSQL 15 via a TCP proxy holding each chunk "
                                 f"{a.proxy_delay_ms} ms each way (measured round trip "
                                 f"{rtt / 1e6:.1f} ms)")
                res["rtt_ms"] = rtt / 1e6
            else:
                sys.exit(f"unknown case {case}")
            location = ["--ledger", url]
            names = [f"r{i + 1}" for i in range(a.replicas)]
            p50, mx = fsync_probe(pg.dir)
            res["fsync_ms"] = (p50, mx)
            res["ledger"] += (f"; 4 KiB append + fdatasync beside the server's data dir: p50 "
                              f"{p50:.1f} ms, max {mx:.1f} ms")
        elif kind in ("sqlite", "sqlite-slow"):
            names = ["r1"]
            preexec = None
            state = os.path.join(work, "state")
            if kind == "sqlite-slow":
                if ctx.get("disk_error") is None and ctx.get("disk") is None:
                    try:
                        ctx["disk"] = SlowDisk(ctx["tmp"], a.disk_iops)
                    except Exception as e:
                        ctx["disk_error"] = f"{type(e).__name__}: {e}"
                disk = ctx.get("disk")
                if disk:
                    state = os.path.join(disk.mnt, f"state-{marker[:8]}")
                    preexec = disk.enter
                    res["ledger"] = "SQLite, state dir on " + disk.describe()
                else:
                    res["ledger"] = ("SQLite, state dir in the temp dir: NO slowed device could "
                                     "be built here (" + ctx["disk_error"] + ")")
                    res["notes"].append("no slowed device: " + ctx["disk_error"])
            else:
                res["ledger"] = f"SQLite, state dir in {tempfile.gettempdir()}"
            os.mkdir(state)
            p50, mx = fsync_probe(state, preexec=preexec)
            res["fsync_ms"] = (p50, mx)
            res["ledger"] += f" (4 KiB append + fdatasync there: p50 {p50:.1f} ms, max {mx:.1f} ms)"
            location = ["--state-dir", state]
            res["state"] = state
        else:
            sys.exit(f"unknown case {case}")

        # ------------------------------------------------ config, FIFO, replicas
        fifo = os.path.join(work, "stamps.fifo")
        os.mkfifo(fifo)
        fifo_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        burst = int(time.time()) + a.lead
        text, sched = config_text(n_jobs, burst, a.grace)
        res["schedule"] = sched
        res["burst_utc"] = datetime.datetime.fromtimestamp(
            burst, datetime.timezone.utc).strftime("%H:%M:%SZ")
        cfg = os.path.join(work, "lastcall.toml")
        with open(cfg, "w") as f:
            f.write(text)
        for i, name in enumerate(names):
            r = Replica(i, name)
            r.log = os.path.join(work, f"{name}.log")
            r.report = os.path.join(work, f"report-{name}.json")
            argv = [a.binary, "--config", cfg, *location, "--grace", a.grace, "--report", r.report]
            if kind.startswith("pg-"):
                argv += ["--replica-id", name]
            argv += ["--", ctx["sigstamp"], fifo, str(i)]
            with open(r.log, "w") as logf:
                r.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                          stderr=subprocess.STDOUT, env=env, cwd=work,
                                          start_new_session=True,
                                          preexec_fn=preexec)
            replicas.append(r)
        burst_mono = time.monotonic_ns() + int((burst - time.time()) * 1e9)
        res["load_start"] = loadavg()
        log(f"{case}: {len(names)} replica(s), {n_jobs} jobs at {res['burst_utc']} "
            f"({res['ledger']})")

        # ------------------------------------------------ the signal loop
        interval = a.interval_ms * 1_000_000
        buf = b""
        by_index = {r.index: r for r in replicas}
        counts = {"prev": None, "stable_since": None}
        last_poll = 0

        def take_records():
            nonlocal buf
            while True:
                try:
                    chunk = os.read(fifo_fd, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                buf += chunk
            while len(buf) >= RECORD.size:
                idx, signo, t, pid = RECORD.unpack_from(buf)
                buf = buf[RECORD.size:]
                r = by_index.get(idx)
                if r is None:
                    continue
                if signo == 0:
                    r.ready_ns, r.main_pid = t, pid
                elif signo == signal.SIGUSR1:
                    if r.pending:
                        for k, tick in enumerate(r.pending):
                            r.samples.append((tick, max(0, t - tick), k == 0))
                        r.pending = None
                    else:
                        r.unexpected += 1
                elif signo == signal.SIGTERM:
                    r.term_recv = t

        def fire_count():
            if kind.startswith("pg-"):
                out = pg.psql(res["db"], "SELECT count(*) FROM lastcall.runs WHERE "
                                         f"scheduled_at = {burst}", check=False)
                return int(out.stdout.strip()) if out.returncode == 0 else None
            try:
                c = sqlite3.connect(f"file:{os.path.join(res['state'], 'ledger.sqlite')}?mode=ro",
                                    uri=True, timeout=1)
                try:
                    return c.execute("SELECT count(*) FROM runs WHERE scheduled_at = ?",
                                     (burst,)).fetchone()[0]
                finally:
                    c.close()
            except sqlite3.Error:
                return None

        next_tick = time.monotonic_ns()
        end_reason = None
        ready_checked = False
        while True:
            now = time.monotonic_ns()
            if now < next_tick:
                r_, _, _ = select.select([fifo_fd], [], [], (next_tick - now) / 1e9)
                take_records()
                continue
            take_records()
            next_tick += interval
            for r in replicas:
                if r.ready_ns is None or r.proc.poll() is not None:
                    continue
                if r.pending is None:
                    t = time.monotonic_ns()
                    os.kill(r.proc.pid, signal.SIGUSR1)
                    r.pending = [t]
                else:
                    r.pending.append(time.monotonic_ns())
            now = time.monotonic_ns()
            dead = [r.name for r in replicas if r.proc.poll() is not None]
            if dead:
                end_reason = "lastcall exited by itself: " + ", ".join(dead)
                break
            if not ready_checked and now >= burst_mono - 2_000_000_000:
                ready_checked = True
                late = [r.name for r in replicas if r.ready_ns is None]
                if late:
                    res["notes"].append("not ready 2 s before the burst: " + ", ".join(late))
            if now < burst_mono + a.after * 1_000_000_000:
                continue
            if now >= burst_mono + a.cap * 1_000_000_000:
                end_reason = f"cap: B + {a.cap} s"
                break
            if now - last_poll >= 1_000_000_000:
                last_poll = now
                c = fire_count()
                stuck = any(r.pending and now - r.pending[0] > 1_000_000_000 for r in replicas)
                if c is not None and c >= n_jobs and not stuck:
                    end_reason = "every fire time claimed, no signal pending"
                    break
                if c != counts["prev"]:
                    counts["prev"], counts["stable_since"] = c, now
                elif not stuck and now - counts["stable_since"] >= 5_000_000_000:
                    end_reason = f"rows stopped growing at {c} (5 s), no signal pending"
                    break
        res["end_reason"] = end_reason
        res["ticks_until_s"] = (time.monotonic_ns() - burst_mono) / 1e9
        log(f"  signals stopped at B + {res['ticks_until_s']:.1f} s ({end_reason})")

        # ------------------------------------------------ SIGTERM
        t_term = time.monotonic_ns()
        res["term_wall_ms"] = int(time.time() * 1000)
        res["load_end"] = loadavg()
        for r in replicas:
            if r.proc.poll() is None:
                r.term_sent = time.monotonic_ns()
                os.kill(r.proc.pid, signal.SIGTERM)
        grace_s = parse_duration(a.grace)
        deadline = t_term + int((grace_s + 5) * 1e9)
        while time.monotonic_ns() < deadline:
            take_records()
            for r in replicas:
                if r.exited is None and r.proc.poll() is not None:
                    r.exited = time.monotonic_ns()
                    r.exit_code = r.proc.returncode
            if all(r.exited is not None for r in replicas):
                break
            select.select([fifo_fd], [], [], 0.01)
        for r in replicas:
            if r.exited is None:
                r.killed = True
                try:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                r.proc.wait()
                r.exit_code = r.proc.returncode
        take_records()
        t_end = time.monotonic_ns()
        for r in replicas:
            # A SIGUSR1 still in flight: its delay is at least until now (censored).
            if r.pending:
                for k, tick in enumerate(r.pending):
                    r.samples.append((tick, t_end - tick, k == 0))
                res["notes"].append(f"{r.name}: {len(r.pending)} tick(s) of SIGUSR1 never "
                                    "reached the main command (counted until the end)")
                r.pending = None
        left = kill_marked(marker, spare=(proxy.pid,) if proxy else ())
        if left:
            res["notes"].append(f"{left} process(es) of the case left behind, killed")

        # ------------------------------------------------ results
        res["replicas"] = []
        for r in replicas:
            x = {"name": r.name, "samples": r.samples, "unexpected": r.unexpected,
                 "term_delay_ns": (r.term_recv - r.term_sent) if r.term_recv and r.term_sent
                 else None,
                 "exit_after_ns": (r.exited - r.term_sent) if r.exited and r.term_sent else None,
                 "killed": r.killed, "exit_code": r.exit_code, "ready": r.ready_ns is not None}
            x["log"] = scan_log(r.log)
            try:
                with open(r.report) as f:
                    rep = json.load(f)
                j = rep.get("jobs", {})
                x["report"] = {"unclaimed": j.get("unclaimed"),
                               "unrecorded": len(j.get("unrecorded", [])),
                               "interrupted_runs": len(j.get("interrupted_runs", []))}
            except (OSError, ValueError):
                x["report"] = None
            res["replicas"].append(x)
        res["burst_mono"] = burst_mono
        res["signals"] = signal_stats(replicas, burst_mono)
        res["claims"] = ledger_stats(kind, pg, res, burst, n_jobs)
        if a.keep:
            res["notes"].append(f"kept: {work}")
        return res
    finally:
        for r in replicas:
            if r.proc and r.proc.poll() is None:
                try:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                r.proc.wait()
        if proxy:
            try:
                os.killpg(proxy.pid, signal.SIGKILL)
            except OSError:
                pass
            proxy.wait()
        kill_marked(marker)
        if fifo_fd is not None:
            os.close(fifo_fd)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
            if res.get("state") and not res["state"].startswith(work):
                shutil.rmtree(res["state"], ignore_errors=True)


def parse_duration(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text)
    if not m:
        sys.exit(f"--grace: {text}?")
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "ms" else v * 60 if m.group(2) == "m" else v


def scan_log(path):
    """What lastcall said that matters here: counts of a few kinds of lines, and the first
    warnings/errors that are not one per job."""
    out = {"lines": 0, "missed": 0, "not_started": 0, "errors": 0, "warnings": 0, "samples": []}
    seen = set()
    try:
        with open(path, errors="replace") as f:
            for line in f:
                out["lines"] += 1
                low = line.lower()
                if "fire time(s) missed" in line:
                    out["missed"] += 1
                if "not started" in line:
                    out["not_started"] += 1
                if " error" in low or "[error]" in low:
                    out["errors"] += 1
                elif "warn" in low:
                    out["warnings"] += 1
                else:
                    continue
                shape = re.sub(r"\bj\d{4}\b", "JOB", re.sub(r"\d+", "N", line.split("]", 2)[-1]))
                shape = shape.strip()
                if shape not in seen and len(out["samples"]) < 6:
                    seen.add(shape)
                    out["samples"].append(line.strip()[:300])
    except OSError:
        pass
    return out


def signal_stats(replicas, burst_mono):
    def summary(samples):
        d = [s[1] for s in samples]
        return {"n": len(d), "p50": pct(d, 50) if d else None, "p99": pct(d, 99) if d else None,
                "max": max(d) if d else None}

    every = [s for r in replicas for s in r.samples]
    return {"all": summary(every),
            "quiet": summary([s for s in every if s[0] < burst_mono]),
            "burst": summary([s for s in every if s[0] >= burst_mono]),
            "sent": summary([s for s in every if s[2]]),
            "over_10ms": sum(1 for s in every if s[1] > 10_000_000),
            "per_replica": {r.name: summary(r.samples) for r in replicas}}


def ledger_stats(kind, pg, res, burst, n_jobs):
    cols = ["job", "replica", "state", "created_ms", "started_ms", "retry_of"]
    if kind.startswith("pg-"):
        out = pg.psql(res["db"], "SELECT coalesce(json_agg(json_build_array(job, replica, state, "
                                 "created_ms, started_ms, retry_of)), '[]') FROM lastcall.runs "
                                 "WHERE "
                                 f"scheduled_at = {burst}")
        rows = [dict(zip(cols, r)) for r in json.loads(out.stdout)]
    else:
        path = os.path.join(res["state"], "ledger.sqlite")
        try:
            c = sqlite3.connect(path, timeout=5)
            rows = [dict(zip(cols, r)) for r in c.execute(
                "SELECT job, 'r1', state, created_ms, started_ms, retry_of FROM runs "
                "WHERE scheduled_at = ?",
                (burst,))]
            c.close()
        except sqlite3.Error as e:
            res["notes"].append(f"ledger.sqlite not readable: {e}")
            rows = []
    b_ms = burst * 1000
    retries = [r for r in rows if r["retry_of"] is not None]
    rows = [r for r in rows if r["retry_of"] is None]
    created = sorted(r["created_ms"] for r in rows)
    started = sorted(r["started_ms"] for r in rows if r["started_ms"] is not None)
    jobs = {r["job"] for r in rows}
    span = (created[-1] - created[0]) / 1000 if len(created) > 1 else None
    per_state, per_replica = {}, {}
    for r in rows:
        per_state[r["state"]] = per_state.get(r["state"], 0) + 1
        per_replica[r["replica"]] = per_replica.get(r["replica"], 0) + 1
    return {"rows": len(rows), "claimed": len(jobs), "never": n_jobs - len(jobs),
            "dup": len(rows) - len(jobs), "retries": len(retries),
            "after_term": sum(1 for t in created if t > res["term_wall_ms"])
            if res.get("term_wall_ms") else 0,
            "within_1s": sum(1 for t in created if t - b_ms <= 1000),
            "first_s": (created[0] - b_ms) / 1000 if created else None,
            "last_s": (created[-1] - b_ms) / 1000 if created else None,
            "last_started_s": (started[-1] - b_ms) / 1000 if started else None,
            "throughput": (len(created) / span) if span else None,
            "per_state": per_state, "per_replica": per_replica}


# ---------------------------------------------------------------- the report

HEADER = """# lastcall benchmark, {date}: the init never waits (issue 38)

Generated by `make bench-never-waits` (bench/never_waits.py, bench/src/sigstamp.c). One section
per measured binary (`--label`); each section names its binary and the machine's load.

**What is measured.** N jobs (`command = ["/bin/true"]`) whose 6-field schedule names one and the
same second B, run by 3 replicas of lastcall sharing one PostgreSQL 15 ledger (fsync on; a fresh
database per case), or by 1 lastcall on its SQLite ledger. Each lastcall's main command is
`sigstamp`, whose SIGUSR1 handler writes CLOCK_MONOTONIC to a FIFO. Every 50 ms the script sends
SIGUSR1 to each lastcall, reading CLOCK_MONOTONIC just before kill(), from the replicas' start
(a quiet stretch of ~{lead} s before B) to B + {after} s and then until the burst has settled (every
fire time claimed, or the rows stopped growing with no signal pending), at most B + {cap} s.
A tick while the previous signal to that lastcall has not arrived is not sent (it would merge
with the pending one in the kernel) and counts as arriving with it: every tick is one sample of
"a signal sent now reaches the main command after ...", uniform in time, so a stall of S
seconds weighs S / 50 ms samples. Then SIGTERM to every lastcall (grace {grace}): when it
reached the main command, when lastcall exited (SIGKILL at grace + 5 s).

**Ledger columns.** From the rows of fire time B afterwards: `created_ms` is taken in the
claim's INSERT (PostgreSQL: the server's clock_timestamp(); SQLite: lastcall's clock; one
machine, one clock). Claim throughput = rows / (last - first created_ms), fire times per second of the whole
cluster. "Not claimed by the end" = N - jobs with a row for B when the replicas were stopped
(at most B + {cap} s, then SIGTERM: a replica still inside its burst is cut off there).

Cases: `pg-0ms` PostgreSQL on its Unix socket; `pg-50ms` the same server behind a TCP proxy
started by the script that holds every chunk 25 ms in each direction (a 50 ms round trip; this
kernel has no `netem`); `sqlite-slow` one lastcall whose state dir is on an ext4 loop device,
its writes throttled by the cgroup v1 blkio controller (this kernel has no device-mapper, so no
dm-delay): the Ledgers list says what one durable write (4 KiB append + fdatasync, 60 times)
cost there.

Issue 38's bar (after): signal p99 < 10 ms in every case, and at 0 ms every fire time claimed
within 1 s.
"""


def section(a, M, results, elapsed, load_before, load_after, bininfo):
    md = [f"## {a.label}", "",
          f"- binary `{a.binary}` ({bininfo}); bench from commit {M['commit']}; run "
          f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, {elapsed:.0f} s",
          f"- CPU: {M['cpu']}, {M['cores']} cores, memory {M['mem']}; `uname -r` "
          f"{os.uname().release}; {M.get('postgres', '')}",
          f"- load average {load_before} before, {load_after} after; SIGUSR1 every "
          f"{a.interval_ms} ms to each lastcall; {a.replicas} replicas on PostgreSQL (fsync "
          f"{a.pg_fsync}); proxy {a.proxy_delay_ms} ms each way; slowed disk {a.disk_iops} "
          f"write IOPS; burst B at start + {a.lead} s, signals until B + {a.after} s at least, "
          f"B + {a.cap} s at most; grace {a.grace}", "",
          f"`{' '.join(sys.argv)}`", ""]
    if a.note:
        md += [a.note, ""]
    md += ["Ledgers:", ""]
    md += [f"- {r['case']} ({r['jobs']:,} jobs, B = {r['burst_utc']}): {r['ledger']}; load "
           f"average {r.get('load_start', '?')} at the start, {r.get('load_end', '?')} at the "
           "SIGTERM" for r in results]
    md += ["", "### Signal delay (SIGUSR1: kill() to the main command's handler)", "",
           "All ticks of all replicas; \"before B\" are the ticks of the quiet stretch, \"from B\" "
           "the rest. \"sent\": only the signals really sent (one per arrival). ms.", "",
           "| case | replicas | jobs | ticks | p50 | p99 | max | before B p99 | from B "
           "p50 | from B p99 | from B max | ticks > 10 ms | sent: n / p99 / max | SIGTERM to "
           "main | lastcall exit after SIGTERM |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in results:
        s = r["signals"]
        term = ", ".join(ms(x["term_delay_ns"]) + " ms" if x["term_delay_ns"] is not None
                         else f"not within {fmt(parse_duration(a.grace) + 5, 0)} s"
                         for x in r["replicas"])
        ex = ", ".join(("killed at " + fmt(parse_duration(a.grace) + 5, 0) + " s") if x["killed"]
                       else (fmt(x["exit_after_ns"] / 1e9, 2) + " s"
                             + ("" if x["exit_code"] == 0 else f" (exit {x['exit_code']})"))
                       for x in r["replicas"])
        md.append(f"| {r['case']} | {len(r['replicas'])} | {r['jobs']:,} | "
                  f"{s['all']['n']:,} | {ms(s['all']['p50'])} | {ms(s['all']['p99'])} | "
                  f"{ms(s['all']['max'])} | {ms(s['quiet']['p99'])} | {ms(s['burst']['p50'])} | "
                  f"{ms(s['burst']['p99'])} | {ms(s['burst']['max'])} | {s['over_10ms']:,} | "
                  f"{s['sent']['n']:,} / {ms(s['sent']['p99'])} / {ms(s['sent']['max'])} | "
                  f"{term} | {ex} |")
    md += ["", "### Claims of the burst", "",
           "Seconds after B. Throughput: fire times claimed per second by the whole cluster, "
           "between its first and its last claim.", "",
           "Rows are first runs only; \"retries\" are the rows with `retry_of` (a run recorded "
           "interrupted and run again), \"after SIGTERM\" the first runs claimed after the "
           "replicas were sent SIGTERM.", "",
           "| case | jobs | claimed | within 1 s of B | first claim | last claim | claim "
           "throughput /s | not claimed by the end | claimed after SIGTERM | rows per replica | "
           "states | retries | signals stopped |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for r in results:
        c = r["claims"]
        md.append(f"| {r['case']} | {r['jobs']:,} | {c['claimed']:,} | {c['within_1s']:,} "
                  f"({c['within_1s'] / r['jobs'] * 100:.0f} %) | {fmt(c['first_s'], 2)} | "
                  f"{fmt(c['last_s'], 1)} | {fmt(c['throughput'], 0)} | **{c['never']:,}** | "
                  f"{c['after_term']:,} | "
                  + ", ".join(f"{k or '-'} {v:,}" for k, v in sorted(c["per_replica"].items()))
                  + " | " + ", ".join(f"{k} {v:,}" for k, v in sorted(c["per_state"].items()))
                  + f" | {c['retries']:,} | B + {r['ticks_until_s']:.0f} s: {r['end_reason']} |")
    md += ["", "### What lastcall said", ""]
    for r in results:
        for x in r["replicas"]:
            L = x["log"]
            rep = x["report"]
            md.append(f"- {r['case']} {x['name']}: {L['lines']:,} log lines, {L['warnings']:,} "
                      f"warnings, {L['errors']:,} errors, {L['missed']:,} \"fire time(s) "
                      f"missed\", {L['not_started']:,} \"not started\"; report: "
                      + (", ".join(f"{k} {v}" for k, v in rep.items()) if rep else "none written")
                      + (f"; {x['unexpected']} SIGUSR1 arrived with none in flight"
                         if x["unexpected"] else ""))
            for line in L["samples"]:
                md.append(f"  - `{line.replace('`', chr(39))}`")
        for n in r["notes"]:
            md.append(f"- {r['case']}: {n}")
    md.append("")
    return md


def binary_info(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    try:
        ver = sh([path, "--version"]).strip()
    except Exception:
        ver = "?"
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d %H:%M")
    return f"{ver}, sha256 {h.hexdigest()[:12]}, built {mtime}"


# ---------------------------------------------------------------- main

def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-proxy":
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        return serve_proxy(sys.argv[2], int(sys.argv[3]) / 1000)
    ap = argparse.ArgumentParser(description="issue 38: signal delay during a burst of claims")
    ap.add_argument("--binary", required=True, help="the lastcall to measure (dynamic: libpq)")
    ap.add_argument("--label", required=True, help="the section's title, e.g. 'before (6930258)'")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--cases", default="pg-0ms,pg-50ms,pg-50ms:200,sqlite-slow",
                    help="comma-separated, each CASE or CASE:JOBS; cases: pg-0ms, pg-50ms, "
                         "sqlite, sqlite-slow")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--interval-ms", type=int, default=50)
    ap.add_argument("--lead", type=int, default=10, help="s from the start to the burst")
    ap.add_argument("--after", type=int, default=20, help="s of signals after the burst, at least")
    ap.add_argument("--cap", type=int, default=120, help="s after the burst, at most")
    ap.add_argument("--proxy-delay-ms", type=int, default=25, help="each way")
    ap.add_argument("--disk-iops", type=int, default=20)
    ap.add_argument("--grace", default="8s")
    ap.add_argument("--pg-fsync", default="on", choices=["on", "off"])
    ap.add_argument("--out", default=None,
                    help="the results file to append to (default bench/results/<date>-never-waits.md)")
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""))
    ap.add_argument("--keep", action="store_true", help="keep each case's directory (logs)")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)
    if not os.access(a.binary, os.X_OK):
        sys.exit(f"no lastcall at {a.binary}")
    if os.geteuid() != 0:
        sys.exit("needs root (PostgreSQL as nobody, a loop device, a blkio cgroup)")
    cases = []
    for item in a.cases.split(","):
        name, _, n = item.strip().partition(":")
        cases.append((name, int(n) if n else a.jobs))
    stamp = sh(["date", "+%F"]).strip()
    out = a.out or os.path.join(HERE, "results", f"{stamp}-never-waits.md")

    tmp = tempfile.mkdtemp(prefix="lastcall-bench-never-waits-")
    os.chmod(tmp, 0o755)
    ctx = {"tmp": tmp}
    sigstamp = os.path.join(tmp, "sigstamp")
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-o", sigstamp,
                    os.path.join(HERE, "src", "sigstamp.c")], check=True)
    ctx["sigstamp"] = sigstamp
    results = []
    t0 = time.time()
    load_before = loadavg()
    M = machine_basics()
    pg = None
    try:
        if any(c.startswith("pg-") for c, _ in cases):
            log(f"starting PostgreSQL (fsync {a.pg_fsync})")
            pg = pgserver.PgServer(fsync=a.pg_fsync == "on")
            ctx["pg"] = pg
            M["postgres"] = sh([os.path.join(pg.bindir, "postgres"), "--version"]).strip()
        for case, n in cases:
            r = run_case(a, case, n, ctx)
            results.append(r)
            s, c = r["signals"], r["claims"]
            log(f"  signal p50 {ms(s['all']['p50'])} p99 {ms(s['all']['p99'])} max "
                f"{ms(s['all']['max'])} ms; claimed {c['claimed']}/{n} (within 1 s: "
                f"{c['within_1s']}), last claim B + {fmt(c['last_s'], 1)} s, "
                f"{fmt(c['throughput'])} /s")
    finally:
        if pg:
            pg.close()
        if ctx.get("disk"):
            ctx["disk"].close()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - t0
    md = section(a, M, results, elapsed, load_before, loadavg(), binary_info(a.binary))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    new = not os.path.exists(out)
    with open(out, "a") as f:
        if new:
            f.write(HEADER.format(date=stamp, lead=a.lead, after=a.after, cap=a.cap,
                                  grace=a.grace))
            f.write("\n")
        f.write("\n".join(md) + "\n")
    log("appended to", out)
    print(out)


if __name__ == "__main__":
    main()
