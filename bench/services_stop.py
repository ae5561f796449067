#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The stop of many services against the grace (issue 42, item 3), both trackers.

Usage: bench/services_stop.py [--services 1000] [--runs 1] [--lastcall PATH ...]
                              [--only startup,full,peers] [--out bench/results/DATE-services-stop.md]
                              [--plot bench/results/DATE-services-stop.png]

  startup: SIGTERM 1.5 s into the start-up of N services (`exec sleep`), --grace 5s.
  full:    SIGTERM once all N services have started, --grace 10s.
  peers:   the same N sleeping processes as one command's children (`sh -c 'sleep & ...; wait'`)
           under tini -g, dumb-init, catatonit -g (those installed) and lastcall, SIGTERM once
           all have started: what the peers do (one kill() to the group) beside lastcall's stop
           of the whole tree, and beside its stop of N services (full).

Each run measures the time from the SIGTERM to lastcall's exit, counts the services started after
the SIGTERM (log lines "started pid" after the stop began), the services SIGKILLed at their
grace, and the processes left behind (each service sleeps a duration unique to the run, found
by its command line afterwards and killed). lastcall runs as a subreaper (not PID 1), so a
process it left behind outlives it instead of dying with a namespace.
"""
import argparse
import datetime
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import statistics

from teardown import emit, plot

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(*a):
    print("[services-stop]", *a, file=sys.stderr, flush=True)


def leftovers(token):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def kill_leftovers(token):
    """The processes of this run still alive, each killed; returns their pids."""
    left = leftovers(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def one_run(lastcall, tracker, n, mode, tmp):
    token = f"{4000 + os.getpid() % 1000}.{int(time.monotonic() * 1000) % 100000:05d}"
    cfg = os.path.join(tmp, "lastcall.toml")
    with open(cfg, "w") as f:
        for i in range(n):
            f.write(f'[services.s{i:04d}]\ncommand = "exec sleep {token}"\n\n')
    grace = "5s" if mode == "startup" else "10s"
    argv = [lastcall, "--tracker", tracker, "--grace", grace, "--config", cfg,
            "--report", os.path.join(tmp, "report.json")]
    env = dict(os.environ, LASTCALL_STATE_DIR=os.path.join(tmp, "state"))
    began = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    lines, buf, term_at, started_before = [], b"", None, 0
    deadline_to_term = began + 1.5 if mode == "startup" else None
    while True:
        timeout = 1.0
        if term_at is None and deadline_to_term is not None:
            timeout = max(0.0, deadline_to_term - time.monotonic())
        r, _, _ = select.select([p.stderr], [], [], timeout)
        if r:
            chunk = os.read(p.stderr.fileno(), 1 << 16)
            if not chunk:
                break
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                text = line.decode(errors="replace")
                lines.append((time.monotonic(), text))
                if term_at is None and ": started pid " in text:
                    started_before += 1
        now = time.monotonic()
        if term_at is None and ((mode == "startup" and now >= deadline_to_term) or
                                (mode == "full" and started_before >= n)):
            p.send_signal(signal.SIGTERM)
            term_at = time.monotonic()
            started_at_term = started_before
        if term_at is not None and now - term_at > 180:
            # What it leaves behind may hold the log pipe open: stop reading.
            log("still running 180 s after SIGTERM: SIGKILL")
            p.kill()
            break
    code = p.wait()
    ended = time.monotonic()
    after = [t for t, text in lines if t >= term_at and ": started pid " in text]
    # Lines read after the SIGTERM may have been written before it: count the starts after the
    # stop's own line instead, which lastcall writes when it acts on the signal.
    stop_line = next((i for i, (t, text) in enumerate(lines) if "in reverse dependency order" in
                      text), None)
    started_after = sum(1 for _, text in lines[stop_line:] if ": started pid " in text) \
        if stop_line is not None else len(after)
    killed = sum(1 for _, text in lines if "at the end of its grace: sent SIGKILL" in text)
    left = kill_leftovers(token)
    return {
        "tracker": tracker, "mode": mode, "exit": code, "stop_s": ended - term_at,
        "started_at_term": started_at_term, "started_after_stop": started_after,
        "killed_at_grace": killed, "left_behind": len(left), "startup_s": term_at - began,
    }


PEERS = [("tini -g", ["tini", "-g", "--"]), ("dumb-init", ["dumb-init", "--"]),
         ("catatonit -g", ["catatonit", "-g", "--"])]


def children_run(name, init, n, tmp):
    """N sleeping children of one shell under `init`; SIGTERM once the shell says they started."""
    token = f"{5000 + os.getpid() % 1000}.{int(time.monotonic() * 1000) % 100000:05d}"
    fifo = os.path.join(tmp, f"started.{token}")
    os.mkfifo(fifo)
    script = f'i=0; while [ $i -lt {n} ]; do sleep {token} & i=$((i+1)); done; echo up > {fifo}; wait'
    env = dict(os.environ, LASTCALL_STATE_DIR=os.path.join(tmp, "state"))
    p = subprocess.Popen(init + ["sh", "-c", script], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    with open(fifo) as f:
        f.readline()
    p.send_signal(signal.SIGTERM)
    term_at = time.monotonic()
    try:
        code = p.wait(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
    stop = time.monotonic() - term_at
    # The peers exit with their child, not with the group: a sleep told to stop may still be
    # dying then. Left behind is what is still there a moment later.
    time.sleep(0.5)
    left = kill_leftovers(token)
    os.unlink(fifo)
    return {"binary": name, "tracker": "-", "mode": "peers", "exit": code, "stop_s": stop,
            "started_at_term": n, "started_after_stop": 0, "killed_at_grace": 0,
            "left_behind": len(left), "startup_s": 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--lastcall", action="append", default=[],
                    help="NAME=PATH (repeatable); default: build/static/lastcall")
    ap.add_argument("--only", default="startup,full,peers")
    ap.add_argument("--trackers", default="cgroup,proc")
    ap.add_argument("--out")
    ap.add_argument("--plot", help="PNG: SIGTERM to exit per init and case (gnuplot)")
    a = ap.parse_args()
    binaries = [x.split("=", 1) for x in a.lastcall] or [
        ("lastcall", os.path.join(ROOT, "build", "static", "lastcall"))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lc-svcstop-") as tmp:
        for run in range(a.runs):
            for mode in a.only.split(","):
                if mode == "peers":
                    inits = [(n, argv) for n, argv in PEERS if shutil.which(argv[0])]
                    inits += [(f"{name} --tracker {t}", [path, "--tracker", t, "--grace", "10s",
                                                         "--"])
                              for name, path in binaries for t in a.trackers.split(",")]
                    for name, init in inits:
                        r = children_run(name, init, a.services, tmp)
                        log(r)
                        rows.append(r)
                    continue
                for tracker in a.trackers.split(","):
                    for name, path in binaries:
                        r = one_run(path, tracker, a.services, mode, tmp)
                        r["binary"] = name
                        log(r)
                        rows.append(r)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    out = [f"# Stop of {a.services} services against the grace ({datetime.date.today()})", "",
           f"`bench/services_stop.py --services {a.services} --runs {a.runs}`; "
           f"{os.cpu_count()} CPUs, load average at the end {' '.join(load)}. "
           "startup: SIGTERM 1.5 s after lastcall started, `--grace 5s`; "
           "full: SIGTERM once every service started, `--grace 10s`.", "",
           "| binary | tracker | case | started at SIGTERM | started after the stop began | "
           "SIGTERM to exit (s) | SIGKILLed at grace | left behind | exit |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['binary']} | {r['tracker']} | {r['mode']} | {r['started_at_term']} | "
                   f"{r['started_after_stop']} | {r['stop_s']:.2f} | {r['killed_at_grace']} | "
                   f"{r['left_behind']} | {r['exit']} |")
    emit(out, a.out)
    if a.plot:
        bars = {}
        for r in rows:
            label = r["binary"] if r["mode"] == "peers" else \
                f"{r['binary']} {r['tracker']}: {a.services} services ({r['mode']})"
            bars.setdefault(label, []).append(r["stop_s"])
        plot([(k, statistics.median(v), min(v), max(v)) for k, v in bars.items()], a.plot,
             a.services, f"SIGTERM to exit, {a.services} sleeping processes or services")


if __name__ == "__main__":
    main()
