#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""lastcall against tini, dumb-init and catatonit, in one run, alternating them (issue 8).

Usage: bench/run.py [--quick] [--out bench/results] [--lastcall PATH] [--lastcall-static PATH]
                    [--lastcall-origin TEXT] [--extra NAME=PATH ...] [--reap-sizes 2000,16384]
                    [--only startup,sigfwd,reap,drain,escalate,idle,scale,forkbomb] [--profile]
--extra adds another lastcall binary (an earlier build: before/after in the same run).
Environment: QUICK=1 is --quick. Writes <out>/<date>.md and <out>/<date>-*.png (gnuplot).

The timing loops live in small C programs (bench/src/*.c) that this script compiles with cc, so
that Python's own start-up and scheduling do not sit inside the measured intervals.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


def pct(values, p):
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def med(values):
    return statistics.median(values) if values else float("nan")


def nproc_limit():
    import resource
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


# ---------------------------------------------------------------- set-up

def build_helpers(bindir):
    os.makedirs(bindir, exist_ok=True)
    out = {}
    for name in ("lcbench", "sigchild", "orphans", "tree", "forkbomb"):
        src = os.path.join(HERE, "src", name + ".c")
        exe = os.path.join(bindir, name)
        if not os.path.exists(exe) or os.path.getmtime(exe) < max(
                os.path.getmtime(src), os.path.getmtime(os.path.join(HERE, "src", "common.h"))):
            subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-o", exe, src, "-lm"], check=True)
        out[name] = exe
    return out


def find_static(explicit):
    if explicit:
        return explicit, "given on the command line"
    p = os.path.join(ROOT, "build", "static", "lastcall")
    if os.path.exists(p) and "statically linked" in sh(["file", "-L", p]):
        return p, "build/static/lastcall"
    return None, "no static build: build/static/lastcall does not exist (`make static`)"


class Init:
    """One contender. spec(): argv prefix as a subreaper (not PID 1), forwarding to the child;
    group(): forwarding to the child's process group (for the drain case); pid1(): as PID 1."""

    def __init__(self, name, plain, group=None, pid1=None, lastcall=False, binary=None,
                 hot_path_only=False):
        self.name, self.plain = name, plain
        self.group_spec = group or plain
        self.pid1_spec = pid1 or plain
        self.lastcall, self.binary = lastcall, binary or shutil.which(plain[0])
        # Measured in start-up, forward latency and memory only (another way of invoking a
        # binary already measured: its reaping, drain and escalation are that binary's).
        self.hot_path_only = hot_path_only


def contenders(lc, lc_static, extras=(), link_dir=None):
    """The peers and lastcall. With link_dir, also the two other ways a container invokes
    lastcall: as the drop-in (a symlink named tini, as `docker run --init` and `COPY lastcall
    /sbin/tini` run it, with tini's own flags) and with options (lastcall's option parser, which
    a bare `lastcall -- CMD` never builds)."""
    inits = [
        Init("tini", ["tini", "-s", "--"], ["tini", "-s", "-g", "--"], ["tini", "--"]),
        Init("dumb-init", ["dumb-init", "--"]),
        Init("catatonit", ["catatonit", "--"], ["catatonit", "-g", "--"]),
        Init("lastcall", [lc, "--"], lastcall=True, binary=lc),
        Init("lastcall-proc", [lc, "--tracker", "proc", "--"], lastcall=True, binary=lc),
    ]
    if lc_static:
        inits += [
            Init("lastcall-static", [lc_static, "--"], lastcall=True, binary=lc_static),
            Init("lastcall-static-proc", [lc_static, "--tracker", "proc", "--"], lastcall=True,
                 binary=lc_static),
        ]
    for name, path in extras:
        inits.append(Init(name, [path, "--"], lastcall=True, binary=path))
    if link_dir:
        tini = os.path.join(link_dir, "tini")
        os.symlink(lc, tini)
        inits += [
            Init("lastcall-as-tini", [tini, "-s", "--"], [tini, "-s", "-g", "--"], [tini, "--"],
                 lastcall=True, binary=lc, hot_path_only=True),
            Init("lastcall-options", [lc, "--grace", "10s", "--kill-scope", "tree", "--"],
                 lastcall=True, binary=lc, hot_path_only=True),
        ]
    return inits


def run_driver(bins, args, specs):
    argv = [bins["lcbench"]] + [str(a) for a in args] + ["--"]
    for i, s in enumerate(specs):
        if i:
            argv.append("@@")
        argv += s
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.stderr.strip():
        log("driver:", p.stderr.strip()[:2000])
    rows = [line.split() for line in p.stdout.splitlines() if line.strip()]
    return rows


# ---------------------------------------------------------------- cases

def case_startup(bins, inits, runs):
    specs = [[]] + [i.plain for i in inits]
    names = ["/bin/true (bare)"] + [i.name for i in inits]
    rows = run_driver(bins, ["startup", runs], specs)
    res = {}
    for idx, name in enumerate(names):
        v = [int(r[2]) / 1e6 for r in rows if int(r[1]) == idx]
        res[name] = {"n": len(v), "median": med(v), "p95": pct(v, 95)}
    return res


def case_sigfwd(bins, inits, runs, tmp):
    specs = [i.plain for i in inits]
    rows = run_driver(bins, ["sigfwd", runs, 5, bins["sigchild"], os.path.join(tmp, "sig.fifo")],
                      specs)
    res = {}
    for idx, i in enumerate(inits):
        v = [int(r[2]) / 1e3 for r in rows if int(r[1]) == idx]
        res[i.name] = {"n": len(v), "median": med(v), "p99": pct(v, 99)}
    return res


def case_reap(bins, inits, sizes, reps):
    res = {i.name: {} for i in inits}
    for n in sizes:
        samples = {i.name: [] for i in inits}
        cpu = {i.name: [] for i in inits}
        # Creating the big tree dominates (tens of seconds on a busy 2-core VM): above 16,384
        # one run each.
        for r in range(reps if n <= 16384 else 1):
            for k in range(len(inits)):
                i = inits[(r + k) % len(inits)]
                cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + i.pid1_spec + [
                    bins["orphans"], str(n)]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                m = re.search(r"reaped (\d+) (\d+) .*init_cpu_ns (\d+)", p.stdout)
                if p.returncode != 0 or not m:
                    log("reap", i.name, n, "failed:", p.returncode, p.stdout[-300:], p.stderr[-300:])
                    continue
                samples[i.name].append(int(m.group(1)) / (int(m.group(2)) / 1e9))
                cpu[i.name].append(int(m.group(3)) / 1e3 / int(m.group(1)))
        for name, v in samples.items():
            res[name][n] = {"n": len(v), "median": med(v), "cpu_us": med(cpu[name])}
        log("reap", n, {k: fmt(v[n]["median"], 0) for k, v in res.items()})
    return res


def case_drain(bins, inits, n, iters, tmp):
    specs = [i.group_spec for i in inits]
    rows = run_driver(bins, ["drain", n, iters, bins["tree"], tmp], specs)
    res = {}
    for idx, i in enumerate(inits):
        rs = [r for r in rows if int(r[1]) == idx]
        res[i.name] = {
            "n": len(rs),
            "total": med([int(r[2]) / 1e6 for r in rs]),
            "slowest": med([int(r[3]) / 1e6 for r in rs]),
            "overhead": med([int(r[4]) / 1e6 for r in rs]),
            "overhead_max": max([int(r[4]) / 1e6 for r in rs], default=float("nan")),
            "alive": max([int(r[5]) for r in rs], default=0),
        }
    return res


def case_escalate(bins, inits, n, iters, tmp):
    lcs = [i for i in inits if i.lastcall]
    specs = [[i.plain[0], "--grace", "1s"] + i.plain[1:] for i in lcs]
    rows = run_driver(bins, ["escalate", n, iters, 1000, bins["tree"], tmp], specs)
    res = {}
    for idx, i in enumerate(lcs):
        rs = [r for r in rows if int(r[1]) == idx]
        if not rs:
            continue
        before = med([int(r[3]) for r in rs])
        peak = med([max(int(r[4]), int(r[5])) for r in rs])
        res[i.name] = {
            "n": len(rs),
            "after_grace": med([int(r[2]) / 1e6 for r in rs]),
            "after_grace_max": max(int(r[2]) / 1e6 for r in rs),
            "rss_before": before, "rss_peak": peak,
            "per_proc_bytes": (peak - before) * 1024 / n,
        }
    return res


def case_scale(bins, lc, sizes, tmp):
    """Memory and time against the number of tracked descendants (lastcall, default tracker):
    the drain (every member exits 0-50 ms after its SIGTERM) and the escalation (every member
    ignores SIGTERM, --grace 1s) of trees of each size, one run each."""
    out = {}
    for n in sizes:
        d = run_driver(bins, ["drain", n, 1, bins["tree"], tmp], [[lc, "--"]])
        e = run_driver(bins, ["escalate", n, 1, 1000, bins["tree"], tmp], [[lc, "--grace", "1s", "--"]])
        row = {}
        if d:
            row.update(drain_total=int(d[0][2]) / 1e6, drain_overhead=int(d[0][4]) / 1e6)
        if e:
            r = e[0]
            row.update(esc_after_grace=int(r[2]) / 1e6, rss_before=int(r[3]),
                       rss_peak=max(int(r[4]), int(r[5])))
        out[n] = row
        log("scale", n, row)
    return out


def case_forkbomb(bins, lc, lc_static, runs, tmp):
    """A fork bomb (every process forks forever, retrying refused forks) under `--grace 2s`,
    SIGTERM once it started: time from the SIGTERM to the init's exit, alternated run by run with
    the kernel's floor (a minimal C subreaper: kill(-pgid, SIGKILL) of the same bomb and
    waitpid(-1) until ECHILD). The bomb's user is limited to 2,000 processes; with the /proc
    tracker lastcall runs as that user too (no cgroup to kill), with the cgroup tracker as root
    (`--user`). Peers: n/a (they never kill the tree)."""
    uid = 40000 + os.getpid() % 20000
    # The bomb runs as another user: it must be able to execute the driver and open the FIFO.
    os.chmod(tmp, 0o755)
    os.chmod(os.path.dirname(bins["forkbomb"]), 0o755)
    fifo = os.path.join(tmp, "bomb.fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    # lastcall's own report dates each transition: its timeline beside the driver's clock.
    rdir = os.path.join(tmp, "forkbomb-report")
    os.makedirs(rdir, exist_ok=True)
    os.chmod(rdir, 0o777)
    report = os.path.join(rdir, "report.json")
    grace = ["--grace", "2s", "--report", report]
    cases = [("kernel floor", ["floor", uid, 2000, 2000, 1, fifo])]
    cases.append(("lastcall-proc", ["init", uid, 2000, fifo, 1, "--", lc, "--tracker", "proc"]
                  + grace + ["--"]))
    if lc_static:
        cases.append(("lastcall-static-proc", ["init", uid, 2000, fifo, 1, "--", lc_static,
                                               "--tracker", "proc"] + grace + ["--"]))
    if own_cgroup_writable():
        cases.append(("lastcall (cgroup)", ["init-root", uid, 2000, fifo, 1, "--", lc,
                                            "--tracker", "cgroup", "--user", f"{uid}:{uid}"]
                      + grace + ["--"]))
    res = {name: [] for name, _ in cases}
    for run in range(runs):
        for name, args in cases:
            if os.path.exists(report):
                os.unlink(report)
            p = subprocess.run([bins["forkbomb"]] + [str(x) for x in args], capture_output=True,
                               text=True, timeout=300)
            for line in p.stdout.splitlines():
                f = line.split()
                ns, left = int(f[2]), int(f[4])
                after = ns / 1e9 - (0 if f[0] == "floor" else 2.0)
                status = int(f[3])
                code = (status >> 8) if f[0] == "init" else 0
                row = {"after_grace": after, "left": left, "code": code}
                if f[0] == "init":
                    row.update(report_timeline(report))
                if len(f) >= 7 and int(f[5]) >= 0:
                    row.update(cpu_after_grace=int(f[5]) / 1e9,
                               runqueue_after_grace=int(f[6]) / 1e9)
                res[name].append(row)
            if p.returncode != 0:
                log("forkbomb:", name, p.stderr.strip()[:500])
        log("forkbomb run", run, {k: round(v[-1]["after_grace"], 3) for k, v in res.items() if v})
    return res


def slowest_sched(rows):
    slow = max(rows, key=lambda r: r["after_grace"])
    if "cpu_after_grace" not in slow:
        return "–"
    return f"{slow['cpu_after_grace']:.3f} / {slow['runqueue_after_grace']:.3f}"


def report_timeline(path):
    """From lastcall's report: when its grace ended (forcing) and when it had reaped the tree
    (stopped), in seconds after the grace's nominal end (trigger + 2 s)."""
    try:
        with open(path) as f:
            tr = {t["state"]: t["at"] for t in json.load(f)["transitions"]}
        at = {k: datetime.datetime.strptime(v, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
              for k, v in tr.items()}
        t0 = at["draining"] + 2.0
        return {"forcing_late": at["forcing"] - t0, "stopped_after_grace": at["stopped"] - t0}
    except (OSError, ValueError, KeyError):
        return {}


def own_cgroup_writable():
    try:
        out = subprocess.run(["findmnt", "-n", "-t", "cgroup2", "-o", "TARGET"],
                             capture_output=True, text=True).stdout.split()
        return os.geteuid() == 0 and bool(out)
    except OSError:
        return False


def gnuplot_lines(path, title, xlabel, ylabel, points, series):
    """points: [(x, [y per series])]."""
    if not shutil.which("gnuplot"):
        return False
    dat = path + ".dat"
    with open(dat, "w") as f:
        for x, ys in points:
            f.write("%g %s\n" % (x, " ".join("%g" % (y if y == y else 0) for y in ys)))
    plots = ", ".join('"%s" using 1:%d with linespoints title "%s"' % (dat, k + 2, c)
                      for k, c in enumerate(series))
    script = f"""
set terminal pngcairo size 900,480 font "sans,10"
set output "{path}"
set title "{title}"
set xlabel "{xlabel}"
set ylabel "{ylabel}"
set grid
set key top left
set yrange [0:*]
plot {plots}
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    os.unlink(dat)
    if r.returncode != 0:
        log("gnuplot:", r.stderr[:500])
    return r.returncode == 0


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def proc_cpu_ns(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def proc_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def evict_page_cache(program):
    """Drops a binary's pages from the page cache (those not mapped by a running process).

    On kernels with large page-cache folios (6.18 here) one fault maps the whole folio around
    it, so VmHWM depends on how the file came into the cache: a copy just written by objcopy
    keeps the folios of its writes (512 KiB-1 MiB seen), an executable read by exec gets
    readahead's. Evicted first, every contender is measured as exec's readahead loads it."""
    path = program if os.path.sep in program else shutil.which(program)
    if not path:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def case_idle(inits, seconds):
    """All contenders idle side by side (each with a sleeping child) for `seconds`: wakeups
    (voluntary context switches), CPU time, and memory sampled after start-up."""
    procs = {}
    for i in inits:
        evict_page_cache(i.plain[0])
        procs[i.name] = subprocess.Popen(i.plain + ["sleep", str(seconds + 60)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(2)
    start, res = {}, {}
    for name, p in procs.items():
        st = proc_status(p.pid)
        res[name] = {
            "hwm_kb": int(st["VmHWM"].split()[0]), "rss_kb": int(st["VmRSS"].split()[0]),
            "anon_kb": int(st.get("RssAnon", "0 kB").split()[0]), "pss_kb": pss_kb(p.pid),
        }
        start[name] = (int(st["voluntary_ctxt_switches"]), int(st["nonvoluntary_ctxt_switches"]),
                       proc_cpu_ns(p.pid), proc_ticks(p.pid))
    time.sleep(seconds)
    hz = os.sysconf("SC_CLK_TCK")
    for name, p in procs.items():
        st = proc_status(p.pid)
        v0, n0, c0, t0 = start[name]
        res[name].update({
            "vol": int(st["voluntary_ctxt_switches"]) - v0,
            "nonvol": int(st["nonvoluntary_ctxt_switches"]) - n0,
            "cpu_us": (proc_cpu_ns(p.pid) - c0) / 1e3,
            "ticks_ms": (proc_ticks(p.pid) - t0) * 1000 / hz,
        })
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for name, p in procs.items():
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return res


def case_profile(lc, tmp):
    """callgrind of `lastcall -- /bin/true`: the top functions by inclusive instruction count."""
    if not shutil.which("valgrind"):
        return None
    out = os.path.join(tmp, "callgrind.out")
    subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, lc, "--",
                    "/bin/true"], capture_output=True)
    if not os.path.exists(out):
        return None
    txt = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], capture_output=True,
                         text=True).stdout
    lines = [l for l in txt.splitlines() if re.match(r"^\s*[\d,]+ ", l)]
    return "\n".join(lines[:25])


# ---------------------------------------------------------------- report

def gnuplot_bars(path, title, ylabel, rows, cols, logscale=False):
    """rows: [(label, [values per col])]; cols: series names."""
    if not shutil.which("gnuplot"):
        return False
    dat = path + ".dat"
    with open(dat, "w") as f:
        for label, vals in rows:
            f.write('"%s" %s\n' % (label, " ".join("%g" % (v if v == v else 0) for v in vals)))
    plots = ", ".join('"%s" using %d:xtic(1) title "%s"' % (dat, k + 2, c)
                      for k, c in enumerate(cols))
    script = f"""
set terminal pngcairo size 900,480 font "sans,10"
set output "{path}"
set title "{title}"
set ylabel "{ylabel}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -25
set key top left
set yrange [0:*]
{"set logscale y" if logscale else ""}
plot {plots}
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    os.unlink(dat)
    if r.returncode != 0:
        log("gnuplot:", r.stderr[:500])
    return r.returncode == 0


def machine_basics():
    """CPU, cores, kernel, memory and commit: what every report of bench/ names (ledger.py too)."""
    info = {}
    with open("/proc/cpuinfo") as f:
        cpu = f.read()
    m = re.search(r"model name\s*:\s*(.*)", cpu)
    info["cpu"] = m.group(1) if m else platform.processor()
    info["cores"] = len(re.findall(r"^processor\s*:", cpu, re.M))
    info["uname"] = " ".join(os.uname())
    with open("/proc/meminfo") as f:
        info["mem"] = f.readline().split(":")[1].strip()
    try:
        info["commit"] = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "include"]).strip()
        info["commit"] += " (src/include modified in the working tree)" if dirty else ""
    except Exception:
        info["commit"] = "?"
    return info


def machine():
    info = machine_basics()
    vers = []
    for p in ("tini", "dumb-init", "catatonit"):
        try:
            vers.append(p + " " + sh(["dpkg-query", "-W", "-f=${Version}", p]))
        except Exception:
            vers.append(p + " ?")
    info["peers"] = ", ".join(vers)
    return info


def describe_binary(path):
    """sha256 prefix, linkage, stripped or not, and the NEEDED libraries."""
    import hashlib
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    ftext = sh(["file", "-L", path])
    link = "static" if "statically linked" in ftext else "dynamic"
    stripped = "stripped" if ", stripped" in ftext else "not stripped"
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", sh(["readelf", "-d", path])) if link == "dynamic" else []
    return f"sha256 {digest}…, {link}, {stripped}" + (f", NEEDED {' '.join(needed)}" if needed else "")


def fmt(v, nd=2):
    if v is None or v != v:
        return "–"
    return f"{v:,.{nd}f}"


def verdict(ok):
    return "**met**" if ok else "**missed**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", default=os.environ.get("QUICK") == "1")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--lastcall", default=os.environ.get("LASTCALL",
                                                         os.path.join(ROOT, "build-bench", "lastcall")))
    ap.add_argument("--lastcall-static", default=os.environ.get("LASTCALL_STATIC_BIN"))
    ap.add_argument("--only", default="startup,sigfwd,reap,drain,escalate,idle,scale,forkbomb")
    ap.add_argument("--lastcall-origin", default=os.environ.get("LASTCALL_ORIGIN", ""),
                    help="where the binary came from (the .deb), for the report")
    ap.add_argument("--extra", action="append", default=[],
                    help="NAME=PATH: one more lastcall binary to measure beside the others")
    ap.add_argument("--reap-sizes", default="")
    ap.add_argument("--scale-sizes", default="")
    ap.add_argument("--profile", action="store_true", default=os.environ.get("PROFILE") == "1")
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""))
    a = ap.parse_args()
    only = set(a.only.split(","))
    q = a.quick
    P = {
        "startup_runs": 30 if q else 300,
        "sigfwd_runs": 30 if q else 300,
        "reap_sizes": [500, 2000] if q else [2000, 16384],
        "reap_reps": 1 if q else 3,
        "drain_n": 200 if q else 1000, "drain_iters": 2 if q else 10,
        "esc_n": 1000 if q else 10000, "esc_iters": 1 if q else 3,
        "idle_s": 5 if q else 30,
        "scale_sizes": [250, 1000] if q else [1000, 2500, 5000, 10000],
        "forkbomb_runs": 2 if q else 20,
    }
    if a.reap_sizes:
        P["reap_sizes"] = [int(x) for x in a.reap_sizes.split(",")]
    if a.scale_sizes:
        P["scale_sizes"] = [int(x) for x in a.scale_sizes.split(",")]
    # The machine must hold the escalation tree (plus everything else running on it).
    limits = {
        "pid_max": int(open("/proc/sys/kernel/pid_max").read()),
        "threads_max": int(open("/proc/sys/kernel/threads-max").read()),
        "ulimit_u": nproc_limit(),
    }
    cap = min(limits.values()) - 4096  # room for the rest of the machine
    notes = []
    for key in ("esc_n", "drain_n"):
        if P[key] > cap:
            notes.append(f"{key} scaled down from {P[key]} to {cap} (pid_max/threads-max/ulimit -u)")
            P[key] = cap
    P["reap_sizes"] = [min(s, cap) for s in P["reap_sizes"]]
    P["scale_sizes"] = [min(s, cap) for s in P["scale_sizes"]]

    lc = os.path.abspath(a.lastcall)
    if not os.access(lc, os.X_OK):
        sys.exit(f"no lastcall binary at {lc} (build it, or pass --lastcall)")
    lc_static, static_note = find_static(a.lastcall_static)
    if not lc_static:
        notes.append(static_note)
    tmp = tempfile.mkdtemp(prefix="lastcall-bench-")
    bins = build_helpers(os.path.join(tmp, "bin"))
    extras = [tuple(e.split("=", 1)) for e in a.extra]
    link_dir = os.path.join(tmp, "links")
    os.mkdir(link_dir)
    inits = contenders(lc, lc_static, [(n, os.path.abspath(p)) for n, p in extras], link_dir)
    # The binaries themselves: every way of invoking lastcall measures reaping, drain and
    # escalation once (the static twin of the .deb's binary is the same file).
    whole = [i for i in inits if "static" not in i.name and not i.hot_path_only]
    results = {"params": P, "limits": limits}
    t_start = time.time()
    if "startup" in only:
        log("start-up:", P["startup_runs"], "runs each")
        results["startup"] = case_startup(bins, inits, P["startup_runs"])
    if "sigfwd" in only:
        log("signal forward:", P["sigfwd_runs"], "runs each")
        results["sigfwd"] = case_sigfwd(bins, inits, P["sigfwd_runs"], tmp)
    if "reap" in only:
        log("reaping as PID 1:", P["reap_sizes"])
        results["reap"] = case_reap(bins, whole,
                                    P["reap_sizes"], P["reap_reps"])
    if "drain" in only:
        log("drain:", P["drain_n"], "processes x", P["drain_iters"])
        results["drain"] = case_drain(bins, whole,
                                      P["drain_n"], P["drain_iters"], tmp)
    if "escalate" in only:
        log("escalation:", P["esc_n"], "processes x", P["esc_iters"])
        results["escalate"] = case_escalate(bins, whole,
                                            P["esc_n"], P["esc_iters"], tmp)
    if "idle" in only:
        log("idle:", P["idle_s"], "s")
        results["idle"] = case_idle(inits, P["idle_s"])
    if "scale" in only:
        log("scale:", P["scale_sizes"])
        results["scale"] = case_scale(bins, lc, P["scale_sizes"], tmp)
    if "forkbomb" in only:
        if os.geteuid() != 0:
            notes.append("forkbomb skipped: it needs root to run the bomb as a limited user")
        else:
            log("fork bomb:", P["forkbomb_runs"], "runs each")
            results["forkbomb"] = case_forkbomb(bins, lc, lc_static, P["forkbomb_runs"], tmp)
    if a.profile:
        log("callgrind of lastcall -- /bin/true")
        results["profile"] = case_profile(lc, tmp)
    results["elapsed"] = time.time() - t_start
    write_report(a, results, inits, notes, lc, lc_static)
    shutil.rmtree(tmp, ignore_errors=True)


def write_report(a, R, inits, notes, lc, lc_static):
    os.makedirs(a.out, exist_ok=True)
    stamp = datetime.date.today().isoformat() + ("-quick" if a.quick else "")
    base = os.path.join(a.out, stamp)
    M = machine()
    P = R["params"]
    md = [f"# lastcall benchmark, {stamp}", ""]
    md += ["Generated by `make bench` (bench/run.py); every contender measured in the same run, "
           "alternating run by run.", ""]
    md += ["## Machine", "",
           f"- CPU: {M['cpu']} ({M['cores']} cores in /proc/cpuinfo), memory {M['mem']}",
           f"- `uname -a`: {M['uname']}",
           f"- lastcall commit {M['commit']}",
           f"- `lastcall`: `{os.path.relpath(lc, ROOT)}`" + (f" from {a.lastcall_origin}" if a.lastcall_origin else "")
           + f", {os.path.getsize(lc):,} bytes, {describe_binary(lc)}",
           (f"- `lastcall-static`: `{os.path.relpath(lc_static, ROOT)}`, {os.path.getsize(lc_static):,} bytes, "
            f"{describe_binary(lc_static)}" if lc_static else "- `lastcall-static`: none"),
           ] + [f"- `{i.name}`: `{i.binary}`, {os.path.getsize(i.binary):,} bytes, {describe_binary(i.binary)}"
                for i in inits if i.lastcall and i.binary not in (lc, lc_static)] + [
           f"- `{i.name}`: `lastcall` invoked as `" + " ".join(
               [os.path.basename(i.plain[0])] + i.plain[1:]) + " CMD`" +
           (" (a symlink named tini)" if os.path.islink(i.plain[0]) else "")
           for i in inits if i.hot_path_only] + [
           f"- peers (Debian): {M['peers']}",
           f"- limits: pid_max {R['limits']['pid_max']}, threads-max {R['limits']['threads_max']}, "
           f"ulimit -u {R['limits']['ulimit_u']}",
           f"- mode: {'QUICK (smoke run, small sizes)' if a.quick else 'full'}; "
           f"whole run {R['elapsed']:.0f} s", ""]
    if a.note:
        md += [a.note, ""]
    for n in notes:
        md.append(f"- note: {n}")
    if notes:
        md.append("")
    targets = []

    if "startup" in R:
        S = R["startup"]
        bare, tini = S["/bin/true (bare)"]["median"], S["tini"]["median"]
        md += [f"## 1. Start-up: `INIT -- /bin/true` ({P['startup_runs']} runs each)", "",
               "Wall time from spawn to reaped exit, stdout/stderr to /dev/null. Overhead = median "
               "minus bare /bin/true's median.", "",
               "| init | median ms | p95 ms | overhead ms | overhead x catatonit |",
               "|---|---:|---:|---:|---:|"]
        cat_over = S["catatonit"]["median"] - bare
        for name, s in S.items():
            md.append(f"| {name} | {fmt(s['median'], 3)} | {fmt(s['p95'], 3)} | "
                      f"{fmt(s['median'] - bare, 3)} | {fmt((s['median'] - bare) / cat_over)} |")
        cat = S["catatonit"]["median"] - bare
        for name in [i.name for i in inits if i.lastcall]:
            over = S[name]["median"] - bare
            targets.append((f"start-up overhead {name} <= catatonit's",
                            f"{over:.3f} vs {cat:.3f} ms ({over / cat:.2f}x)", over <= cat))
        gnuplot_bars(base + "-startup.png", "Start-up: INIT -- /bin/true", "ms",
                     [(k, [v["median"], v["p95"]]) for k, v in S.items()], ["median", "p95"])
        md += ["", f"![start-up]({os.path.basename(base)}-startup.png)", ""]

    if "idle" in R:
        I = R["idle"]
        md += ["## 2. Memory and binary size", "",
               "Sampled 2 s after start with a sleeping child, each binary evicted from the "
               "page cache first (exec's readahead loads it). VmHWM is the peak RSS; "
               "PSS shares library pages among their users.", "",
               "| init | binary bytes | linkage | VmHWM KiB | VmRSS KiB | RssAnon KiB | PSS KiB |",
               "|---|---:|---|---:|---:|---:|---:|"]
        for i in inits:
            x = I[i.name]
            size = os.path.getsize(i.binary)
            link = "static" if "statically linked" in sh(["file", "-L", i.binary]) else "dynamic"
            md.append(f"| {i.name} | {size:,} | {link} | {x['hwm_kb']:,} | {x['rss_kb']:,} | "
                      f"{x['anon_kb']:,} | {x['pss_kb']:,} |")
        for i in inits:
            if i.lastcall:
                static = "statically linked" in sh(["file", "-L", i.binary])
                limit = 1024 if static else 1536
                hwm = I[i.name]["hwm_kb"]
                targets.append((f"peak RSS {i.name} <= {limit / 1024:.1f} MiB",
                                f"{hwm / 1024:.2f} MiB", hwm <= limit))
        gnuplot_bars(base + "-memory.png", "Peak RSS of the idle init (VmHWM)", "KiB",
                     [(i.name, [I[i.name]["hwm_kb"], I[i.name]["pss_kb"]]) for i in inits],
                     ["VmHWM", "PSS"])
        md += ["", f"![memory]({os.path.basename(base)}-memory.png)", ""]

    if "sigfwd" in R:
        S = R["sigfwd"]
        md += [f"## 3. Signal-forward latency ({P['sigfwd_runs']} runs each)", "",
               "From just before `kill(init, SIGTERM)` to CLOCK_MONOTONIC in the child's handler "
               "(5 ms after the child reported ready). For lastcall SIGTERM starts the shutdown, "
               "so this is its whole path to the stop signal.", "",
               "| init | median µs | p99 µs |", "|---|---:|---:|"]
        for name, s in S.items():
            md.append(f"| {name} | {fmt(s['median'], 1)} | {fmt(s['p99'], 1)} |")
        best = min(S[p]["median"] for p in ("tini", "dumb-init", "catatonit"))
        for name in [i.name for i in inits if i.lastcall]:
            ok = S[name]["median"] <= best
            targets.append((f"forward latency {name} median <= best peer",
                            f"{S[name]['median']:.0f} vs {best:.0f} µs", ok))
        gnuplot_bars(base + "-sigfwd.png", "SIGTERM forward latency", "µs",
                     [(k, [v["median"], v["p99"]]) for k, v in S.items()], ["median", "p99"])
        md += ["", f"![signal forward]({os.path.basename(base)}-sigfwd.png)", ""]

    if "reap" in R:
        Rp = R["reap"]
        sizes = P["reap_sizes"]
        md += ["## 4. Reaping throughput as PID 1", "",
               "`unshare --pid --fork --mount-proc INIT -- orphans N`: N double-forked grandchildren "
               "block on a pipe; when it closes they all exit and become zombies of PID 1. Time from "
               "the close until every one of them is gone (`kill(pid, 0)` fails), and the CPU time "
               "PID 1 used meanwhile (/proc/1/schedstat, ns), per orphan; "
               f"median of {P['reap_reps']} runs (1 run above 16,384). Most of the wall time is "
               "the kernel tearing the exiting processes down, which every init waits for; the CPU "
               "column is what the init itself spends.", "",
               "| init | " + " | ".join(f"{n:,} orphans: reaped/s | init CPU µs/orphan"
                                        for n in sizes) + " |",
               "|---|" + "---:|---:|" * len(sizes)]
        for name, by in Rp.items():
            md.append(f"| {name} | " + " | ".join(
                f"{fmt(by[n]['median'], 0)} | {fmt(by[n]['cpu_us'], 1)}" for n in sizes) + " |")
        for name in Rp:
            if name.startswith("lastcall"):
                for n in sizes:
                    best = max(Rp[p][n]["median"] for p in ("tini", "dumb-init", "catatonit"))
                    ok = Rp[name][n]["median"] >= best
                    targets.append((f"reap throughput {name} at {n:,} >= best peer",
                                    f"{Rp[name][n]['median'] / best:.2f}x best peer", ok))
        gnuplot_bars(base + "-reap.png", "Orphans reaped per second as PID 1", "orphans/s",
                     [(k, [v[n]["median"] for n in sizes]) for k, v in Rp.items()],
                     [f"{n} orphans" for n in sizes])
        md += ["", f"![reaping]({os.path.basename(base)}-reap.png)", ""]

    if "drain" in R:
        D = R["drain"]
        md += [f"## 5. Drain of a {P['drain_n']:,}-process tree ({P['drain_iters']} runs each)", "",
               "Every member exits 0-50 ms (random) after its SIGTERM and records that moment. "
               "Overhead = the init's exit minus the slowest member's exit. Peers forward to the "
               "child's process group (`tini -g`, `catatonit -g`, dumb-init's default); they exit when "
               "their child does, so a negative overhead means members were still running when the "
               "init was gone.", "",
               "| init | SIGTERM→init exit ms | SIGTERM→slowest exit ms | overhead median ms | "
               "overhead max ms | members alive after init exit (max) |",
               "|---|---:|---:|---:|---:|---:|"]
        for name, d in D.items():
            if d["alive"] > 0:
                md.append(f"| {name} | {fmt(d['total'])} | {fmt(d['slowest'])} | does not wait for the "
                          f"tree | – | {d['alive']:,} |")
            else:
                md.append(f"| {name} | {fmt(d['total'])} | {fmt(d['slowest'])} | {fmt(d['overhead'])} | "
                          f"{fmt(d['overhead_max'])} | 0 |")
        for name, d in D.items():
            if name.startswith("lastcall"):
                targets.append((f"drain overhead {name} <= 20 ms at {P['drain_n']:,}",
                                f"{d['overhead']:.1f} ms", d["overhead"] <= 20 and d["alive"] == 0))
        gnuplot_bars(base + "-drain.png", f"Drain of {P['drain_n']} processes", "ms",
                     [(k, [v["total"], v["slowest"]]) for k, v in D.items()],
                     ["SIGTERM to init exit", "SIGTERM to slowest member exit"])
        md += ["", f"![drain]({os.path.basename(base)}-drain.png)", ""]

    if "escalate" in R:
        E = R["escalate"]
        md += [f"## 6. Escalation: {P['esc_n']:,} descendants ignoring SIGTERM, `--grace 1s` "
               f"({P['esc_iters']} runs)", "",
               "Time from grace expiry (SIGTERM + 1 s) to lastcall's exit; RSS sampled every 20 ms "
               "from SIGTERM to exit. tini, dumb-init and catatonit: **n/a**, no grace escalation "
               "(they forward SIGTERM and wait; the tree is never killed).", "",
               "| init | grace expiry→exit median ms | max ms | RSS before KiB | RSS peak KiB | "
               "bytes per tracked process |", "|---|---:|---:|---:|---:|---:|"]
        for p in ("tini", "dumb-init", "catatonit"):
            md.append(f"| {p} | n/a (no escalation) | – | – | – | – |")
        for name, e in E.items():
            md.append(f"| {name} | {fmt(e['after_grace'])} | {fmt(e['after_grace_max'])} | "
                      f"{e['rss_before']:,} | {e['rss_peak']:,} | {fmt(e['per_proc_bytes'], 0)} |")
            targets.append((f"escalation {name} at {P['esc_n']:,} < 2 s",
                            f"{e['after_grace']:.0f} ms", e["after_grace"] < 2000))
        md.append("")

    if "idle" in R:
        I = R["idle"]
        md += [f"## 7. Idle cost over {P['idle_s']} s", "",
               "Voluntary context switches (each is a wakeup from a blocking wait) and CPU time "
               "(/proc/PID/schedstat; utime+stime from /proc/PID/stat in ticks).", "",
               "| init | wakeups (voluntary cs) | involuntary cs | CPU µs (schedstat) | "
               "utime+stime ms |", "|---|---:|---:|---:|---:|"]
        for i in inits:
            x = I[i.name]
            md.append(f"| {i.name} | {x['vol']} | {x['nonvol']} | {fmt(x['cpu_us'], 1)} | "
                      f"{fmt(x['ticks_ms'], 0)} |")
            if i.lastcall:
                targets.append((f"zero wakeups while idle: {i.name}", str(x["vol"]), x["vol"] == 0))
        md.append("")

    if "scale" in R:
        Sc = R["scale"]
        sizes = sorted(Sc)
        md += ["## 8. Cost per tracked process (lastcall, default tracker, one run per size)", "",
               "Drain: every member exits 0-50 ms after its SIGTERM; overhead = lastcall's exit minus "
               "the slowest member's. Escalation: every member ignores SIGTERM, `--grace 1s`; time from "
               "the grace expiry to lastcall's exit; RSS sampled every 20 ms.", "",
               "| tracked processes | drain total ms | drain overhead ms | escalation after grace ms | "
               "RSS before KiB | RSS peak KiB |", "|---:|---:|---:|---:|---:|---:|"]
        for n in sizes:
            x = Sc[n]
            md.append(f"| {n:,} | {fmt(x.get('drain_total'))} | {fmt(x.get('drain_overhead'))} | "
                      f"{fmt(x.get('esc_after_grace'))} | {x.get('rss_before', 0):,} | "
                      f"{x.get('rss_peak', 0):,} |")
        pts = [(n, Sc[n]) for n in sizes if "rss_peak" in Sc[n]]
        if len(pts) >= 2:
            (n0, a0), (n1, a1) = pts[0], pts[-1]
            per = (a1["rss_peak"] - a0["rss_peak"]) * 1024 / (n1 - n0)
            md += ["", f"Growth of the peak RSS between {n0:,} and {n1:,} processes: "
                       f"**{per:,.0f} bytes per tracked process**."]
        gnuplot_lines(base + "-scale-rss.png", "lastcall peak RSS against tracked processes",
                      "tracked processes", "KiB",
                      [(n, [Sc[n].get("rss_before", float("nan")), Sc[n].get("rss_peak", float("nan"))])
                       for n in sizes], ["RSS before SIGTERM", "RSS peak during the teardown"])
        gnuplot_lines(base + "-scale-time.png", "lastcall teardown time against tracked processes",
                      "tracked processes", "ms",
                      [(n, [Sc[n].get("drain_total", float("nan")),
                            Sc[n].get("esc_after_grace", float("nan"))]) for n in sizes],
                      ["drain: SIGTERM to exit", "escalation: grace expiry to exit"])
        md += ["", f"![scale rss]({os.path.basename(base)}-scale-rss.png)",
               f"![scale time]({os.path.basename(base)}-scale-time.png)", ""]

    if "forkbomb" in R:
        F = R["forkbomb"]
        md += [f"## 9. A fork bomb stopped at the end of a 2 s grace ({P['forkbomb_runs']} runs each)",
               "",
               "Every process of the bomb forks forever and retries a refused fork after 1 ms; its "
               "user is limited to 2,000 processes. SIGTERM once the bomb has started; the table "
               "gives the time from the grace's end (SIGTERM + 2 s) to the init's exit. The kernel "
               "floor, alternated with the others: a minimal C subreaper lets the same bomb run "
               "2 s, then `kill(-pgid, SIGKILL)` and `waitpid(-1)` until ECHILD (no naming of the "
               "processes, no record). With the /proc tracker lastcall runs as the limited user; "
               "with the cgroup tracker as root (`--user`). The driver waits at a real-time "
               "priority (its children at the normal one), so that its own wait for a CPU under "
               "the bomb is not counted. Beside the driver's clock, lastcall's own report: how "
               "late its grace ended (forcing) and when it had reaped the tree (stopped). Peers: "
               "n/a, they never kill a tree. Last column: from the init's schedstat, its time "
               "on a CPU and its time runnable but waiting for one between the grace's end and "
               "its exit, in the slowest run (the floor: from its kill to its last reap).", "",
               "| | after grace median s | p90 s | max s | runs within grace + 1 s | exit code | "
               "processes left (max) | report: grace ended late, max s | report: stopped after "
               "grace, median / max s | slowest run: on a CPU / waiting for one, s |",
               "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for name, rs in F.items():
            if not rs:
                continue
            a_ = [r["after_grace"] for r in rs]
            within = sum(1 for x in a_ if x <= 1.0)
            codes = ",".join(sorted({str(r["code"]) for r in rs})) if name != "kernel floor" else "–"
            late = [r["forcing_late"] for r in rs if "forcing_late" in r]
            stop = [r["stopped_after_grace"] for r in rs if "stopped_after_grace" in r]
            md.append(f"| {name} | {fmt(med(a_), 3)} | {fmt(pct(a_, 90), 3)} | {fmt(max(a_), 3)} | "
                      f"{within}/{len(rs)} | {codes} | {max(r['left'] for r in rs)} | "
                      f"{fmt(max(late), 3) if late else '–'} | "
                      f"{fmt(med(stop), 3) + ' / ' + fmt(max(stop), 3) if stop else '–'} | "
                      f"{slowest_sched(rs)} |")
            if name != "kernel floor":
                ok = within == len(rs) and all(r["left"] == 0 and r["code"] == 137 for r in rs)
                targets.append((f"fork bomb gone within grace + 1 s, reported forced: {name}",
                                f"{within}/{len(rs)} runs, max {max(a_):.2f} s after grace", ok))
        md.append("")

    if R.get("profile"):
        md += ["## Profile: `valgrind --tool=callgrind lastcall -- /bin/true` (inclusive Ir)", "",
               "```", R["profile"], "```", ""]

    md += ["## Targets", "", "| target | measured | |", "|---|---|---|"]
    for t, m, ok in targets:
        md.append(f"| {t} | {m} | {verdict(ok)} |")
    md.append("")
    with open(base + ".md", "w") as f:
        f.write("\n".join(md))
    log("wrote", base + ".md")
    print(base + ".md")


if __name__ == "__main__":
    main()
