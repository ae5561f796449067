#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Rewrites #include "lastcall/NAME.hpp" to its subsystem folder (scripts/layout.map), so a branch
# written against the flat layout builds after a merge. Idempotent.
set -eu
cd "$(dirname "$0")/.."
expr=""
while read -r dir names; do
  for n in $names; do expr="$expr -e s#\"lastcall/$n\\.hpp\"#\"lastcall/$dir/$n.hpp\"#g"; done
done < scripts/layout.map
files=$(git ls-files -co --exclude-standard '*.cpp' '*.hpp' '*.h' '*.c' '*.cc')
# shellcheck disable=SC2086
sed -i $expr $files
# A merge can leave the same header twice (once per spelling): keep the first.
for f in $files; do
  awk '/^#include /{ if (seen[$0]++) next } { print }' "$f" > "$f.tmp" && cat "$f.tmp" > "$f" && rm "$f.tmp"
done
