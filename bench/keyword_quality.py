"""Keyword ranking quality on the recall set: does a search of a rare and a common word of a
memory rank that memory first among the memories holding both?

    python -m bench.keyword_quality --backend sqlite --backend postgresql --out FILE

The set is `bench/recall/` (420 short memories: 210 answers and 210 distractors on the same
topics), stored for one agent in a fresh database through the API. For each memory, the query
is its rarest word held by at least one other memory and its most common word (by how many of
the 420 memories hold each, prefixes as the search matches them); the memory is the right
answer, every other match (it holds both words) a competitor. Reported per backend: hit@1,
MRR and recall@5 over the queries with at least two matches (the others rank trivially), and
each query's ranked ids, so two runs can be compared query by query.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from bench.recall_eval import AGENT, STOP, load_pairs, store_all
from bench.run import database
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.search import words_of
from mnemos.storage import migrate, open_store

LIMIT = 50


def queries(memories: list[str]) -> list[tuple[int, str]]:
    """(index of the right memory, query) for each memory that has a rare and a common word."""
    words = [{w for w in words_of(m) if len(w) > 3 and w not in STOP} for m in memories]

    def holders(word: str) -> int:
        return sum(any(w.startswith(word) for w in ws) for ws in words)

    found = []
    for index, own in enumerate(words):
        counted = sorted((holders(w), w) for w in own)
        rare = [w for n, w in counted if n >= 2]
        if len(rare) < 1 or counted[-1][1] == rare[0]:
            continue
        found.append((index, f"{rare[0]} {counted[-1][1]}"))
    return found


def measure(backend: str) -> dict[str, Any]:
    pairs, distractors = load_pairs()
    memories = [p["memory"] for p in pairs] + distractors
    with tempfile.TemporaryDirectory(prefix="mnemos-kq-") as tmp:
        url, drop = database(backend, Path(tmp))
        try:
            settings = Settings(database_url=url, embedder="none", rate_limit_per_minute=0)
            migrate(settings)
            store = open_store(settings)
            user = accounts.create_user(store, "Quality", "quality@bench.test", None)
            key = accounts.create_agent(store, user.user.id, "Quality agent", None).api_key
            with TestClient(create_app(settings, store, None)) as http:
                http.headers["X-API-Key"] = key
                store_all(http, memories)  # type: ignore[arg-type]
                return ranked(http, memories)
        finally:
            store.close()
            drop()


def ranked(http: Any, memories: list[str]) -> dict[str, Any]:
    hits = reciprocal = at5 = 0
    rows: list[dict[str, Any]] = []
    for index, query in queries(memories):
        answer = http.get(
            f"{AGENT}/search", params={"query": query, "mode": "keyword", "limit": LIMIT}
        )
        answer.raise_for_status()
        found = [item["content"] for item in answer.json()["data"]]
        if len(found) < 2:
            continue
        rank = found.index(memories[index]) + 1 if memories[index] in found else None
        rows.append({"query": query, "matches": len(found), "rank": rank})
        if rank is not None:
            hits += rank == 1
            reciprocal += 1 / rank  # type: ignore[assignment]
            at5 += rank <= 5
    n = len(rows)
    return {
        "queries": n,
        "hit@1": round(hits / n, 3),
        "MRR": round(reciprocal / n, 3),
        "recall@5": round(at5 / n, 3),
        "mean matches": round(sum(r["matches"] for r in rows) / n, 1),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {backend: measure(backend) for backend in args.backend or ["sqlite"]}
    for backend, figures in report.items():
        summary = {k: v for k, v in figures.items() if k != "rows"}
        print(f"{backend}: {summary}", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
