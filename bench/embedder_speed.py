"""Speed of the local embedder: cold start, texts/s, query latency, resident memory.

    python -m bench.embedder_speed [--threads 2] [--onnx OTHER.onnx] [--out FILE]

Texts are the recall set's memories and questions (8-20 words). Reported, with the machine's load
average (the machine may be shared: CPU seconds are steadier than wall time):
- cold start: a fresh interpreter imports Mnemos' embedder, loads the model and embeds one text
  (wall and CPU seconds; median of 3);
- texts/s one at a time (the store path) and in batches of 32 (reindex);
- query latency p50 / p95, one text at a time, `--threads` onnxruntime threads;
- resident memory after loading, and after the batched run.
`--onnx` measures another ONNX export of the same model (same tokenizer and pooling) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.recall_eval import RESULTS, load_pairs
from mnemos.embedding.local import LocalEmbedder, _session

COLD = """
import time
began = time.perf_counter()
from mnemos.embedding import load_embedder
embedder = load_embedder("local", threads={threads})
embedder.embed(["a first text"])
print(time.perf_counter() - began)
"""


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cold_start(threads: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-c", COLD.format(threads=threads)],
            capture_output=True,
            text=True,
            check=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(float(done.stdout.strip()))
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {"wall_s": round(sorted(walls)[1], 3), "cpu_s": round(sorted(cpus)[1], 3)}


def measure(embedder: LocalEmbedder, texts: list[str]) -> dict[str, Any]:
    embedder.embed(texts[:8])  # warm up
    latencies, cpu = [], time.process_time()
    for text in texts:
        began = time.perf_counter()
        embedder.embed([text])
        latencies.append(time.perf_counter() - began)
    one_cpu = time.process_time() - cpu
    began, cpu = time.perf_counter(), time.process_time()
    embedder.embed(texts)
    batch_wall, batch_cpu = time.perf_counter() - began, time.process_time() - cpu
    ms = sorted(x * 1000 for x in latencies)
    return {
        "texts_per_s_one_at_a_time": round(len(texts) / sum(latencies), 1),
        "texts_per_s_batches_of_32": round(len(texts) / batch_wall, 1),
        "query_p50_ms": round(ms[len(ms) // 2], 2),
        "query_p95_ms": round(ms[int(0.95 * len(ms))], 2),
        "cpu_ms_per_text_one_at_a_time": round(one_cpu * 1000 / len(texts), 2),
        "cpu_ms_per_text_batched": round(batch_cpu * 1000 / len(texts), 2),
        "rss_mib_after_batches": round(rss_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--onnx", type=Path, help="another ONNX export to measure beside it")
    parser.add_argument("--out", type=Path, default=RESULTS / "embedder_speed.json")
    args = parser.parse_args()
    pairs, distractors = load_pairs()
    texts = [p["memory"] for p in pairs] + distractors + [p["question"] for p in pairs]

    report: dict[str, Any] = {
        "load_average_before": os.getloadavg(),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "texts": len(texts),
        "mean_words": round(float(np.mean([len(t.split()) for t in texts])), 1),
        "cold_start": cold_start(args.threads),
    }
    rss_before = rss_mib()
    embedder = LocalEmbedder(threads=args.threads)
    report["rss_mib_interpreter"] = round(rss_before, 1)
    report["rss_mib_after_load"] = round(rss_mib(), 1)
    report[embedder.model] = measure(embedder, texts)
    if args.onnx:
        other = LocalEmbedder(threads=args.threads)
        other._session = _session(args.onnx, args.threads)
        vectors, reference = other.embed(texts), embedder.embed(texts)
        cosines = (vectors * reference).sum(axis=1)
        report[args.onnx.name] = {
            **measure(other, texts),
            "cosine_to_default_min": round(float(cosines.min()), 4),
            "cosine_to_default_mean": round(float(cosines.mean()), 4),
        }
    report["load_average_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
