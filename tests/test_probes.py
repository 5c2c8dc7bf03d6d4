"""A search's query embedded beside the store's reads (`mnemos.domain.probes`), on both backends:
the embedding and the reads that do not need it overlap (seen by events and thread ids, not by
timing), a failing embedding answers in the documented shapes, and no search leaves an
embedding running once it has answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from numpy.typing import NDArray

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.ports import Embedder
from mnemos.domain.probes import Probes
from mnemos.errors import EmbedderUnavailable
from mnemos.indexer import drain
from mnemos.storage.base import Store
from tests.test_recall import AISLE, OTHERS, acme, embedder, ids, put, search  # noqa: F401
from tests.world import Actor

QUESTION = "which seat does the client like on planes"
"""At most 8 words: a hybrid search's keyword leg reads for it (a longer query has none)."""
WAIT = 5.0  # seconds a hook waits for the other side: only reached when they do not overlap


class Watched:
    """The real embedder, with hooks on the query's own embedding (the embedding worker's
    texts, the memories, go straight through): it waits for `reads` (the store's reads that do
    not need the vector) to begin, for at most `WAIT`, and notes what it saw."""

    def __init__(self, inner: Embedder, fail: bool = False, linger: float = 0.0):
        self.inner = inner
        self.model = inner.model
        self.dimensions = inner.dimensions
        self.fail = fail
        self.linger = linger  # seconds the query's embedding runs on once the reads began
        self.reads = threading.Event()
        self.saw_reads: bool | None = None
        self.thread: int | None = None
        self.finished = threading.Event()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if list(texts) != [QUESTION]:
            return self.inner.embed(texts)
        self.thread = threading.get_ident()
        try:
            self.saw_reads = self.reads.wait(WAIT)
            if self.linger:
                threading.Event().wait(self.linger)
            if self.fail:
                raise EmbedderUnavailable("The embedding service answered 500")
            return self.inner.embed(texts)
        finally:
            self.finished.set()


def watch_reads(
    monkeypatch: pytest.MonkeyPatch, store: Store, name: str, watched: Watched, fail: bool = False
) -> list[int]:
    """Mark the store's `name` reads in `watched` when they begin (and make them fail); the
    threads they ran on."""
    original = getattr(store, name)
    threads: list[int] = []

    def reading(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        watched.reads.set()
        if fail:
            raise RuntimeError("the database went away")
        return original(*args, **kwargs)

    monkeypatch.setattr(store, name, reading)
    return threads


@pytest.fixture
def stored(
    settings: Settings,
    store: Store,
    embedder: Embedder,  # noqa: F811
    acme: dict[str, Actor],  # noqa: F811
) -> str:
    """AISLE and the others stored by `acme`'s writer and embedded: AISLE's id."""
    with TestClient(create_app(settings, store, embedder)) as client:
        aisle = put(client, acme["writer"], AISLE)
        for text in OTHERS:
            put(client, acme["writer"], text)
        put(client, acme["writer"], "The client flies to Oslo on Friday.")  # a keyword match
    drain(store, embedder)
    return aisle


@contextmanager
def served(settings: Settings, store: Store, watched: Watched) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store, watched), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_the_query_is_embedded_while_the_store_reads(
    settings: Settings,
    store: Store,
    embedder: Embedder,  # noqa: F811
    acme: dict[str, Actor],  # noqa: F811
    stored: str,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """The owners' sign bits (semantic) or the keyword leg (hybrid, read first) are read on the
    request's thread while the query's embedding runs on another: the embedding sees the reads
    begin before it ends (before, it ran first, on the request's thread, and saw nothing)."""
    watched = Watched(embedder)
    first = "_sign_bits" if mode == "semantic" else "rank_memories"
    threads = watch_reads(monkeypatch, store, first, watched)
    with served(settings, store, watched) as client:
        body = search(client, acme["writer"], QUESTION, mode=mode)
    assert stored in ids(body)
    assert watched.saw_reads is True
    assert threads and watched.thread not in threads


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
@pytest.mark.usefixtures("stored")
def test_a_failing_embedding_answers_as_documented(
    settings: Settings,
    store: Store,
    embedder: Embedder,  # noqa: F811
    acme: dict[str, Actor],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """An embedding service that fails while the store reads: semantic is a 503
    `embedder_unavailable`, hybrid answers by keyword and says why in `meta`."""
    watched = Watched(embedder, fail=True)
    watch_reads(monkeypatch, store, "_sign_bits", watched)
    watch_reads(monkeypatch, store, "rank_memories", watched)
    with served(settings, store, watched) as client:
        response = client.get(
            "/api/v1/agent/memories/search",
            params={"query": QUESTION, "mode": mode},
            headers=acme["writer"].headers,
        )
        if mode == "semantic":
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "embedder_unavailable"
        else:
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["meta"]["mode"] == "keyword"
            assert body["meta"]["requested_mode"] == "hybrid"
            assert body["meta"]["fallback"] == "embedder_unavailable"
            keyword = search(client, acme["writer"], QUESTION, mode="keyword")
            assert ids(body) == ids(keyword)
    assert watched.finished.is_set()


@pytest.mark.usefixtures("stored")
def test_a_search_that_fails_leaves_no_embedding_running(
    settings: Settings,
    store: Store,
    embedder: Embedder,  # noqa: F811
    acme: dict[str, Actor],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store fails while the query is still being embedded: the answer (a 500 in the
    documented error shape) comes only once the embedding has ended."""
    watched = Watched(embedder, linger=0.2)
    watch_reads(monkeypatch, store, "_sign_bits", watched, fail=True)
    with served(settings, store, watched) as client:
        response = client.get(
            "/api/v1/agent/memories/search",
            params={"query": QUESTION, "mode": "semantic"},
            headers=acme["writer"].headers,
        )
        assert watched.finished.is_set()
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"


def test_an_embedding_not_started_is_cancelled(embedder: Embedder) -> None:  # noqa: F811
    """With every thread busy, a probe left unused is cancelled at the block's end, not run."""
    probes = Probes(embedder, threads=1)
    busy = threading.Event()
    release = threading.Event()

    def occupy() -> bool:
        busy.set()
        return release.wait(WAIT)

    blocker = probes._executor().submit(occupy)
    assert busy.wait(WAIT)
    with probes.ahead(QUESTION) as probe:
        pass
    release.set()
    blocker.result()
    assert probe._future.cancelled()
    with probes.ahead(QUESTION) as probe:
        vector = probe()
    np.testing.assert_array_equal(vector, embedder.embed([QUESTION])[0])
    probes.close()
