"""Query embedding latency by onnxruntime thread count, side by side in one process.

    python -m bench.query_threads [--threads 1 --threads 2] [--rounds 400] [--out FILE]

A search embeds its query text alone (one model run) in the requests' session, whose runs use
`MNEMOS_EMBEDDER_THREADS` threads. Each thread count gets a `LocalEmbedder` of its own; the
recall set's questions (8-20 words) are embedded one at a time, the thread counts alternating in
both orders, so every count sees the same load. Also a few longer texts (a memory's length up to
the model's cut), where more threads may pay. Reports p50 / p95 / p99 ms per count and length, and
the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.recall_eval import load_pairs
from mnemos.embedding.integer import default_cache_dir
from mnemos.embedding.local import LocalEmbedder

FILLER = (
    "the customer prefers aisle seats on long flights and asked us to remember that the "
    "shipment left from the northern harbor last spring after both parties signed the contract"
).split()


def timings(embedders: dict[int, LocalEmbedder], texts: list[str], rounds: int) -> dict[int, Any]:
    spent: dict[int, list[float]] = {threads: [] for threads in embedders}
    order = list(embedders.items())
    for turn in range(rounds):
        text = texts[turn % len(texts)]
        for threads, embedder in order if turn % 2 else order[::-1]:
            began = time.perf_counter()
            embedder.embed([text])
            spent[threads].append((time.perf_counter() - began) * 1000)
    return {
        threads: {q: round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99)}
        for threads, ms in spent.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, action="append")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    counts = args.threads or [1, 2]
    cache = default_cache_dir()
    embedders = {threads: LocalEmbedder(threads=threads, cache_dir=cache) for threads in counts}
    questions = [pair["question"] for pair in load_pairs()[0]]
    for embedder in embedders.values():  # warm: first runs allocate
        embedder.embed(questions[:20])
    results: dict[str, Any] = {"load average at start": [round(x, 2) for x in os.getloadavg()]}
    results["questions"] = timings(embedders, questions, args.rounds)
    for words in (30, 60, 120, 240):
        text = " ".join((FILLER * (words // len(FILLER) + 1))[:words])
        results[f"{words} words"] = timings(embedders, [text], max(40, args.rounds // 4))
    results["load average at end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
