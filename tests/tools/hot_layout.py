#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the link laid the hot-path functions and data out together (CMakeLists.txt,
LASTCALL_ORDER_SECTIONS; docs/design.md, "The code a run executes is laid out together").

Usage: hot_layout.py BINARY_WITH_SYMBOLS ORDER_FILE

The functions of ORDER_FILE that BINARY defines must lie in one stretch of the text no longer
than twice their total size plus 64 KiB (alignment, and the whole archive member a listed glibc
symbol brings along). Unordered, they spread over the whole text segment (2.5-4.5 MB); ordered,
the stretch is a few hundred KB. The same for the listed data objects in each writable section
(`.data`, `.bss`, `.data.rel.ro`: one page fault per page first written), within twice their size
plus 8 KiB: unordered, the static binary's spread over all of `.bss` (40 KB) and `.data.rel.ro`
(66 KB). (`.rodata`'s listed objects are not checked so: a listed object in a mergeable
section, glibc's `_itoa_lower_digits`, stays where the link merges it.) The exception tables
must lie after .rodata (packaging/layout.ld), and in the static binary .eh_frame after .iplt
(packaging/layout-static.ld), together with _init and .fini in one 64 KiB window; the dynamic
binary has .init, .fini and its PLT on a page of their own right before .text, which begins
with the hot code (packaging/layout.ld). In .rodata the merged string literals come first
(CMakeLists.txt, lastcall_order_link): a literal every start reads lies in its first 64 KiB,
before every listed object. A layout, not a time: nothing here depends on the machine.

A binary with its code (not a .debug file) is also checked for the path of the main child's stop
signal (Supervisor::stop_main_child_first): every lastcall function it calls, directly or through
its callees, must be on the list, and within the first 64 KiB of the hot code. The list comes
from valgrind runs, which cannot take this path (no pidfds) and whose hand-kept additions went
stale once: read_last_pid, split out of read_birth_line, faulted in a page of text before every
stop signal (40 us of a 200 us forward).
"""
import collections
import functools
import re
import subprocess
import sys

DATA_SECTIONS = (".data", ".bss", ".data.rel.ro")
WINDOW = 64 * 1024  # the kernel's fault-around (fault_around_bytes)


Section = collections.namedtuple("Section", "type addr offset size align")


@functools.lru_cache(maxsize=None)
def section_table(binary):
    """{name: Section} from readelf's table of the sections of binary, read once."""
    out = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)"
                     r".*\s(\d+)$", line)
        if m:
            table[m.group(1)] = Section(m.group(2), *(int(g, 16) for g in m.groups()[2:5]),
                                        int(m.group(6)))
    return table


def section_ranges(binary):
    """{name: (start, end)} of the allocated sections (a .debug file keeps their addresses)."""
    return {name: (s.addr, s.addr + s.size) for name, s in section_table(binary).items() if s.addr}


def check_data(binary, nm_lines, wanted):
    ranges = section_ranges(binary)
    failed = False
    for section in DATA_SECTIONS:
        if section not in ranges:
            continue
        lo_sec, hi_sec = ranges[section]
        spans = {}
        for parts in nm_lines:
            if parts[2] in "tTWi" or parts[3] not in wanted:
                continue
            start, size = int(parts[0], 16), int(parts[1], 16)
            if size and lo_sec <= start < hi_sec:
                spans[start] = max(spans.get(start, 0), size)
        if len(spans) < 3:
            continue
        total = sum(spans.values())
        lo, hi = min(spans), max(start + size for start, size in spans.items())
        limit = 2 * total + 8 * 1024
        print(f"{binary}: {len(spans)} hot objects in {section}, {total:,} bytes, laid out over "
              f"{hi - lo:,} bytes of {hi_sec - lo_sec:,} (limit {limit:,})")
        if hi - lo > limit:
            print(f"{binary}: the hot objects of {section} are spread over {hi - lo:,} bytes, "
                  f"more than {limit:,}: the link did not order them", file=sys.stderr)
            failed = True
    return not failed


def check_dynamic(binary, sections, hot_code):
    """The dynamic binary (packaging/layout.ld): .init on a page of its own with .fini and the
    PLT, and right after them .text, which the hot code begins. (Adjacency, not a window: a PIE
    is loaded at a random 4 KiB-aligned address, so its 64 KiB windows fall elsewhere at each
    start.)"""
    group = [s for s in (".init", ".fini", ".plt", ".plt.sec") if s in sections]
    if ".plt" not in group or ".text" not in sections:
        # Nothing is called through a PLT (a twin built with -fno-plt would call libc through
        # its GOT): nothing to place.
        return True
    lo = sections[".init"][0] if ".init" in sections else sections[".plt"][0]
    hi = max(sections[s][1] for s in group)
    text = sections[".text"][0]
    problems = []
    if lo % 4096:
        problems.append(f"the group .init-.plt begins at {lo:#x}, not on a page")
    if hi - lo > 4096:
        # One page cannot straddle two 64 KiB windows; a group of two pages can.
        problems.append(f"the group .init-.plt takes {hi - lo:,} bytes, more than a page")
    if any(sections[s][0] < lo or sections[s][0] > text for s in group):
        problems.append("the group .init-.plt does not precede .text")
    # Up to .text's alignment less one byte of padding after the last stub.
    if not 0 <= text - hi < max(16, section_table(binary)[".text"].align):
        problems.append(f".text ({text:#x}) does not follow the PLT (ending at {hi:#x}): another "
                        "section lies between them")
    if hot_code != text:
        problems.append(f"the hot code begins at {hot_code:#x}, not where .text does ({text:#x})")
    for p in problems:
        print(f"{binary}: {p}: packaging/layout.ld was not applied", file=sys.stderr)
    return not problems


# Read by every start (twin::take_handed_over looks it up in the environment), merged by the link
# with the other short literals (.rodata.str1.1).
EVERY_START_LITERAL = b"LASTCALL_HANDED_OVER\0"


def check_rodata(binary, nm_lines, wanted):
    """The merged literals first in .rodata, before the listed objects: by default they lay
    behind the listed objects and 83 KB of long literals no start reads (a window of their own)."""
    rodata = section_table(binary).get(".rodata")
    if not rodata or rodata.type != "PROGBITS":
        print(f"{binary}: no .rodata with contents (a .debug file holds no bytes)",
              file=sys.stderr)
        return False
    addr, offset, size = rodata.addr, rodata.offset, rodata.size
    with open(binary, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    at = data.find(EVERY_START_LITERAL)
    if at < 0:
        print(f"{binary}: the literal {EVERY_START_LITERAL!r} is not in .rodata", file=sys.stderr)
        return False
    # By address, whatever nm's letter for them.
    listed = [int(p[0], 16) for p in nm_lines if p[3] in wanted and
              addr <= int(p[0], 16) < addr + size]
    if not listed:
        print(f"{binary}: no listed object in .rodata: no symbols, or a stale list",
              file=sys.stderr)
        return False
    first = min(listed)
    print(f"{binary}: the literal every start reads at .rodata+{at:#x}, the first of "
          f"{len(listed)} listed objects at .rodata+{first - addr:#x}")
    # Within the first window too: the 83 KB of 8-aligned literals (.rodata.str1.8), which no
    # start reads, lay before the short ones, and both before the listed objects.
    if addr + at > first or at >= WINDOW:
        print(f"{binary}: the merged literals do not come first in .rodata: the generated layout "
              "(CMakeLists.txt, lastcall_order_link) was not applied", file=sys.stderr)
        return False
    return True


STOP_PATH_ROOTS = ("_ZN8lastcall10Supervisor21stop_main_child_firstEi",)
STOP_PATH_WINDOW = 64 * 1024


def check_stop_path(binary, nm_lines, wanted):
    """lastcall's functions reachable by direct calls (or tail jumps) from the stop path's roots,
    none of them missing from the list. Cold parts (`.cold`, error paths moved out by GCC) are not
    the path."""
    where = {}
    names = {}
    for parts in nm_lines:
        if parts[2] in "tTW":
            start, size = int(parts[0], 16), int(parts[1], 16)
            names.setdefault(start, parts[3])
            where.setdefault(parts[3], (start, size))
    missing, seen, todo = [], set(), list(STOP_PATH_ROOTS)
    while todo:
        name = todo.pop()
        if name in seen or name not in where:
            continue
        seen.add(name)
        if name not in wanted:
            missing.append(name)
        start, size = where[name]
        code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start}",
                               f"--stop-address={start + size}", binary], capture_output=True,
                              text=True, check=True).stdout
        for m in re.finditer(r"\b(?:call|jmp)\s+(?:0x)?([0-9a-f]+)\b", code):
            callee = names.get(int(m.group(1), 16))
            if (callee and callee != name and re.match(r"_ZN?K?8lastcall", callee)
                    and not callee.endswith(".cold")):
                todo.append(callee)
    if STOP_PATH_ROOTS[0] not in seen:
        print(f"{binary}: {STOP_PATH_ROOTS[0]} not found", file=sys.stderr)
        return False
    print(f"{binary}: {len(seen)} functions on the main child's stop signal path")
    for name in sorted(missing):
        print(f"{binary}: on the stop signal's path but not in the list: {name}",
              file=sys.stderr)
    # At the front of the hot code: the list is in the order a run first executes it, and the
    # stop comes long after the start-up (`lastcall -- sleep` maps only the start-up's windows).
    # In the middle of the list they faulted in a window before the signal (50 us).
    front = min(start for start, _ in (where[n] for n in wanted if n in where))
    far = sorted(n for n in seen if where[n][0] >= front + STOP_PATH_WINDOW)
    for name in far:
        print(f"{binary}: {name} on the stop signal's path lies {where[name][0] - front:,} bytes "
              f"into the hot code, past its first {STOP_PATH_WINDOW:,}", file=sys.stderr)
    return not missing and not far


def main():
    binary, order_file = sys.argv[1], sys.argv[2]
    with open(order_file) as f:
        wanted = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    nm_lines = [parts for parts in (line.split() for line in out.splitlines()) if len(parts) == 4]
    spans = {}
    for parts in nm_lines:
        if parts[2] in "tTW" and parts[3] in wanted:
            start, size = int(parts[0], 16), int(parts[1], 16)
            if size:
                spans[start] = max(spans.get(start, 0), size)  # aliases share an address
    if len(spans) < 100:
        sys.exit(f"{binary}: only {len(spans)} of the {len(wanted)} hot functions found: "
                 "no symbols, or a stale list")
    total = sum(spans.values())
    lo = hot_code = min(spans)
    hi = max(start + size for start, size in spans.items())
    limit = 2 * total + 64 * 1024
    print(f"{binary}: {len(spans)} hot functions, {total:,} bytes, laid out over "
          f"{hi - lo:,} bytes (limit {limit:,})")
    if hi - lo > limit:
        sys.exit(f"{binary}: the hot functions are spread over {hi - lo:,} bytes of text, more "
                 f"than {limit:,}: the link did not order them")
    ok = check_data(binary, nm_lines, wanted)
    sections = section_ranges(binary)
    if ".gcc_except_table" in sections and ".rodata" in sections:
        # packaging/layout.ld: the exception tables after .eh_frame, not before .rodata.
        if sections[".gcc_except_table"][0] < sections[".rodata"][0]:
            print(f"{binary}: .gcc_except_table lies before .rodata: packaging/layout.ld was "
                  "not applied", file=sys.stderr)
            ok = False
    if ".iplt" in sections and ".eh_frame" in sections:
        # packaging/layout-static.ld: .eh_frame after the IFUNC stubs, at the segment's end.
        if sections[".eh_frame"][0] < sections[".iplt"][0]:
            print(f"{binary}: .eh_frame lies before .iplt: packaging/layout-static.ld was not "
                  "applied", file=sys.stderr)
            ok = False
        # What every start reads at the segment's end, _init, .fini, the IFUNC stubs and the
        # first word of .eh_frame, within one 64 KiB window of the kernel's fault-around: where
        # the end of .text happened to put them, they once straddled two (64 KiB of peak RSS).
        group = [sections[s][0] for s in (".init", ".fini", ".iplt") if s in sections]
        lo, hi = min(group), max(sections[".iplt"][1], sections[".eh_frame"][0] + 8)
        if lo // WINDOW != (hi - 1) // WINDOW:
            print(f"{binary}: _init, .iplt and the start of .eh_frame ({lo:#x}-{hi:#x}) straddle "
                  "two 64 KiB windows: packaging/layout-static.ld was not applied (it puts them "
                  "on one 4 KiB-aligned page)",
                  file=sys.stderr)
            ok = False
    if ".interp" in sections:
        ok = check_dynamic(binary, sections, hot_code) and ok
    ok = check_rodata(binary, nm_lines, wanted) and ok
    if not binary.endswith(".debug"):
        ok = check_stop_path(binary, nm_lines, wanted) and ok
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
