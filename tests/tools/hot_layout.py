#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the link laid the hot-path functions out together (CMakeLists.txt,
LASTCALL_ORDER_SECTIONS; docs/design.md, "The code a run executes is laid out together").

Usage: hot_layout.py BINARY_WITH_SYMBOLS ORDER_FILE

The functions of ORDER_FILE that BINARY defines must lie in one stretch of the text no longer
than twice their total size plus 64 KiB (alignment, and the whole archive member a listed glibc
symbol brings along). Unordered, they spread over the whole text segment (2.5-4.5 MB); ordered,
the stretch is a few hundred KB. A layout, not a time: nothing here depends on the machine.
"""
import subprocess
import sys


def main():
    binary, order_file = sys.argv[1], sys.argv[2]
    with open(order_file) as f:
        wanted = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    spans = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTW" and parts[3] in wanted:
            start, size = int(parts[0], 16), int(parts[1], 16)
            if size:
                spans[start] = max(spans.get(start, 0), size)  # aliases share an address
    if len(spans) < 100:
        sys.exit(f"{binary}: only {len(spans)} of the {len(wanted)} hot functions found: "
                 "no symbols, or a stale list")
    total = sum(spans.values())
    lo = min(spans)
    hi = max(start + size for start, size in spans.items())
    limit = 2 * total + 64 * 1024
    print(f"{binary}: {len(spans)} hot functions, {total:,} bytes, laid out over "
          f"{hi - lo:,} bytes (limit {limit:,})")
    if hi - lo > limit:
        sys.exit(f"{binary}: the hot functions are spread over {hi - lo:,} bytes of text, more "
                 f"than {limit:,}: the link did not order them")


if __name__ == "__main__":
    main()
