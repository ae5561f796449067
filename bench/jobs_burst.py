#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""1,000 jobs every second (issue 42): is every fire time either run or recorded?

Usage: bench/jobs_burst.py --binary PATH --label TEXT [--jobs 1000] [--seconds 60]
                           [--grace 10s] [--out FILE]
One lastcall (SQLite ledger in a fresh temp state dir, main command `sleep`) with N jobs
`schedule = "@every 1s"`, `command = ["/bin/true"]`, for --seconds s; then SIGTERM, and lastcall's
exit is waited for. Due fire times per job: every whole second from the first fire time after
lastcall's start through the second of the SIGTERM. From the ledger afterwards: the rows of each
due fire time by state (ran: completed, failed, interrupted, started; skipped by reason class),
and the fire times with no row at all (lost: neither run nor recorded). From the log: the lines
that explain missed fire times, by cause. Appends one section (--label) to <out> (default
bench/results/<date>-jobs-burst.md), so that "before" and "after" sit in one file.
"""
import argparse
import collections
import datetime
import math
import os
import platform
import signal
import sqlite3
import subprocess
import tempfile
import time


def classify(reason):
    if reason.startswith("missed:"):
        return "skipped: missed (" + ("clock step" if "clock" in reason else "late") + ")"
    if "still running" in reason:
        return "skipped: previous run still running"
    if "shutting down" in reason:
        return "skipped: shutting down"
    if "not started" in reason:
        return "skipped: not started"
    return "skipped: other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--grace", default="10s")
    ap.add_argument("--out")
    a = ap.parse_args()
    today = datetime.date.today().isoformat()
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                f"{today}-jobs-burst.md")
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "jobs.toml")
        with open(cfg, "w") as f:
            for i in range(a.jobs):
                f.write(f'[jobs.j{i}]\nschedule = "@every 1s"\ncommand = ["/bin/true"]\n')
        log_path = os.path.join(d, "log")
        load_before = os.getloadavg()
        start_wall = time.time()
        with open(log_path, "w") as log:
            p = subprocess.Popen([a.binary, "--config", cfg, "--state-dir", os.path.join(d, "state"),
                                  "--grace", a.grace, "--", "sleep", "100000"],
                                 stdout=subprocess.DEVNULL, stderr=log)
        time.sleep(a.seconds)
        term_wall = time.time()
        p.send_signal(signal.SIGTERM)
        code = p.wait()
        exit_s = time.time() - term_wall
        load_after = os.getloadavg()
        first, last = math.floor(start_wall) + 1, math.floor(term_wall)
        due = (last - first + 1) * a.jobs
        db = sqlite3.connect(os.path.join(d, "state", "ledger.sqlite"))
        rows = db.execute("SELECT job, scheduled_at, state, reason FROM runs "
                          "WHERE scheduled_at BETWEEN ? AND ?", (first, last)).fetchall()
        kinds = collections.Counter()
        seen = set()
        for job, at, state, reason in rows:
            seen.add((job, at))
            if state == "skipped":
                kinds[classify(reason or "")] += 1
            elif (reason or "").startswith("not started"):
                kinds[f"recorded {state}: not started"] += 1
            else:
                kinds["ran (" + state + ")"] += 1
        lost = due - len(seen)
        with open(log_path) as f:
            log_text = f.read()
        causes = collections.Counter()
        for line in log_text.splitlines():
            if "fire time(s) missed" in line:
                causes["clock step" if "clock" in line else "ran late"] += 1
    ran = sum(v for k, v in kinds.items() if k.startswith("ran"))
    lines = [f"\n## {a.label}\n",
             f"- binary `{a.binary}`; {a.jobs} jobs `@every 1s` for {a.seconds:.0f} s; "
             f"fire times {first}..{last} ({last - first + 1} s): **{due:,} due**",
             f"- lastcall exit code {code}, {exit_s:.1f} s after SIGTERM (grace {a.grace})",
             f"- load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
             f"{' '.join(f'{x:.2f}' for x in load_after)} after; {platform.node()}, "
             f"nproc {os.cpu_count()}",
             "",
             "| fire times | count | share of due |",
             "|---|---:|---:|"]
    for k, v in sorted(kinds.items()):
        lines.append(f"| {k} | {v:,} | {100 * v / due:.1f}% |")
    lines.append(f"| **ran** | {ran:,} | {100 * ran / due:.1f}% |")
    lines.append(f"| **neither run nor recorded** | {lost:,} | {100 * lost / due:.1f}% |")
    lines.append("")
    lines.append("Log lines about missed fire times, by the cause they name: " +
                 (", ".join(f"{k}: {v:,}" for k, v in causes.items()) or "none"))
    text = "\n".join(lines) + "\n"
    new = not os.path.exists(out)
    with open(out, "a") as f:
        if new:
            f.write(f"# lastcall benchmark, {today}: 1,000 jobs every second (issue 42)\n\n"
                    "Generated by `bench/jobs_burst.py` (see its docstring for the method).\n")
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
