"""An OpenAI-compatible `/v1/embeddings` endpoint as the embedder (Ollama, vLLM, TEI, OpenAI).

Standard library HTTP only (one short request per call), so no client library is a dependency.
Every failure is an `EmbedderUnavailable` that says what the endpoint did; nothing it answers
is trusted until checked: one finite vector per text, in order, all of the expected size.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mnemos.errors import EmbedderRefused, EmbedderUnavailable

log = logging.getLogger(__name__)

BATCH = 64  # inputs per request: within every server's default limits
MAX_ANSWER_BYTES = 64 * 1024 * 1024
PIECE = 64 * 1024  # an answer is read this much at a time, its size and deadline checked
BYTES_PER_NUMBER = 40  # "-1.2345678901234567e-05, " is 25: an answer's most per number...
BYTES_PER_TEXT = 1024  # ... per text (its object, index, whitespace) ...
ANSWER_MARGIN = 64 * 1024  # ... and in all (usage, model name, whitespace)
PROBE_DIMENSIONS = 16_384
"""The largest vector the startup probe (its size not known yet) reads an answer for."""
REFUSED = frozenset({400, 413, 422})
"""HTTP statuses by which an endpoint refuses the texts themselves (OpenAI, vLLM and TEI: an
input past the model's context), not for want of service: `EmbedderRefused`, so the worker
sets that memory aside instead of failing its batch."""


def endpoint_url(url: str) -> str:
    """The embeddings URL for what the user gave: a base URL, `.../v1`, or the full path.

    >>> endpoint_url("http://127.0.0.1:11434")
    'http://127.0.0.1:11434/v1/embeddings'
    >>> endpoint_url("http://vllm:8000/v1/")
    'http://vllm:8000/v1/embeddings'
    """
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/embeddings"):
        path = path + "/embeddings" if path.endswith("/v1") else path + "/v1/embeddings"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class EndpointEmbedder:
    """Embeds by POSTing `{"model", "input"}` to an OpenAI-compatible embeddings endpoint.

    `dimensions` 0 asks the endpoint once (embedding one word) when the embedder is built, so a
    wrong URL, model or key fails at startup rather than at the first store. Vectors are
    L2-normalised here, whatever the server does. Thread-safe: each call is its own request.
    `name` is the model asked for; `model`, what its vectors record, is `name@dimensions`.
    """

    remote = True

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str = "",
        dimensions: int = 0,
        timeout_seconds: float = 10.0,
    ) -> None:
        if not model:
            raise ValueError(
                "MNEMOS_EMBEDDER_MODEL must name the model when MNEMOS_EMBEDDER is a URL"
            )
        self.url = endpoint_url(url)
        self.name = model
        self._api_key = api_key
        self._timeout = timeout_seconds
        self.dimensions = dimensions
        if not dimensions:
            self.dimensions = self._request(["dimensions"]).shape[1]
        # What every vector records: the name with the size, as an endpoint's name is often an
        # alias (vLLM's --served-model-name, a gateway's route, an Ollama tag) that may come to
        # name a model of another size: its vectors are then another model's, queued by
        # `mnemos reindex`, never compared with the new ones (review22, finding 3).
        self.model = f"{model}@{self.dimensions}"
        # What code before migration 0026 recorded instead (a rolling upgrade's old processes):
        # the same model's vectors, adopted by the embedding worker.
        self.former_model: str | None = model

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.empty((0, self.dimensions), dtype=np.float32)
        batches = [self._request(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)]
        vectors = np.concatenate(batches)
        if vectors.shape[1] != self.dimensions:
            raise self._error(
                f"answered vectors of {vectors.shape[1]} dimensions, expected {self.dimensions} "
                "(MNEMOS_EMBEDDER_DIMENSIONS, or what it answered at startup)"
            )
        return vectors

    def _request(self, texts: Sequence[str]) -> NDArray[np.float32]:
        body = json.dumps({"model": self.name, "input": list(texts), "encoding_format": "float"})
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, body.encode(), headers, method="POST")
        deadline = time.monotonic() + self._timeout
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                raw = self._read(response, len(texts), deadline)
        except urllib.error.HTTPError as exc:
            log.warning("embeddings endpoint %s: HTTP %s %s", self.url, exc.code, _snippet(exc))
            kind = EmbedderRefused if exc.code in REFUSED else EmbedderUnavailable
            raise self._error(f"answered HTTP {exc.code}", kind) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self._error(f"could not be reached: {reason}") from exc
        return self._vectors(raw, len(texts))

    def _read(self, response: http.client.HTTPResponse, count: int, deadline: float) -> bytes:
        """The answer's body, read a piece at a time: refused unparsed once it is longer than
        `count` vectors can be (an 8-dimension text's answer is under 2 KB; a hostile endpoint
        answered 64 MB, parsed into 1.2 GB: review22, finding 7), or once the call is past its
        `deadline` (the socket's timeout bounds each read only: an endpoint that drips a byte a
        second held a call for as long as it dripped, finding 5)."""
        numbers = self.dimensions or PROBE_DIMENSIONS
        limit = min(
            MAX_ANSWER_BYTES, ANSWER_MARGIN + count * (BYTES_PER_TEXT + BYTES_PER_NUMBER * numbers)
        )
        pieces: list[bytes] = []
        size = 0
        while piece := response.read1(PIECE):
            size += len(piece)
            if size > limit:
                raise self._error(f"answered more than {limit} bytes for {count} texts")
            if time.monotonic() > deadline:
                raise self._error(f"took more than {self._timeout:g} s to answer")
            pieces.append(piece)
        return b"".join(pieces)

    def _vectors(self, raw: bytes, count: int) -> NDArray[np.float32]:
        try:
            items = _items(json.loads(raw))
            rows = [[float(x) for x in item["embedding"]] for item in _ordered(items, count)]
        # A body nested past the parser's depth (RecursionError), a number too large for a
        # float (OverflowError): as malformed as any other (review22, finding 2).
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
            raise self._error(f"answered something that is not an embeddings list: {exc}") from exc
        if len(rows) != count:
            raise self._error(f"answered {len(rows)} vectors for {count} texts")
        sizes = {len(row) for row in rows}
        if len(sizes) != 1 or 0 in sizes:
            raise self._error(f"answered vectors of differing or zero sizes {sorted(sizes)}")
        vectors = np.array(rows, dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.isfinite(vectors).all() or (norms == 0).any() or not math.isfinite(norms.max()):
            raise self._error("answered a vector that is zero or not finite")
        normalised: NDArray[np.float32] = (vectors / norms).astype(np.float32)
        return normalised

    def _error(
        self, problem: str, kind: type[EmbedderUnavailable] = EmbedderUnavailable
    ) -> EmbedderUnavailable:
        """The error callers see names the model, not the endpoint's address (it is logged)."""
        log.warning("embeddings endpoint %s (model %r) %s", self.url, self.name, problem)
        return kind(
            f"The embeddings endpoint (model {self.name!r}) {problem}",
            details={"model": self.name},
        )


def _items(answer: Any) -> list[dict[str, Any]]:
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        raise ValueError('no "data" list')
    items: list[dict[str, Any]] = answer["data"]
    if not all(
        isinstance(item, dict) and isinstance(item.get("embedding"), list) for item in items
    ):
        raise ValueError('an item without an "embedding" list')
    return items


def _ordered(items: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The items in `index` order, when their indexes are `0 .. count - 1` once each (an answer
    without any index is taken in its order): a text never gets another text's vector, as from a
    proxy that numbers each sub-batch from 0 (review22, finding 6)."""
    if all("index" not in item for item in items):
        return items
    indexes = [item.get("index") for item in items]
    whole = [index for index in indexes if isinstance(index, int) and not isinstance(index, bool)]
    if len(whole) != len(indexes) or sorted(whole) != list(range(count)):
        raise ValueError(f"indexes {indexes[:10]} are not each of 0 to {count - 1} once")
    return sorted(items, key=lambda item: int(item["index"]))


def _snippet(error: urllib.error.HTTPError) -> str:
    try:
        body = error.read(300)
    except OSError:
        return ""
    return body.decode("utf-8", "replace").strip().replace("\n", " ")
