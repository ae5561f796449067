#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Resolves merge-conflict hunks made only of #include lines (a branch written against the flat
layout meeting the subsystem folders): keeps the union of both sides, in order, without
duplicates. Other hunks are left for a person. Run scripts/fix-includes.sh afterwards."""
import re
import sys

for path in sys.argv[1:]:
    text = open(path).read()
    out, i, left = [], 0, 0
    pattern = re.compile(r"^<<<<<<< [^\n]*\n(.*?)^=======\n(.*?)^>>>>>>> [^\n]*\n", re.S | re.M)

    def resolve(m):
        ours, theirs = m.group(1).splitlines(), m.group(2).splitlines()
        lines = [l for l in ours + theirs if l.strip()]
        if not all(l.startswith("#include") for l in lines):
            return m.group(0)
        seen, keep = set(), []
        for l in ours + theirs:
            if l.strip() and l not in seen:
                seen.add(l)
                keep.append(l)
        return "\n".join(keep) + "\n"

    new = pattern.sub(resolve, text)
    open(path, "w").write(new)
    if "<<<<<<< " in new:
        print(f"{path}: conflicts left")
