"""The Mem0 side of `bench.recall_eval --mem0-python PY`, run in Mem0's own venv.

    <venv>/bin/python bench/peer_mem0_recall.py SPEC.json OUT.json

Mem0 is never a dependency of Mnemos: this file imports only the standard library and what the
peer's venv has (`pip install mem0ai`; no torch). Mem0's OpenAI embedder is pointed at the
`/v1/embeddings` server the harness runs over Mnemos' own local model, so both sides rank with
the same vectors; qdrant on local disk; `add(..., infer=False)`, so no LLM is called. Mem0 runs
in-process (no HTTP of its own), which favours it; its query embedding goes over loopback HTTP.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("OPENAI_API_KEY", "unused: infer=False never calls the LLM")


def main() -> None:
    spec: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
    from mem0 import Memory  # type: ignore[import-not-found]

    home = Path(tempfile.mkdtemp(prefix="mem0-recall-"))
    memory = Memory.from_config(
        {
            "embedder": {
                "provider": "openai",
                "config": {
                    "model": spec["model"],
                    "openai_base_url": spec["embeddings_url"],
                    "api_key": "unused",
                },
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": str(home / "qdrant"),
                    "collection_name": "recall",
                    "embedding_model_dims": 384,
                    "on_disk": True,
                },
            },
            "history_db_path": str(home / "history.db"),
        }
    )
    started = time.monotonic()
    for content in spec["memories"]:
        memory.add(content, user_id="recall", infer=False)
    load_seconds = time.monotonic() - started
    results, latencies = [], []
    for question in spec["questions"]:
        began = time.perf_counter()
        found = memory.search(question, filters={"user_id": "recall"}, top_k=spec["k"])
        latencies.append(time.perf_counter() - began)
        results.append([item["memory"] for item in found["results"]])
    ms = sorted(x * 1000 for x in latencies)
    answer = {
        "version": metadata.version("mem0ai"),
        "load_seconds": round(load_seconds, 1),
        "results": results,
        "search": {
            "p50_ms": round(ms[len(ms) // 2], 2),
            "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2),
        },
    }
    Path(sys.argv[2]).write_text(json.dumps(answer))


if __name__ == "__main__":
    main()
