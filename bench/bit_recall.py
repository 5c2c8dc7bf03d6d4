"""Recall@10 of the vector search's first pass (sign bits, Hamming) followed by exact int8
rescoring of the closest N, against exact float32 search: how large `RESCORE` must be.

    python -m bench.bit_recall --texts .venv/lib --count 8000 --save /tmp/real.npy
    python -m bench.bit_recall --vectors /tmp/real.npy --out bench/results/.../bit-recall.json

Two kinds of vectors: real all-MiniLM-L6-v2 embeddings of English sentences (taken from the
docstrings and documentation of the installed Python packages, `--texts`, or a saved `.npy`),
where sign bits are least informative (sentence embeddings share a common direction); and the
bench's synthetic clustered vectors (bench/vectors.py) at 10,000 and 100,000, the two scope
sizes of the targets. Each probe is a held-out vector of the same kind; the arithmetic is the
server's own (`mnemos.storage.vector_codes`).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from bench.vectors import _centres, _draw
from mnemos.storage.vector_codes import (
    closest,
    first_pass,
    hamming,
    int8_scores,
    quantize,
    sign_bits,
)

CANDIDATES = (100, 200, 400, 800, 1600)
PROBES = 200


def sentences(root: Path, count: int) -> list[str]:
    """Distinct English-looking sentences of 8-40 words from the files under `root`."""
    seen: dict[str, None] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in {".py", ".md", ".rst", ".txt"} or not path.is_file():
            continue
        text = re.sub(r"\s+", " ", path.read_text(errors="ignore"))
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            words = sentence.split()
            if 8 <= len(words) <= 40 and sum(w.isalpha() for w in words) >= 0.7 * len(words):
                seen.setdefault(sentence)
        if len(seen) >= count:
            break
    return list(seen)[:count]


def recall(corpus: NDArray[np.float32], probes: NDArray[np.float32]) -> dict[str, float]:
    """Mean overlap of the pipeline's top 10 with the exact top 10, per candidate count: with
    the candidates chosen by Hamming distance alone ("hamming N") and by the server's
    `first_pass` (Hamming, then the query's dot product with the signs: "first pass N")."""
    quantized, scales = quantize(corpus)
    bits = sign_bits(quantized)
    keys = np.arange(len(corpus), dtype=np.int64)
    found: dict[str, list[float]] = defaultdict(list)
    for probe in probes:
        exact = set(np.argsort(-(corpus @ probe))[:10].tolist())
        distances = hamming(bits, sign_bits(probe)[0])
        for n in CANDIDATES:
            for name, kept in (
                (f"hamming {n}", closest(distances, n)),
                (f"first pass {n}", first_pass(keys, bits, probe, n, 1)),
            ):
                scores = int8_scores(quantized[kept], scales[kept], probe)
                top = kept[np.argsort(-scores)[:10]]
                found[name].append(len(exact & set(top.tolist())) / 10)
    return {name: round(float(np.mean(values)), 4) for name, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=Path, help="embed sentences found under this folder")
    parser.add_argument("--count", type=int, default=8000)
    parser.add_argument("--save", type=Path, help="save the embeddings (.npy)")
    parser.add_argument("--vectors", type=Path, help="real embeddings saved earlier (.npy)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, object] = {"candidates": CANDIDATES, "probes": PROBES}
    real = None
    if args.texts:
        from mnemos.embedding import load_embedder

        embedder = load_embedder("local")
        assert embedder is not None
        real = embedder.embed(sentences(args.texts, args.count))
        if args.save:
            np.save(args.save, real)
    elif args.vectors:
        real = np.load(args.vectors)
    rng = np.random.default_rng(17)
    if real is not None:
        order = rng.permutation(len(real))
        probes, corpus = real[order[:PROBES]], real[order[PROBES:]]
        results[f"real MiniLM, {len(corpus):,} vectors"] = recall(corpus, probes)
    centres = _centres(7)
    for size in (10_000, 100_000):
        corpus, probes = _draw(rng, centres, size), _draw(rng, centres, PROBES)
        results[f"synthetic clustered, {size:,} vectors"] = recall(corpus, probes)
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
