#!/usr/bin/env bash
# In-process measurements (second run: line_safe as of 4aa1ed7; no migration), each under flock -x: line_safe's cost on the export (both backends,
# the templates the export A/B loaded); a formerly refused room search (main = 07d7b8a's src on
# PYTHONPATH, branch = this tree), ABAB; migration 0025 on copies of the 100,000-memory templates.
set -u
cd "$(dirname "$0")/../../../.."
R=bench/results/2026-12-05f/fixsearch20
PG=postgresql://postgres@127.0.0.1:5432
lock() { flock -x /tmp/mnemos-bench.lock "$@"; }
echo "== line_safe sqlite $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
cp /tmp/fixsearch20-tpl.db /tmp/fixsearch20-ls.db
lock .venv/bin/python $R/line_safe.py.txt sqlite:////tmp/fixsearch20-ls.db 3
echo "== line_safe postgresql $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
psql -q -h 127.0.0.1 -U postgres -c 'CREATE DATABASE h_fixsearch20_ls TEMPLATE h_fixsearch20_tpl'
lock .venv/bin/python $R/line_safe.py.txt $PG/h_fixsearch20_ls 3
for side in main branch main branch; do
  path=""; [ $side = main ] && path=/tmp/fixsearch20-main/src
  echo "== room_count $side $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$path${path:+:}$PWD lock .venv/bin/python $R/room_count.py.txt 20
done
echo "== migration 0025 sqlite $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
lock .venv/bin/python - sqlite:////tmp/fixsearch20-ls.db <<'PY'
import sys, time
from mnemos.config import Settings
from mnemos.storage import migrate
psql -q -h 127.0.0.1 -U postgres -c 'DROP DATABASE IF EXISTS h_fixsearch20_ls'
rm -f /tmp/fixsearch20-ls.db*
echo "== done $(date -u +%T)"
