"""Embedders: implementations of `mnemos.domain.ports.Embedder`, chosen by `MNEMOS_EMBEDDER`.

- `local` (default): all-MiniLM-L6-v2 (int8, onnxruntime), offline, weights from a package.
- `none`: no embedder; search is by words only.
- an http(s) URL: an OpenAI-compatible `/v1/embeddings` endpoint (`MNEMOS_EMBEDDER_MODEL`,
  optional `MNEMOS_EMBEDDER_API_KEY`).

docs/search.md describes each; `load_embedder` builds one, drivers imported when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mnemos.config import Settings
    from mnemos.domain.ports import Embedder

__all__ = ["embedder_from_settings", "load_embedder", "worker_embedder"]


def load_embedder(
    spec: str = "local",
    *,
    model: str = "",
    api_key: str = "",
    dimensions: int = 0,
    timeout_seconds: float = 10.0,
    threads: int = 1,
    cache_dir: Path | None = None,
) -> Embedder | None:
    """The embedder `spec` names: `"local"`, `"none"` (None: keyword search only) or a URL.

    `cache_dir` is where the local model derived from the packaged weights is kept between
    starts (default `~/.cache/mnemos`, `mnemos.embedding.integer`).

    Raises `EmbedderUnavailable` when it cannot be built (local weights missing, endpoint
    unreachable or answering nonsense) and `ValueError` for a spec it does not know.

    >>> load_embedder("none") is None
    True
    """
    kind = spec.strip()
    if kind.lower() == "none":
        return None
    if kind.lower() == "local":
        from mnemos.embedding.integer import default_cache_dir
        from mnemos.embedding.local import LocalEmbedder

        return LocalEmbedder(threads=threads, cache_dir=cache_dir or default_cache_dir())
    if kind.lower().startswith(("http://", "https://")):
        from mnemos.embedding.remote import EndpointEmbedder

        return EndpointEmbedder(
            kind,
            model,
            api_key=api_key,
            dimensions=dimensions,
            timeout_seconds=timeout_seconds,
        )
    raise ValueError(
        f"Unknown embedder {spec!r}: use 'local', 'none' or the http(s) URL of an "
        "OpenAI-compatible embeddings endpoint"
    )


def embedder_from_settings(settings: Settings) -> Embedder | None:
    """The embedder the settings (`MNEMOS_EMBEDDER*`) describe."""
    return load_embedder(
        settings.embedder,
        model=settings.embedder_model,
        api_key=settings.embedder_api_key,
        dimensions=settings.embedder_dimensions,
        timeout_seconds=settings.embedder_timeout_seconds,
        threads=settings.embedder_threads,
        cache_dir=settings.embedder_cache_dir,
    )


def worker_embedder(embedder: Embedder) -> Callable[[], Embedder]:
    """What builds the embedding worker's embedder, in the worker's thread (`mnemos.indexer`).

    The local model gets a session of its own whose runs use only that thread: sharing the
    requests' session, the worker's batches ran on onnxruntime's pool thread at nice 0 and
    competed with every tenant's requests (docs/decisions.md, "The embedding worker's own
    session"). An endpoint embedder is shared as it is.
    """
    from mnemos.embedding.local import LocalEmbedder

    if isinstance(embedder, LocalEmbedder):
        return embedder.single_threaded
    return lambda: embedder
