#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerates packaging/hot-symbols.txt: the functions and data objects of lastcall that its
hot path touches.

Usage: bench/hot_symbols.py BUILT_LASTCALL BUILT_STATIC_LASTCALL
                             [--out packaging/hot-symbols.txt]

Why (issue 18, peak RSS and start-up): the kernel maps a file's page-cache pages around each
page a process faults in (fault-around, and whole large folios on recent kernels), and on a
paravirtualised VM each fault and TLB miss is dear. The code that a plain `lastcall -- CMD` runs
is about 340 KB of lastcall's own and libstdc++'s (the static binary: ~100 KB more of glibc's),
but scattered over a 2.5-4.5 MB text segment it left 1.4-2.5 MB of the binary resident. The
same holds for the read-only data (tables, `__PRETTY_FUNCTION__`, CPU feature tables) spread
over 0.5 MB of `.rodata`, and for the first writes to `.data`/`.bss`, one fault per page. The
link (CMakeLists.txt, LASTCALL_ORDER_SECTIONS) places the sections holding the symbols named in
the list together (lld's --symbol-ordering-file, per output section), so that a run faults in a
few neighbouring pages instead.

How: each binary runs under valgrind's callgrind in the scenarios below (start-up, a child that
exits, a SIGTERM stop, the /proc tracker, a command that cannot be run); every function executed
in the binary's own object is listed by its name. In the static binary that includes glibc's
and libm's. Added to those:
- the IFUNC resolvers of every IRELATIVE relocation (all run before `main`), and the variants
  this machine's CPU selects, read from a native run (valgrind's emulated CPU selects others);
- what the spawned child calls before its exec (it runs in lastcall's memory, CLONE_VM, where
  callgrind does not follow it): the direct callees of its entry point, from the disassembly;
- the data objects a start-up, a child's exit and a SIGTERM stop read or write, from valgrind's
  lackey (every memory access) on the static binary, whose addresses are the link's.
  String literals have no symbol (lld merges them) and stay where the link puts them.
A stale list is harmless: a name that no longer exists is ignored by the linker, a new hot
symbol is only placed elsewhere. Regenerate after larger changes of the start-up or stop path
and commit the result.
"""
import argparse
import bisect
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Run by the spawned child before its exec, in lastcall's own memory (the spawner clones with
# CLONE_VM): their pages are lastcall's, but callgrind neither follows the child nor sees the
# clone (under valgrind the spawner falls back to fork).
CHILD_SIDE = [
    "lastcall_clone3_on_stack",
    "_ZN8lastcall12_GLOBAL__N_110child_mainEPv",
]

# Run only with pidfds, which valgrind 3.19 does not know (pidfd_open, syscall 434, fails under
# it): the main child's stop signal and every signal through a ProcessRef. They are on the path
# of the stop signal itself, where a page fault costs the child its head start.
PIDFD_SIDE = [
    "_ZN8lastcall12pidfd_signalEii",
    "_ZNK8lastcall10ProcessRef6signalEi",
    "_ZN8lastcall15read_birth_lineEi",
    # Its read of ns_last_pid, a function of its own since 7a81cd5: missing from the list that
    # commit kept, it faulted in a page of text before every main child's stop signal.
    "_ZN8lastcall13read_last_pidEi",
    # Right after that signal and the yield to the child: the main child's record.
    "_ZN8lastcall11ProcessBook9live_mainEv",
    "_ZN8lastcall9BirthLine17ns_per_clock_tickEv",
    # Asked before the main child's stop signal (stop_main_child_first), after the pidfd check
    # that valgrind's run fails: left out of the list once, each start paid a 37 us fault there.
    "_ZNK8lastcall19SupervisorComponent18announces_shutdownEv",
    "_ZNK8lastcall8Notifier18announces_shutdownEv",
]

# Data objects larger than a page are left where the link puts them: a run faults in the pages
# of them it touches wherever they are, and listed among the small hot objects they spread
# those over more pages (the spawner's 32 KiB child stack, of which the child uses the top; the
# emergency plan's 8 KiB; glibc's tunables). Measured on a static start: 37 page faults with
# this rule, 39-40 with them listed.
PAGE = 4096

# Run by a static binary's glibc before `main` only where the kernel maps a vDSO, which valgrind
# does not: setup_vdso makes a link map for it and looks up __vdso_clock_gettime & co. Missing
# from the list, they kept two 64 KiB windows of text mapped at the end of the segment.
VDSO_SIDE = [
    "_dl_new_object",
    "_dl_add_to_namespace_list",
    "_dl_setup_hash",
    "_dl_lookup_symbol_x",
    "do_lookup_x",
    "check_match",
    "_dl_name_match_p",
]

# The C runtime's start-up and exit code (crt1.o, crtbeginT.o, crti.o): every run executes it,
# and callgrind names it "(below main)" or not at all.
CRT_SIDE = [
    "_start",
    "_init",
    "frame_dummy",
    "register_tm_clones",
    "deregister_tm_clones",
    "__do_global_dtors_aux",
    "_fini",
    # __libc_start_call_main's setjmp (for thread cancellation) tail-jumps into __sigsetjmp,
    # which callgrind charges to _setjmp: unlisted, it kept a window of text of its own.
    "__sigsetjmp",
]

# A scenario whose first word is AS_PEER + NAME runs the binary through a symlink called NAME.
AS_PEER = "as-peer:"

SCENARIOS = [
    ("exit", ["--", "/bin/true"], None),
    ("exit, /proc tracker", ["--tracker", "proc", "--", "/bin/true"], None),
    ("exit code", ["--", "/bin/sh", "-c", "exit 3"], None),
    ("missing command", ["--", "/nonexistent/command"], None),
    ("SIGTERM stop", ["--", "/bin/sleep", "30"], signal.SIGTERM),
    ("SIGINT stop, /proc tracker", ["--tracker", "proc", "--", "/bin/sleep", "30"], signal.SIGINT),
    # The two other ways a container starts it: with options (lastcall's option parser, which a
    # bare `lastcall -- CMD` never builds), and as the drop-in (`docker run --init` runs
    # /sbin/docker-init, tini's flags), where the peer's parse and SIGTERM forward run instead.
    ("options", ["--grace", "5s", "--kill-scope", "tree", "--", "/bin/true"], None),
    ("as tini", [AS_PEER + "tini", "-s", "--", "/bin/true"], None),
    ("as tini, SIGTERM forward", [AS_PEER + "tini", "-s", "--", "/bin/sleep", "30"],
     signal.SIGTERM),
]


# The order of the list is the order of the code: lld places the listed sections one after the
# other. What a plain run executes comes first (the plain exit's and the SIGTERM stop's, with
# the default tracker), then what an exit code adds, then what only the /proc tracker or a
# failed start runs: a plain run reads a prefix of the hot code, and fewer of its 64 KiB
# fault-around windows, instead of every window of a list in alphabetical order. Within the
# first group (after the stop signal's path and what every start runs natively, see main()):
# a plain exit's functions in the order it first runs them (lackey, static binary), then what
# a SIGTERM stop adds, in the order the stop first runs it.
EVERY_RUN = {"exit", "SIGTERM stop"}
# Next, what the drop-in runs, then what options add: a tini-named run reads the peer's code
# without the option parser's, a run with options the parser's without the peer's.
AS_TINI = {"as tini", "as tini, SIGTERM forward"}


def tier(scenarios):
    if scenarios & EVERY_RUN:
        return 0
    if scenarios & AS_TINI:
        return 1
    if "options" in scenarios:
        return 2
    if "exit code" in scenarios:
        return 3
    return 4


# The data objects: what a run that only starts, runs a child and stops touches, with options
# or as the drop-in (lackey is slow; the other scenarios add code paths, not data a common run
# keeps resident).
SCENARIO_OPTIONS, SCENARIO_AS_TINI_FORWARD = SCENARIOS[6], SCENARIOS[8]
DATA_SCENARIOS = [SCENARIOS[0], SCENARIOS[4], SCENARIO_OPTIONS, SCENARIO_AS_TINI_FORWARD]
# Their order in the list: a plain run's data, then a stop's, the drop-in's, the parser's.
DATA_ORDER = [SCENARIOS[0][0], SCENARIOS[4][0], SCENARIO_AS_TINI_FORWARD[0], SCENARIO_OPTIONS[0]]


def functions_of(callgrind_out, binary_name):
    """Mangled names of the functions executed in the object whose path ends in binary_name
    (or in the name of a peer it ran as)."""
    suffixes = tuple("/" + n for n in [binary_name] + [peer_name(s) for s in SCENARIOS] if n)
    names, current = set(), None
    with open(callgrind_out) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                current = line[3:]
            elif line.startswith("fn=") and current and current.endswith(suffixes):
                name = line[3:]
                # callgrind marks recursion ("f'2") and unnamed code ("0x...", "(below main)").
                name = name.split("'")[0]
                if name and not name.startswith("0x") and not name.startswith("("):
                    names.add(name)
    return names


def peer_name(scenario):
    args = scenario[1]
    return args[0][len(AS_PEER):] if args and args[0].startswith(AS_PEER) else None


def run_scenario(binary, args, sig, out, tool="callgrind"):
    if tool == "callgrind":
        opts = ["--tool=callgrind", "--demangle=no", "--compress-strings=no", "--compress-pos=no",
                f"--callgrind-out-file={out}"]
    elif tool == "superblocks":  # lackey: the address of every block of code as it runs
        # Without chasing: valgrind otherwise translates a small callee into its caller's
        # superblock, the callee's address never starts one, and the first-run order missed it
        # (twin::open_startup_window, run by every start, was placed after the stop's code).
        opts = ["--tool=lackey", "--trace-superblocks=yes", "--vex-guest-chase=no",
                f"--log-file={out}"]
    else:  # lackey: every load and store of lastcall itself (not of the child it execs)
        opts = ["--tool=lackey", "--trace-mem=yes", f"--log-file={out}"]
    if args and args[0].startswith(AS_PEER):
        binary, args = peer_link(binary, args[0][len(AS_PEER):]), args[1:]
    cmd = ["valgrind"] + opts + [binary] + args
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if sig is not None:
        # Under valgrind start-up takes a second or more; the signal must find the loop running.
        # The child's exec is the event to wait for: lastcall's child is named sleep.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not child_running(proc.pid, "sleep"):
            time.sleep(0.05)
        proc.send_signal(sig)
    proc.wait(timeout=120)


def peer_link(binary, name):
    """A symlink called name to binary, in a directory of its own (removed at exit)."""
    global _peer_dir
    if _peer_dir is None:
        _peer_dir = tempfile.TemporaryDirectory()
    link = os.path.join(_peer_dir.name, name)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(binary, link)
    return link


_peer_dir = None


def child_running(pid, comm):
    """Whether a direct child of pid (lastcall runs under valgrind in valgrind's own process)
    is named comm: the command has been exec'd."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return False
    for child in children:
        try:
            with open(f"/proc/{child}/comm") as f:
                if f.read().strip() == comm:
                    return True
        except OSError:
            pass
    return False


def symbols_with_sizes(binary, types):
    """[(address, size, name)] sorted, of the symbols of binary (or BINARY.debug) whose nm type
    letter is in types."""
    for path in (binary, binary + ".debug"):
        if not os.path.exists(path):
            continue
        out = subprocess.run(["nm", "-S", "--defined-only", path], capture_output=True,
                             text=True).stdout
        syms = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[2] in types:
                syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
        if syms:
            return sorted(syms)
    return []


def is_static(binary):
    """Position-dependent (its addresses are the link's) and without an interpreter. The orders
    and the data come from the static binary alone: its runs also show glibc's functions and
    objects, which the dynamic twin reaches in libc.so: ranked by a run of the twin, they would
    fall to the end of their tier. (main takes the first binary that gives an order: a
    position-dependent twin, tried in 9e7e690 and listed first, would have given it.)"""
    out = subprocess.run(["readelf", "-hlW", binary], capture_output=True, text=True).stdout
    return re.search(r"Type:\s+EXEC", out) is not None and not re.search(r"\bINTERP\b", out)


def execution_order(binary, scenario, tmp):
    """{function name: rank} by the first time each function runs in scenario (lackey's trace
    of every block of code executed): start-up first, then the loop, the stop, the teardown.
    Only for the static binary (is_static)."""
    if not is_static(binary):
        return {}
    functions = symbols_with_sizes(binary, "tTW")
    starts = [f[0] for f in functions]
    what, args, sig = scenario
    out = os.path.join(tmp, "superblocks")
    run_scenario(binary, args, sig, out, tool="superblocks")
    rank, seen, next_rank = {}, set(), 0
    with open(out, errors="replace") as f:
        for line in f:
            if not line.startswith("SB "):
                continue
            addr = int(line[3:], 16)
            if addr in seen:
                continue
            seen.add(addr)
            k = bisect.bisect_right(starts, addr) - 1
            if k >= 0 and addr < starts[k] + max(functions[k][1], 1):
                # Every alias of the address (C1/C2 constructors, glibc's __x/x): the list
                # names whichever one callgrind reported, and each must have the rank.
                # One rank per address, without gaps: path_to_stop_signal reads rank - 1 as
                # the function that ran just before.
                if functions[k][2] not in rank:
                    for f in functions[bisect.bisect_left(starts, starts[k]):k + 1]:
                        rank.setdefault(f[2], next_rank)
                    next_rank += 1
    print(f"{binary}, {what}: the order in which {len(rank)} functions first ran",
          file=sys.stderr)
    return rank


STOP_PATH_START = "_ZN8lastcall10Supervisor10on_signalsEv"
STOP_PATH_END = ("_ZN8lastcall8Shutdown9on_signalEiSt8optionalINSt6chrono10time_pointINS2_3_V212"
                 "steady_clockENS2_8durationIlSt5ratioILl1ELl1000000000EEEEEEE")


# The same for the drop-in's forward (tini forwards SIGTERM instead of stopping): from the
# loop's dispatch up to the call that sends it on, which is listed too.
FORWARD_PATH_END = "_ZN8lastcall10Supervisor7forwardEiNS_5ScopeE"


def path_to_stop_signal(first_run, end_name=STOP_PATH_END):
    """What runs between the SIGTERM's wake-up and the main child's stop signal, for the front
    of the list: first run at the stop, in the first-run order it sits after the start-up code,
    in windows `lastcall -- sleep` never mapped, and each fault there came before the signal
    (the first-run order cost the forward 50 us until this). From the first-run ranks: the loop's
    dispatch to Supervisor::on_signals (first run just before it) up to the state machine's
    Shutdown::on_signal, which comes after the main child's signal; plus the pidfd side, which
    valgrind cannot run, and syscall(), through which the yield that follows the send goes."""
    start, end = first_run.get(STOP_PATH_START), first_run.get(end_name)
    path = set(PIDFD_SIDE) | {"syscall"}
    if start is None or end is None:
        return path
    # lastcall's own functions and the loop's call into them: the log line's formatting runs
    # there under valgrind too, but after the signal natively, and is big.
    return path | {n for n, r in first_run.items() if start - 1 <= r < end and
                   (re.match(r"_ZN?K?8lastcall", n) or "Supervisor6set_up" in n)}


def touched_data(binary, scenarios, tmp):
    """{name: (scenarios that read or write it, larger than a page)} of the data objects, from
    lackey's trace of every access. Only for the static binary (is_static). 'u' (GNU unique)
    too: the guard variables of libstdc++'s facet ids, which its static initialisers write at
    every start."""
    if not is_static(binary):
        return {}
    objects = symbols_with_sizes(binary, "rRdDbBvVu")
    starts = [o[0] for o in objects]
    names = {}
    for i, (what, args, sig) in enumerate(scenarios):
        out = os.path.join(tmp, f"lackey.{i}")
        run_scenario(binary, args, sig, out, tool="lackey")
        seen = set()
        with open(out, errors="replace") as f:
            for line in f:
                # " L 04225a8,8", " S ...", " M ..." (instruction fetches start with "I").
                if len(line) < 4 or line[0] != " " or line[1] not in "LSM":
                    continue
                addr = int(line[3:].split(",", 1)[0], 16)
                if addr in seen:
                    continue
                seen.add(addr)
                k = bisect.bisect_right(starts, addr) - 1
                if k < 0:
                    continue
                # Objects do not overlap; aliases share a start, and any one names the section.
                first = bisect.bisect_left(starts, starts[k])
                group = objects[first:k + 1]
                size = max(max(o[1] for o in group), 1)
                if addr < starts[k] + size:
                    seen_by, _ = names.get(group[0][2], (set(), False))
                    names[group[0][2]] = (seen_by | {what}, size > PAGE)
        print(f"{binary}, {what}: {len(names)} data objects so far", file=sys.stderr)
    return names


def ifunc_resolvers(binary):
    """Every IFUNC resolver of a static binary: its IRELATIVE relocations run all of them before
    main, each in the archive member of its function (libm's for SQLite too)."""
    table = symbol_table(binary)
    relocs = subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True).stdout
    names = set()
    for line in relocs.splitlines():
        if "R_X86_64_IRELATIVE" in line:
            resolver = int(line.split()[-1], 16)
            if resolver in table:
                names.add(table[resolver])
    return names


def child_side_callees(binary):
    """The functions the spawned child's entry point calls directly (a static binary's
    setsid, sigprocmask, close_range, execve...), and those the spawner itself calls: under
    valgrind it forks instead of its native clone3 (valgrind knows no CLONE_INTO_CGROUP), and a
    native run took a page fault on a helper of spawn() no scenario had listed. From the
    disassembly. In the dynamic binary libc's are reached through the PLT, and not the link's
    to place."""
    return direct_callees(binary, CHILD_SIDE[1]) | direct_callees(binary, SPAWNER)


SPAWNER = "_ZN8lastcall5spawnERKNS_9SpawnSpecE"


def direct_callees(binary, function):
    entry = [s for s in symbols_with_sizes(binary, "tT") if s[2] == function]
    if not entry:
        return set()
    start, size, _ = entry[0]
    table = symbol_table(binary)
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                          f"--stop-address={start + size}", binary], capture_output=True,
                         text=True).stdout
    names = set()
    for m in re.finditer(r"\bcall\s+(?:0x)?([0-9a-f]+)\b", out):
        target = int(m.group(1), 16)
        if target in table and not start <= target < start + size:
            names.add(table[target])
    return names


def symbol_table(binary):
    """{address: name} of the functions of binary (its symbols, or those of BINARY.debug, where
    the build keeps them for a stripped binary)."""
    for path in (binary, binary + ".debug"):
        if not os.path.exists(path):
            continue
        out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True).stdout
        table = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "tTiW":
                table.setdefault(int(parts[0], 16), parts[2])
        if table:
            return table
    return {}


# glibc names an IFUNC variant after its family and the instruction set it needs:
# __memcpy_avx512_unaligned_erms, __strlen_evex, __ieee754_pow_fma.
IFUNC_VARIANT = re.compile(r"^__(.+?)_(?:sse2|ssse3|sse4_1|sse4_2|sse41|sse42|avx|avx2|avx512|"
                           r"evex|fma|fma4)(?:_|$)")


def ifunc_family(name):
    m = IFUNC_VARIANT.match(name)
    return m.group(1) if m else None


def irelative_targets(binary, called):
    """The functions a static binary's IRELATIVE relocations resolve to on this CPU, of the
    families whose variant valgrind saw called (every IFUNC is resolved at start-up, most are
    never called: libm's, for SQLite): started natively, its GOT slots are read from
    /proc/PID/mem once the child runs."""
    families = {ifunc_family(n) for n in called} - {None}
    relocs = subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True).stdout
    slots = [int(line.split()[0], 16) for line in relocs.splitlines()
             if "R_X86_64_IRELATIVE" in line]
    table = symbol_table(binary)
    if not slots or not table:
        return set()
    proc = subprocess.Popen([binary, "--", "/bin/sleep", "30"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not child_running(proc.pid, "sleep"):
            time.sleep(0.01)
        names = set()
        with open(f"/proc/{proc.pid}/mem", "rb") as mem:
            for slot in slots:
                mem.seek(slot)
                target = int.from_bytes(mem.read(8), "little")
                if target in table and ifunc_family(table[target]) in families:
                    names.add(table[target])
        return names
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binaries", nargs="+", metavar="binary")
    ap.add_argument("--out", default=os.path.join(ROOT, "packaging", "hot-symbols.txt"))
    a = ap.parse_args()
    if not any(is_static(os.path.abspath(p)) for p in a.binaries):
        sys.exit("no static binary among the arguments (build/static/lastcall.unstripped): the "
                 "list would have no run order and no data objects")
    names, data = set(), {}
    # Where a function appears, for the order: what every run executes first (RUN_TIERS).
    seen_in = {}
    first_run, exit_run, tini_run, options_run = {}, {}, {}, {}
    # What every start runs natively that the valgrind runs do not show (or show elsewhere):
    # IFUNC resolvers and this CPU's variants, the C runtime, the vDSO set-up, the spawner's and
    # its child's calls: every run's code.
    run_natively = set()
    with tempfile.TemporaryDirectory() as tmp:
        for b, path in enumerate(a.binaries):
            binary = os.path.abspath(path)
            for i, (what, args, sig) in enumerate(SCENARIOS):
                out = os.path.join(tmp, f"cg.{b}.{i}")
                run_scenario(binary, args, sig, out)
                found = functions_of(out, os.path.basename(binary))
                print(f"{path}, {what}: {len(found)} functions", file=sys.stderr)
                names |= found
                for name in found:
                    seen_in.setdefault(name, set()).add(what)
            native = irelative_targets(binary, names)
            if native:
                print(f"{path}: {len(native)} IFUNC targets of this CPU", file=sys.stderr)
            always = native | ifunc_resolvers(binary) | child_side_callees(binary)
            names |= always
            run_natively |= always
            for n, (seen_by, big) in touched_data(binary, DATA_SCENARIOS, tmp).items():
                before, _ = data.get(n, (set(), big))
                data[n] = (before | seen_by, big)
            if not first_run:
                first_run = execution_order(binary, SCENARIOS[4], tmp)
                exit_run = execution_order(binary, SCENARIOS[0], tmp)
                tini_run = execution_order(binary, SCENARIO_AS_TINI_FORWARD, tmp)
                options_run = execution_order(binary, SCENARIO_OPTIONS, tmp)
    names |= set(CHILD_SIDE) | set(PIDFD_SIDE) | set(VDSO_SIDE) | set(CRT_SIDE)
    run_natively |= set(CHILD_SIDE) | set(VDSO_SIDE) | set(CRT_SIDE)
    for name in run_natively | set(PIDFD_SIDE):
        seen_in.setdefault(name, set()).update(EVERY_RUN)
    stop_path = path_to_stop_signal(first_run) | path_to_stop_signal(tini_run, FORWARD_PATH_END)
    stop_path.add(FORWARD_PATH_END)
    names |= stop_path
    if len(names) < 50:
        sys.exit(f"only {len(names)} functions found: is valgrind installed, and lastcall built?")
    for n in names:
        data.pop(n, None)
    with open(a.out, "w") as f:
        f.write("# Functions, then data objects, on lastcall's hot path; generated by\n")
        f.write("# bench/hot_symbols.py from RelWithDebInfo builds (dynamic and static). The link\n")
        f.write("# places their sections together, each output section on its own (lld\n")
        f.write("# --symbol-ordering-file; names a binary lacks are skipped).\n")

        def key(n):
            # The stop signal's path first of all (below); then what every start runs natively
            # (IFUNC resolvers and variants, the C runtime: before main); then a plain run's
            # code in the order it first runs, from start to exit; then what a SIGTERM stop
            # adds, in its order; then the drop-in's, in the order a tini-named SIGTERM forward
            # first runs it; then the option parser's, in its order; the rest by name. A plain run's code together: ordered by the
            # SIGTERM stop alone, the stop's code lay between the start's and the exit's, and a
            # plain start touched eight 64 KiB windows of text for 225 KB of code.
            if n in stop_path:
                return (-2, 0, n)
            if n in run_natively:
                return (-1, 0, n)
            if n in exit_run:
                return (-1, 1 + exit_run[n], n)
            t = tier(seen_in.get(n, set()))
            order = {0: first_run, 1: tini_run, 2: options_run}.get(t, {})
            return (t, order.get(n, len(order)), n)

        def data_key(n):
            # By the runs that touch them, as the code: a plain run's first (each first write
            # of .data or .bss is a fault per page, no fault-around there), then what a stop,
            # the drop-in and the option parser add. Alphabetical, the option parser's locale
            # objects lay among a plain run's, which then wrote two pages of .bss more. Within a
            # group, objects larger than a page last (glibc's tunable_list, 4 KB, is read and
            # written whole; lastcall's emergency plan is mostly an unwritten buffer).
            seen_by, big = data[n]
            group = next((g for g, s in enumerate(DATA_ORDER) if s in seen_by), len(DATA_ORDER))
            return (group, big, n)

        for n in sorted(names, key=key) + sorted(data, key=data_key):
            f.write(n + "\n")
    print(f"{len(names)} functions, {len(data)} data objects -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
