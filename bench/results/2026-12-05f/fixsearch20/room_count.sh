#!/usr/bin/env bash
# The room search A/B alone (main = 07d7b8a's src on PYTHONPATH, via
# `git archive 07d7b8a src | tar -x -C /tmp/fixsearch20-main`; branch = this tree), ABAB,
# each run under flock -x. (inproc2.sh's tail, after the room runs, is cut: use this.)
set -u
cd "$(dirname "$0")/../../../.."
R=bench/results/2026-12-05f/fixsearch20
for side in main branch main branch; do
  path=""; [ $side = main ] && path=/tmp/fixsearch20-main/src
  echo "== room_count $side $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$path${path:+:}$PWD flock -x /tmp/mnemos-bench.lock .venv/bin/python $R/room_count.py.txt 20
done
