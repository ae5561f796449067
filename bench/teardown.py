#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Teardown of a big tree: each init as PID 1 of a new PID namespace over N sleeping processes
(issue 42, item 4), lastcall against tini, dumb-init and catatonit in one run, alternated.

Usage: bench/teardown.py [--processes 10000] [--runs 3] [--lastcall NAME=PATH ...]
                         [--out bench/results/DATE-teardown.md] [--plot PNG]
       bench/teardown.py --replot bench/results/DATE-teardown.md --plot PNG

`unshare --pid --fork --mount-proc INIT... sleepers N FIFO`: the child forks N-1 processes that
wait in pause(), all in its process group, and says so on a FIFO. Then SIGTERM to the init, and
the time until `unshare` is reaped: the namespace is empty then (the kernel waits for every
process of a namespace whose PID 1 exits). The peers forward to the group (tini -g, catatonit
-g, dumb-init's default): one kill() ends all N. lastcall stops the whole tree itself (its stop
signal to every member, both trackers). VmHWM of the init is sampled every 5 ms until its exit:
its peak RSS; (peak - RSS before the SIGTERM) / N is what tracking one process cost it.
"""
import argparse
import datetime
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(*a):
    print("[teardown]", *a, file=sys.stderr, flush=True)


def vm_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def child_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def emit(lines, out):
    """Prints the table, and appends it to the file `out` when given (bench/results/...)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "a") as f:
            f.write(text + "\n")
    return text


def plot(rows, path, processes, title=None):
    """A bar per init: (name, median, min, max) seconds, drawn by gnuplot where it is installed."""
    title = title or f"SIGTERM to an empty namespace, {processes} processes"
    if not shutil.which("gnuplot") or not rows:
        log("no plot: gnuplot is not installed or there is nothing to draw")
        return
    data = os.path.join(os.path.dirname(os.path.abspath(path)), ".teardown.dat")
    with open(data, "w") as f:
        for i, (name, m, lo, hi) in enumerate(rows):
            f.write(f'{i} "{name}" {m:.3f} {lo:.3f} {hi:.3f}\n')
    script = (f'set terminal pngcairo size 900,420; set output "{path}";'
              f'set title "{title} (median, min-max)"; set ylabel "seconds"; set yrange [0:*]; set style fill solid 0.6;'
              'set boxwidth 0.6; set xtics rotate by -20;'
              f'plot "{data}" using 1:3:xtic(2) with boxes notitle, '
              f'"{data}" using 1:3:4:5 with yerrorbars notitle lc rgb "black"')
    subprocess.run(["gnuplot", "-e", script], check=False)
    os.unlink(data)


def replot(table, path):
    """The plot again from a results table this script wrote (--replot MD --plot PNG)."""
    rows, processes = [], 0
    with open(table) as f:
        for line in f:
            if line.startswith("# Teardown of "):
                processes = int(line.split()[3])
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 8 and cells[2].replace(".", "").isdigit():
                rows.append((cells[0], float(cells[2]), float(cells[3]), float(cells[4])))
    plot(rows, path, processes)


def one_run(argv, n, sleepers, tmp):
    fifo = os.path.join(tmp, "ready.fifo")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + argv + [sleepers, str(n), fifo]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(fifo) as f:  # blocks until the N processes exist
        ready = f.read(1)
    if ready != "R":
        p.kill()
        p.wait()
        return None
    init = None
    while init is None:
        init = child_of(p.pid)
    rss_before = vm_kb(init, "VmRSS") or 0
    peak = [vm_kb(init, "VmHWM") or 0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            v = vm_kb(init, "VmHWM")
            if v is not None:
                peak[0] = max(peak[0], v)
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    began = time.monotonic()
    os.kill(init, signal.SIGTERM)
    _, status = os.waitpid(p.pid, 0)
    took = time.monotonic() - began
    done.set()
    t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    return {"seconds": took, "rss_before_kb": rss_before, "peak_kb": peak[0],
            "exit": p.returncode, "stderr": err[-300:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lastcall", action="append", default=[], help="NAME=PATH (repeatable)")
    ap.add_argument("--only", default="", help="comma-separated contender names")
    ap.add_argument("--out")
    ap.add_argument("--plot")
    ap.add_argument("--replot", help="a results table to draw again (with --plot)")
    a = ap.parse_args()
    if a.replot:
        return replot(a.replot, a.plot)
    lcs = [x.split("=", 1) for x in a.lastcall] or [
        ("lastcall", os.path.join(ROOT, "build", "static", "lastcall"))]
    inits = [("tini -g", ["tini", "-g", "--"]), ("dumb-init", ["dumb-init", "--"]),
             ("catatonit -g", ["catatonit", "-g", "--"])]
    for name, path in lcs:
        inits += [(f"{name} (cgroup)", [path, "--tracker", "cgroup", "--"]),
                  (f"{name} (proc)", [path, "--tracker", "proc", "--"])]
    if a.only:
        inits = [i for i in inits if i[0] in a.only.split(",")]
    results = {name: [] for name, _ in inits}
    with tempfile.TemporaryDirectory(prefix="lc-teardown-") as tmp:
        sleepers = os.path.join(tmp, "sleepers")
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-o", sleepers,
                        os.path.join(HERE, "src", "sleepers.c")], check=True)
        for r in range(a.runs):
            for k in range(len(inits)):
                name, argv = inits[(r + k) % len(inits)]
                res = one_run(argv, a.processes, sleepers, tmp)
                if res is None or res["exit"] not in (0, 143, 128 + 15):
                    log(name, "failed:", res)
                if res is not None:
                    results[name].append(res)
                    log(name, f"{res['seconds']:.2f} s", f"peak {res['peak_kb']} KiB",
                        "exit", res["exit"])
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    lines = [f"# Teardown of {a.processes} processes ({datetime.date.today()})", "",
             f"`bench/teardown.py --processes {a.processes} --runs {a.runs}`: each init as PID 1 "
             f"of its own PID namespace over {a.processes} processes in pause(); SIGTERM to the "
             "init, time until the namespace is empty. "
             f"{os.cpu_count()} CPUs, load average at the end {load}.", "",
             "| init | runs | median (s) | min (s) | max (s) | RSS before (KiB) | peak RSS (KiB) "
             "| bytes per process |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for name, _ in inits:
        rs = results[name]
        if not rs:
            lines.append(f"| {name} | 0 | - | - | - | - | - | - |")
            continue
        secs = [x["seconds"] for x in rs]
        before = statistics.median(x["rss_before_kb"] for x in rs)
        peak = statistics.median(x["peak_kb"] for x in rs)
        per = (peak - before) * 1024 / a.processes
        rows.append((name, statistics.median(secs), min(secs), max(secs)))
        lines.append(f"| {name} | {len(rs)} | {statistics.median(secs):.2f} | {min(secs):.2f} | "
                     f"{max(secs):.2f} | {before:.0f} | {peak:.0f} | {per:.0f} |")
    text = emit(lines, a.out)
    if a.plot:
        plot(rows, a.plot, a.processes)

if __name__ == "__main__":
    main()
