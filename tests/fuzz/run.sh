#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs every libFuzzer target of a fuzz build for SECONDS each, JOBS at a time.
#   tests/fuzz/run.sh BUILD_DIR SECONDS [JOBS]
# Seeds come from tests/fuzz/corpus/<target>/ and are only read: new inputs go to
# BUILD_DIR/corpus/<target>/, crashes to BUILD_DIR/artifacts/<target>-crash-<sha1>. A target
# fails on a crash, a sanitizer report, a timeout (10 s for one input) or an out-of-memory.
set -eu
build=$1
seconds=$2
jobs=${3:-1}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/corpus" "$build/artifacts" "$build/fuzz-logs"

run_one() {
    bin=$1
    name=$(basename "$bin")
    target=${name#fuzz_}
    mkdir -p "$build/corpus/$target" "$src/corpus/$target"
    start=$(date +%s)
    # -close_fd_mask=3: the CLI targets print usage text on every input; libFuzzer keeps its own
    # copy of stderr for its reports.
    if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" \
        "$build/corpus/$target" "$src/corpus/$target" >"$build/fuzz-logs/$target.log" 2>&1; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz-logs/$target.log")
        echo "fuzz $target: ok, ${execs:-?} inputs in $(($(date +%s) - start))s"
    else
        echo "fuzz $target: FAILED (log: $build/fuzz-logs/$target.log)"
        grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$build/fuzz-logs/$target.log" | head -20
        return 1
    fi
}

bins=$(find "$build/fuzz" -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x | sort)
[ -n "$bins" ] || { echo "no fuzz targets in $build/fuzz"; exit 1; }
status=0
# A small job pool: at most $jobs targets at once, each with its own log.
running=0
for bin in $bins; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || status=1
        running=$((running - 1))
    fi
    run_one "$bin" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || status=1
    running=$((running - 1))
done
if [ "$status" -ne 0 ]; then
    echo "fuzzing found failures; reproduce with: $build/fuzz/fuzz_<target> $build/artifacts/<file>"
fi
exit "$status"
