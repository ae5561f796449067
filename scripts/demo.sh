#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make demo: lastcall supervises a shell with a background grandchild and a setsid escapee, gets
# SIGTERM, drains the whole tree, and writes its report.
set -eu
LASTCALL=${1:-build/lastcall}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== lastcall --grace 2s --report $work/report.json -- sh -c '...'"
"$LASTCALL" --grace 2s --report "$work/report.json" --ready-file "$work/ready" -- sh -c '
  sleep 1000 &                                            # a grandchild in the same group
  setsid sh -c "trap \"\" TERM; exec sleep 1001" &        # an escapee that ignores SIGTERM
  trap "echo demo: main shell got SIGTERM, exiting; exit 0" TERM
  echo "demo: tree started"; wait' &
pid=$!
while [ ! -e "$work/ready" ]; do sleep 0.05; done   # readiness: the child is running
sleep 0.3
echo "== kill -TERM $pid"
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
echo "== lastcall exited with $status; lastcall report $work/report.json:"
"$LASTCALL" report --width 100 "$work/report.json"
echo "== the same report as JSON (docs/report.md):"
python3 -m json.tool "$work/report.json"
echo "== leftover processes from the demo tree:"
pgrep -f 'sleep 100[01]' || echo "(none)"
