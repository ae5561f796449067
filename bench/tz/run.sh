#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Issue 19.18: lastcall's TZif reader against date/tz (libhowardhinnant-date-dev). Builds
# tz_cost twice against the build directory's liblastcall_core.a, then runs each RUNS times
# alternately and prints medians of the first zone lookup, peak RSS, and the sizes involved.
# Usage: bench/tz/run.sh [BUILD_DIR] [RUNS] [ZONE]
set -eu
build=${1:-build}
runs=${2:-200}
zone=${3:-Europe/Berlin}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags="-std=c++20 -O2"
c++ $flags -I"$root/include" "$here/tz_cost.cpp" "$build/liblastcall_core.a" -o "$out/with-lastcall"
c++ $flags -DWITH_DATE "$here/tz_cost.cpp" -ldate-tz -o "$out/with-date"
i=0
while [ $i -lt "$runs" ]; do
    "$out/with-lastcall" "$zone" >> "$out/lastcall.txt"
    "$out/with-date" "$zone" >> "$out/date.txt"
    i=$((i + 1))
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for impl in lastcall date; do
    us=$(cut -d' ' -f1 "$out/$impl.txt" | median)
    kb=$(cut -d' ' -f2 "$out/$impl.txt" | median)
    off=$(head -1 "$out/$impl.txt" | cut -d' ' -f3)
    echo "$impl: first lookup of $zone ${us} us (median of $runs), peak RSS ${kb} kB, offset ${off}s"
done
ls -l /usr/lib/x86_64-linux-gnu/libdate-tz.so.3.0.1 | awk '{print "libdate-tz.so: " $5 " bytes (no static archive in Debian)"}'
size -A "$out/with-lastcall" | awk '/^.text/ {print "with-lastcall .text: " $2}'
size -A "$out/with-date" | awk '/^.text/ {print "with-date .text: " $2}'
echo "zoneinfo entries date/tz lists at first use: $(find /usr/share/zoneinfo -type f | wc -l)"
