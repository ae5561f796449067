#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Claim latency and runs per second of the run ledger, SQLite and PostgreSQL (issue 20).

Usage: bench/ledger.py --tool build/tools/ledger_bench [--jobs 1000] [--fires 5]
                       [--replicas 3] [--lease-ms 30000] [--out bench/results] [--note TEXT]
Writes <out>/<date>-ledger.md.

For each backend (SQLite in a temporary state dir; a real PostgreSQL 15 started by
tests/e2e/pgserver.py on a Unix socket, with fsync ON) and for 1 and then `--replicas` replicas:
that many ledger_bench processes (tests/tools/ledger_bench.cpp) open one fresh ledger, wait until
all of them are open, and are then released together. Each claims every (fire time, job) of the
same grid in the same order (jobs x fires keys: job-0000.., fire times 60 s apart) and completes
every claim it wins at once, so the replicas contend for the same key at the same moment. The
timing is done inside ledger_bench (steady_clock around each claim() call), not here.

Afterwards the ledger itself is checked: every (job, fire time) has exactly one row and it is
completed, the rows per replica equal the claims each replica won, and every job's watermark is
its last fire time.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import pgserver  # noqa: E402
from run import machine_basics  # noqa: E402  (bench/run.py: the same machine lines)

START_AT = 1798761600  # 2027-01-01T00:00:00Z; any fixed time: the grid is start_at + 60 k


def log(*a):
    print("[bench-ledger]", *a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def fmt(v, nd=0):
    if v is None or v != v:
        return "–"
    return f"{v:,.{nd}f}"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fsync_probe(directory, n=100):
    """fdatasync of a 4 KiB append, n times, in `directory`: what one durable commit costs on
    this disk right now (it varies with the other writers of the machine). Median and p99, µs."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    ts = []
    try:
        for i in range(n):
            os.pwrite(fd, b"x" * 4096, i * 4096)
            t = time.perf_counter()
            os.fdatasync(fd)
            ts.append((time.perf_counter() - t) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    ts.sort()
    return {"p50": ts[len(ts) // 2], "p99": ts[min(len(ts) - 1, int(len(ts) * 0.99))]}


# ---------------------------------------------------------------- one run

def run_replicas(tool, location, names, jobs, fires, lease_ms):
    """Starts one ledger_bench per name on `location` (["--state-dir", D] or ["--ledger", URL]),
    releases them together once all are open, returns their JSON results in name order."""
    procs = []
    for name in names:
        argv = [tool] + location + ["--replica", name, "--jobs", str(jobs), "--fires",
                                    str(fires), "--start-at", str(START_AT), "--lease-ms",
                                    str(lease_ms), "--wait"]
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for name, p in zip(names, procs):
        line = p.stdout.readline().strip()
        if line != "ready":
            for q in procs:
                q.kill()
            sys.exit(f"ledger_bench {name} did not open the ledger: {line!r} "
                     f"{p.stderr.read().strip()[:2000]}")
    t0 = time.monotonic()
    for p in procs:  # the go signal: as close together as three writes can be
        p.stdin.write("\n")
        p.stdin.flush()
    results = []
    for name, p in zip(names, procs):
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            sys.exit(f"ledger_bench {name} exited {p.returncode}: {err.strip()[:2000]}")
        if err.strip():
            log(name, "stderr:", err.strip()[:2000])
        lines = [l for l in out.splitlines() if l.startswith("{")]
        results.append(json.loads(lines[-1]))
    wall = time.monotonic() - t0
    return results, wall


# ---------------------------------------------------------------- correctness

CHECK_SQL = """
SELECT
  (SELECT count(*) FROM {runs}) AS rows,
  (SELECT count(*) FROM (SELECT 1 FROM {runs} GROUP BY job, scheduled_at) k) AS keys,
  (SELECT count(*) FROM (SELECT 1 FROM {runs} GROUP BY job, scheduled_at
                         HAVING count(*) = 1 AND min(state) = 'completed'
                            AND max(state) = 'completed') k) AS keys_once_completed,
  (SELECT count(*) FROM {runs} WHERE state <> 'completed') AS not_completed,
  (SELECT count(*) FROM {runs} WHERE retry_of IS NOT NULL) AS retries,
  (SELECT count(*) FROM {watermarks} WHERE scheduled_at = {last}) AS watermarks_at_last,
  (SELECT count(*) FROM {watermarks}) AS watermarks
"""
PER_REPLICA_SQL = "SELECT replica, count(*) FROM {runs} GROUP BY replica ORDER BY replica"


def check_sqlite(state_dir, last):
    db = sqlite3.connect(os.path.join(state_dir, "ledger.sqlite"))
    try:
        cur = db.execute(CHECK_SQL.format(runs="runs", watermarks="watermarks", last=last))
        cols = [d[0] for d in cur.description]
        out = dict(zip(cols, cur.fetchone()))
        out["per_replica"] = dict(db.execute(PER_REPLICA_SQL.format(runs="runs")).fetchall())
        return out
    finally:
        db.close()


def check_postgresql(pg, db, last):
    sql = ("SELECT row_to_json(c) FROM (" +
           CHECK_SQL.format(runs="lastcall.runs", watermarks="lastcall.watermarks", last=last) +
           ") c")
    out = json.loads(pg.psql(db, sql).stdout)
    per = pg.psql(db, "SELECT coalesce(json_object_agg(replica, n), '{}') FROM (" +
                  PER_REPLICA_SQL.format(runs="lastcall.runs") + ") AS r(replica, n)").stdout
    out["per_replica"] = json.loads(per)
    return out


def verdict(check, results, jobs, fires):
    """Problems found in the ledger after a run; empty when it is exactly once."""
    want = jobs * fires
    bad = []
    if check["rows"] != want:
        bad.append(f"{check['rows']} rows, not {want}")
    if check["keys"] != want:
        bad.append(f"{check['keys']} distinct (job, time), not {want}")
    if check["keys_once_completed"] != want:
        bad.append(f"only {check['keys_once_completed']} keys with exactly one completed row")
    if check["not_completed"]:
        bad.append(f"{check['not_completed']} rows not completed")
    if check["retries"]:
        bad.append(f"{check['retries']} retry rows")
    if check["watermarks"] != jobs or check["watermarks_at_last"] != jobs:
        bad.append(f"watermarks: {check['watermarks_at_last']} of {check['watermarks']} at the "
                   f"last fire time (want {jobs})")
    for r in results:
        rows = check["per_replica"].get(r["replica"], 0)
        if rows != r["won"]:
            bad.append(f"{r['replica']}: {rows} rows but {r['won']} claims won")
    won = sum(r["won"] for r in results)
    lost = sum(r["lost"] for r in results)
    errors = sum(r["errors"] for r in results)
    if won != want:
        bad.append(f"{won} claims won in all, not {want}")
    if won + lost + errors != want * len(results):
        bad.append(f"won + lost + errors = {won + lost + errors}, not {want * len(results)}")
    return bad


# ---------------------------------------------------------------- machine

def machine(pg):
    info = machine_basics()
    info["nproc"] = str(info["cores"])
    info["postgres"] = sh([os.path.join(pg.bindir, "postgres"), "--version"]).strip()
    info["sqlite"] = sqlite3.sqlite_version + " (Python's; lastcall links the system libsqlite3)"
    try:
        info["libsqlite3"] = sh(["dpkg-query", "-W", "-f=${Version}", "libsqlite3-0"]).strip()
    except Exception:
        info["libsqlite3"] = "?"
    info["fs"] = sh(["df", "-T", tempfile.gettempdir()]).splitlines()[-1].split()[1]
    return info


def pg_settings(pg, db):
    names = ("fsync", "synchronous_commit", "wal_sync_method", "full_page_writes",
             "shared_buffers", "max_connections")
    out = pg.psql(db, "SELECT json_object_agg(name, setting || coalesce(unit, '')) FROM "
                      "pg_settings WHERE name IN (" + ", ".join(f"'{n}'" for n in names) + ")")
    return json.loads(out.stdout)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="build/tools/ledger_bench")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--fires", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--lease-ms", type=int, default=30000)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""))
    a = ap.parse_args()
    tool = os.path.abspath(a.tool)
    if not os.access(tool, os.X_OK):
        sys.exit(f"no ledger_bench at {tool} (cmake --build BUILD --target ledger_bench)")
    last = START_AT + 60 * (a.fires - 1)
    counts = [1] + ([a.replicas] if a.replicas != 1 else [])

    log("starting PostgreSQL (fsync on)")
    pg = pgserver.PgServer(fsync=True)
    tmp = tempfile.mkdtemp(prefix="lastcall-bench-ledger-")
    runs = []
    t_start = time.time()
    load_before = loadavg()
    try:
        settings_db = pg.new_database()
        settings = pg_settings(pg, settings_db)
        M = machine(pg)
        for backend in ("sqlite", "postgresql"):
            for n in counts:
                names = [f"r{i + 1}" for i in range(n)]
                if backend == "sqlite":
                    state = os.path.join(tmp, f"state-{n}")
                    os.mkdir(state)
                    location = ["--state-dir", state]
                else:
                    db = pg.new_database()
                    location = ["--ledger", pg.url(db)]
                probe = fsync_probe(tmp)
                log(f"{backend}: {n} replica(s), {a.jobs} jobs x {a.fires} fire times "
                    f"(load {loadavg()}, fdatasync p50 {probe['p50']:.0f} µs)")
                results, wall = run_replicas(tool, location, names, a.jobs, a.fires, a.lease_ms)
                check = (check_sqlite(state, last) if backend == "sqlite"
                         else check_postgresql(pg, db, last))
                bad = verdict(check, results, a.jobs, a.fires)
                slowest = max(r["elapsed_s"] for r in results)
                row = {"backend": backend, "replicas": n, "results": results, "wall": wall,
                       "fsync": probe, "load": loadavg(),
                       "check": check, "bad": bad, "slowest": slowest,
                       "runs_per_s": check["rows"] / slowest if slowest else float("nan"),
                       "claims_per_s": sum(r["claims"] for r in results) / slowest
                       if slowest else float("nan")}
                runs.append(row)
                log(f"  {check['rows']} rows in {slowest:.1f} s: {row['runs_per_s']:.0f} runs/s; "
                    + ("exactly once" if not bad else "PROBLEMS: " + "; ".join(bad)))
                for r in results:
                    log(f"  {r['replica']}: won {r['won']} lost {r['lost']} errors {r['errors']} "
                        f"p50 {r['lat_us']['p50']:.0f} p99 {r['lat_us']['p99']:.0f} µs"
                        + (f" first error: {r['first_error']}" if r["first_error"] else ""))
    finally:
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - t_start
    write_report(a, M, settings, runs, elapsed, load_before, loadavg())


def meaning(runs, settings):
    """What the numbers mean, with the measured figures filled in."""
    by = {(r["backend"], r["replicas"]): r for r in runs}
    md = ["## What the numbers mean", ""]
    for backend in ("postgresql", "sqlite"):
        one = by.get((backend, 1))
        many = [r for r in runs if r["backend"] == backend and r["replicas"] > 1]
        if not one:
            continue
        x = one["results"][0]
        per_run = 1e6 / one["runs_per_s"] if one["runs_per_s"] else float("nan")
        if backend == "postgresql":
            text = (f"**PostgreSQL.** Every statement is one round trip over the Unix socket. A "
                    "won claim is six (BEGIN, the job's advisory lock, the taken check, the active "
                    "runs, the INSERT, COMMIT), a lost one four (it stops at the taken check and "
                    "rolls back), `complete()` four (BEGIN, UPDATE, the watermark upsert, COMMIT); "
                    f"each COMMIT waits for the WAL flush (fsync = {settings.get('fsync', '?')}, "
                    f"synchronous_commit = {settings.get('synchronous_commit', '?')}, "
                    f"wal_sync_method = {settings.get('wal_sync_method', '?')}). One replica: "
                    f"claim p50 {fmt(x['lat_us']['p50'])} µs, complete p50 "
                    f"{fmt(x['complete_lat_us']['p50'])} µs, so about {fmt(per_run)} µs and two "
                    f"flushes per fire time: {fmt(one['runs_per_s'])} runs/s.")
            for r in many:
                shares = [y["won"] / max(1, r["check"]["rows"]) for y in r["results"]]
                text += (f" {r['replicas']} replicas: {fmt(r['runs_per_s'])} runs/s "
                         f"({r['runs_per_s'] / one['runs_per_s']:.2f}x one replica). The "
                         "replicas' claims of one key queue on the job's advisory lock, held "
                         "until the winner's COMMIT has flushed, so a lost claim lasts about as "
                         "long as a won one (claim p50 "
                         + ", ".join(f"{fmt(y['lat_us']['p50'])}" for y in r["results"])
                         + " µs). While the winner completes its run the others are already "
                         "claiming the next key, so the wins rotate ("
                         + ", ".join(f"{s * 100:.0f} %" for s in shares) + "), but every key "
                         "still costs one flushed claim and one flushed complete, plus the "
                         "losers' transactions, with the replicas and their server backends "
                         "sharing the machine's cores: more replicas do not make the ledger "
                         "faster, they make each claim wait for the others.")
        else:
            text = ("**SQLite.** WAL with synchronous=FULL: every committed transaction ends "
                    "with an fsync of the WAL. A claim is one BEGIN IMMEDIATE transaction (the "
                    "file's single write lock is taken first, so the taken check and the INSERT "
                    "are one step for every writer), `complete()` is another, so a fire time "
                    f"costs two fsyncs: claim p50 {fmt(x['lat_us']['p50'])} µs, complete p50 "
                    f"{fmt(x['complete_lat_us']['p50'])} µs, {fmt(one['runs_per_s'])} runs/s "
                    f"with one process (the disk's fdatasync p50 was {fmt(one['fsync']['p50'])} "
                    "µs just before).")
            for r in many:
                shares = [y["won"] / max(1, r["check"]["rows"]) for y in r["results"]]
                losers = [y for y in r["results"] if y["won"] < max(z["won"] for z in r["results"])]
                text += (f" {r['replicas']} processes on one file: {fmt(r['runs_per_s'])} runs/s "
                         f"({r['runs_per_s'] / one['runs_per_s']:.2f}x one): every claim, a "
                         "losing one too, takes the one write lock, so the writers are "
                         "serialized: more writers cannot add throughput, their lock turns and "
                         "the wake-ups of the busy handler only take some from the winner. Wins: "
                         + ", ".join(f"{s * 100:.1f} %" for s in shares) + ".")
                if max(shares) > 0.9 and losers:
                    text += (" One process wins almost every key: a writer that finds the lock "
                             "taken sleeps in SQLite's busy handler (1, 2, 5, 10 ... 100 ms "
                             "steps, busy_timeout 5 s), the holder meanwhile claims and "
                             "completes the next keys, and the sleeper wakes to keys already "
                             "taken, which it loses in a lock-and-read with no fsync (p50 "
                             + ", ".join(f"{fmt(y['lat_us']['p50'])} µs" for y in losers)
                             + "), until it catches up and sleeps again. The order of the grid "
                             "makes this a convoy; in lastcall each replica claims a fire time "
                             "once, when it comes, and the first writer wins it.")
                worst = max((y["lat_us"]["max"] for y in losers), default=0)
                if worst > 1e6:
                    text += (" The sleeper is also starved: the holder is inside a transaction "
                             "most of the time, so a wake-up mostly finds the lock taken again. "
                             f"The longest single claim() of a losing process took "
                             f"{worst / 1e6:.1f} s; at busy_timeout (5 s) it would have failed "
                             "with SQLITE_BUSY (`database is locked`). A supervisor writes its "
                             "ledger once per fire time and run end, not back to back as here, "
                             "so a second writer (`lastcall runs release`) is not starved in "
                             "practice; under a write load like this one it would be.")
                text += (" SQLite is the one-machine ledger (`shared() == false`: the state "
                         "dir's flock admits one supervisor); these extra processes share the "
                         "file as `lastcall runs` and the unit tests' second replica do, which "
                         "measures the claim protocol under SQLite's lock, not a supported "
                         "deployment.")
        md += [text, ""]
    failed = [f"{r['backend']} with {r['replicas']}" for r in runs if r["bad"]]
    if failed:
        md += ["**Exactly once did not hold** in: " + ", ".join(failed) + " (see the table).", ""]
    else:
        md += ["Exactly once held in every run: no (job, fire time) has two rows, whichever "
               "replica won it, the losers recorded nothing, and won + lost + errors adds up to "
               "the calls of every replica.", ""]
    return md


def write_report(a, M, settings, runs, elapsed, load_before, load_after):
    os.makedirs(a.out, exist_ok=True)
    stamp = sh(["date", "+%F"]).strip()
    path = os.path.join(a.out, f"{stamp}-ledger.md")
    keys = a.jobs * a.fires
    md = [f"# lastcall benchmark, {stamp}: the run ledger (issue 20)", "",
          "Generated by `make bench-ledger` (bench/ledger.py, tests/tools/ledger_bench.cpp). "
          f"{a.jobs:,} jobs x {a.fires} fire times = **{keys:,} fire times**, claimed by 1 "
          f"replica and then by {a.replicas} replicas at once (separate processes, released "
          "together once each had opened the ledger, walking the same (time, job) order); every "
          "claim a replica wins is completed at once (`complete(id, exit 0)`: the row and the "
          "job's watermark in one transaction). `Concurrency::Allow`, no skip, lease "
          f"{a.lease_ms:,} ms. A fresh ledger per run.", "",
          "## Machine", "",
          f"- CPU: {M['cpu']}, `nproc` {M['nproc']}, memory {M['mem']}",
          f"- `uname -a`: {M['uname']}",
          f"- lastcall commit {M['commit']}; tool `{os.path.relpath(os.path.abspath(a.tool), ROOT)}`",
          f"- {M['postgres']} (`postgres --version`), started by tests/e2e/pgserver.py on a Unix "
          f"socket in {tempfile.gettempdir()} ({M['fs']}); settings: "
          + ", ".join(f"{k} = {v}" for k, v in sorted(settings.items())),
          f"- SQLite: libsqlite3-0 {M['libsqlite3']}, state dir in {tempfile.gettempdir()} "
          f"({M['fs']}); WAL, synchronous=FULL, busy_timeout 5,000 ms (as lastcall opens it)",
          f"- load average {load_before} before, {load_after} after; whole run {elapsed:.0f} s",
          ""]
    if a.note:
        md += [a.note, ""]

    md += ["## Throughput and correctness", "",
           "runs/s = completed rows / the slowest replica's wall time (first claim to last "
           "complete); claims/s = claim() calls of all replicas / the same time. Exactly once: "
           "checked in the database afterwards (one row per (job, time), completed; rows per "
           "replica = claims it won; every watermark at the last fire time; won + lost + errors "
           "= calls).", "",
           "fdatasync: a 4 KiB append and fdatasync() in the same file system, 100 times just "
           "before the run (what one durable commit costs on this disk at that moment; it moves "
           "with the other writers of the machine).", "",
           "| backend | replicas | completed rows | slowest replica s | runs/s | claims/s | "
           "won / lost / errors | wins per replica | exactly once | fdatasync p50 / p99 µs | "
           "load after |",
           "|---|---:|---:|---:|---:|---:|---|---|---|---:|---|"]
    for r in runs:
        won = sum(x["won"] for x in r["results"])
        lost = sum(x["lost"] for x in r["results"])
        err = sum(x["errors"] + x["complete_errors"] for x in r["results"])
        split = " / ".join(f"{x['won']:,}" for x in r["results"])
        md.append(f"| {r['backend']} | {r['replicas']} | {r['check']['rows']:,} | "
                  f"{r['slowest']:.2f} | {fmt(r['runs_per_s'])} | {fmt(r['claims_per_s'])} | "
                  f"{won:,} / {lost:,} / {err:,} | {split} | "
                  + ("yes" if not r["bad"] else "**no**: " + "; ".join(r["bad"])) + " | "
                  f"{fmt(r['fsync']['p50'])} / {fmt(r['fsync']['p99'])} | {r['load']} |")
    md.append("")

    md += ["## Claim latency per replica", "",
           "Each `claim()` call timed with steady_clock inside ledger_bench (a won claim's "
           "`complete()` is not inside it; its latency is the last column). Percentiles are "
           "nearest-rank over that replica's calls.", "",
           "| backend | replicas | replica | claims | won | lost | errors | claim p50 µs | p90 µs | "
           "p99 µs | max µs | complete p50 µs | complete p99 µs |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        for x in r["results"]:
            L, C = x["lat_us"], x["complete_lat_us"]
            md.append(f"| {r['backend']} | {r['replicas']} | {x['replica']} | {x['claims']:,} | "
                      f"{x['won']:,} | {x['lost']:,} | {x['errors'] + x['complete_errors']} | "
                      f"{fmt(L['p50'])} | {fmt(L['p90'])} | {fmt(L['p99'])} | {fmt(L['max'])} | "
                      + (f"{fmt(C['p50'])} | {fmt(C['p99'])} |" if x["won"] else "– | – |"))
    md.append("")
    errs = [(r["backend"], r["replicas"], x["replica"], x["first_error"])
            for r in runs for x in r["results"] if x["first_error"]]
    if errs:
        md += ["Errors (the first of each replica):", ""]
        md += [f"- {b}, {n} replicas, {name}: `{e}`" for b, n, name, e in errs]
        md.append("")
    md += meaning(runs, settings)
    with open(path, "w") as f:
        f.write("\n".join(md))
    log("wrote", path)
    print(path)


if __name__ == "__main__":
    main()
