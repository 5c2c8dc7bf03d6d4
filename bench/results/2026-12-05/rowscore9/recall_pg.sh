#!/bin/bash
# Hybrid recall@5 of bench.recall_eval against a PostgreSQL server, before and after.
cd /work/main/.wt/rowscore9
PY=/work/main/.venv/bin/python
for side in before after; do
  if [ $side = before ]; then SRC=/tmp/r9-main/src; else SRC=/tmp/r9-after/src; fi
  DB=r9_recall_$side
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
  export MNEMOS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/$DB MNEMOS_RATE_LIMIT_PER_MINUTE=0 PYTHONPATH=$SRC:$PWD
  $PY -m mnemos migrate
  USER_ID=$($PY -m mnemos admin create-user --name Recall --email recall@example.com | tail -1 | $PY -c "import json,sys; print(json.load(sys.stdin)['id'])")
  KEY=$($PY -m mnemos admin create-agent --owner $USER_ID --name "Recall Agent" | tail -1 | $PY -c "import json,sys; print(json.load(sys.stdin)['api_key'])")
  $PY -m mnemos serve --port 8620 --log-level warning & SERVER=$!
  sleep 8
  uptime > bench/results/2026-12-05/rowscore9/recall-pg-$side.uptime
  flock -x /tmp/mnemos-bench.lock $PY -m bench.recall_eval --url http://127.0.0.1:8620 --api-key $KEY --out bench/results/2026-12-05/rowscore9/recall-pg-$side > bench/results/2026-12-05/rowscore9/recall-pg-$side.md 2> bench/results/2026-12-05/rowscore9/recall-pg-$side.log
  uptime >> bench/results/2026-12-05/rowscore9/recall-pg-$side.uptime
  kill $SERVER; wait $SERVER
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
done
