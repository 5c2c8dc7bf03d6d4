#!/usr/bin/env bash
# Export A/B at 100,000 memories about one person (bench.rights), ABBA, each run under flock -x.
# main = 07d7b8a's src (git archive into /tmp/fixsearch20-main, first on PYTHONPATH);
# branch = this worktree's src. The first run keeps the loaded databases as templates.
set -u
cd "$(dirname "$0")/../../../.."
R=bench/results/2026-12-05f/fixsearch20
TPL="--template sqlite=/tmp/fixsearch20-tpl.db --template postgresql=h_fixsearch20_tpl"
run() {  # side name extra...
  local side=$1 name=$2; shift 2
  local path=""; [ "$side" = main ] && path=/tmp/fixsearch20-main/src
  echo "== $name $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$path flock -x /tmp/mnemos-bench.lock .venv/bin/python -m bench.rights \
    --memories 100000 --about 100000 --out "$R/$name" "$@"
}
run branch export-1-branch --keep-template sqlite=/tmp/fixsearch20-tpl.db --keep-template postgresql=h_fixsearch20_tpl
run main export-2-main $TPL
run main export-3-main $TPL
run branch export-4-branch $TPL
echo "== done $(date -u +%T)"
