"""A hostile review of recall by meaning and the embedding pipeline (review22).

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "A hostile review of recall by meaning and the embedding
pipeline (2026-12-05, helper "review22")"). Endpoints are tiny loopback servers
(`tests.test_embedding.EmbeddingsServer`, or a raw socket where the answer must be dripped).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from mnemos import indexer
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import recall
from mnemos.embedding import load_embedder
from mnemos.embedding.local import MODEL as LOCAL
from mnemos.embedding.remote import EndpointEmbedder
from mnemos.errors import EmbedderUnavailable
from mnemos.indexer import drain
from mnemos.storage import migrate, open_store, queue_claims
from mnemos.storage.base import Store
from mnemos.storage.postgres import driver_url
from mnemos.storage.schema import memory_vectors, vector_chunks
from mnemos.storage.sql_vectors import CHUNK_ROWS
from tests.conftest import BACKENDS
from tests.test_claim_fair import _has_vector
from tests.test_embedding import EmbeddingsServer, good_answer
from tests.test_migration_tuya import fresh_database
from tests.test_recall import AISLE, acme, put  # noqa: F401
from tests.world import Actor, World, agent_memory

SEARCH = "/api/v1/agent/memories/search"
WORDS = "aisle seats"  # found by the keyword leg too
BOUND = 15.0  # seconds a test waits for what should happen (a bound, not a measurement)


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    yield running
    running.close()


def _endpoint(server: EmbeddingsServer, dimensions: int = 8) -> EndpointEmbedder:
    embedder = load_embedder(server.url, model="m", dimensions=dimensions)
    assert isinstance(embedder, EndpointEmbedder)
    return embedder


def _app(settings: Settings, store: Store, embedder: EndpointEmbedder) -> TestClient:
    """The app with `embedder` (its worker running), answering a server error as a 500."""
    return TestClient(create_app(settings, store, embedder), raise_server_exceptions=False)


# --- 1. one tenant's memory the endpoint refuses stops every tenant's embeddings ------------------

TOO_LONG = 8192
"""The endpoint's limit on one input (a stand-in for OpenAI's 8,192 tokens: vLLM, TEI and
OpenAI answer an input past the model's context with HTTP 400/413 for the whole request)."""


def _refusing_long_inputs(body: dict[str, Any]) -> tuple[int, bytes]:
    if any(len(text) > TOO_LONG for text in body["input"]):
        message = f"This model's maximum context length is {TOO_LONG} tokens"
        return 400, json.dumps({"error": {"message": message}}).encode()
    return good_answer(body)


def test_a_memory_the_endpoint_refuses_does_not_stop_other_tenants_embeddings(
    store: Store, world: World, server: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real worker (`Indexer`), an endpoint that refuses an input past its context (the
    content limit is 10,000 characters; 9,000 CJK characters are more than 8,192 tokens), one
    such memory of tenant Evil, then an ordinary memory of tenant Acme. A claim takes the
    newest queued memory and then each tenant's newest (`fair_batch`), so Acme's memory and
    Evil's refused one are claimed together; the batch goes to the endpoint in one request
    (give-way off, the default) and fails whole, the worker logs it, the claim expires, and the
    same batch is claimed and fails again: Acme's memory is never embedded. (With give-way on,
    each text is its own request, but the failure still drops the whole batch.) The time is
    compressed, not changed: the 30 s lease is 0 and the 2 s pause after a failure 10 ms.
    `mnemos reindex` never ends either (`drain` raises on the batch, every run).

    Suggested: embed a failed batch's texts one at a time and set aside the memory the
    endpoint refuses (dequeue it with a mark, or back off its claim: `claimed_until` doubling
    per failure), so a refused text costs its own memory only; and/or cut texts to the
    endpoint's context before sending (a character bound such as 2,048 for embeddings)."""
    monkeypatch.setattr(recall, "EMBED_LEASE", timedelta(0))
    monkeypatch.setattr(indexer, "ERROR_SECONDS", 0.01)
    server.answer = _refusing_long_inputs
    evil = world.agent(world.user("Eve", "Evil"))
    ann = world.agent(world.user("Ann", "Acme"))
    refused = agent_memory(evil, "東" * 9000)
    store.insert_memory(refused)
    waiting = agent_memory(ann, AISLE)
    store.insert_memory(waiting)
    worker = indexer.Indexer(store, _endpoint(server))
    worker.start()
    try:
        deadline = time.monotonic() + BOUND
        while not _has_vector(store, waiting.id) and time.monotonic() < deadline:
            time.sleep(0.05)
        embedded = _has_vector(store, waiting.id)
    finally:
        worker.stop()
    asked = [body["input"] for _, _, body in server.requests]
    assert any(AISLE in texts for texts in asked), "the worker never asked for Acme's memory"
    assert embedded, f"Acme's memory was never embedded in {len(asked)} requests"


def test_a_refused_memory_is_set_aside_and_reindex_tries_it_again(
    store: Store, world: World, server: EmbeddingsServer
) -> None:
    """Refused `MAX_REFUSALS` times, a memory is set aside: `drain` (`mnemos reindex`) ends,
    the backlog no longer counts it, `vectors_set_aside` does (keyword search never waits on
    the queue); `queue_for_model` (a reindex) gives it its tries again."""
    server.answer = _refusing_long_inputs
    ann = world.agent(world.user("Ann", "Acme"))
    refused = agent_memory(ann, "aisle " * 2000)
    store.insert_memory(refused)
    embedder = _endpoint(server)
    drain(store, embedder)
    assert (store.vector_backlog(), store.vectors_set_aside()) == (0, 1)
    assert not _has_vector(store, refused.id)
    tried = len(server.requests)
    assert tried == queue_claims.MAX_REFUSALS
    store.queue_for_model(embedder.model, batch=100)
    assert (store.vector_backlog(), store.vectors_set_aside()) == (1, 0)
    drain(store, embedder)
    assert len(server.requests) == tried + queue_claims.MAX_REFUSALS
    assert store.vectors_set_aside() == 1


# --- 2. an endpoint's malformed answer escapes as a 500 -------------------------------------------

MALFORMED = {
    "nested": b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError
    "huge integer": b'{"data": [{"index": 0, "embedding": [1' + b"0" * 400 + b", 1]}]}",
    "infinite index": b'{"data": [{"index": 1e999, "embedding": [1, 1]}]}',  # OverflowError
}


@pytest.mark.parametrize("answer", sorted(MALFORMED))
def test_an_endpoints_malformed_answer_is_embedder_unavailable(
    server: EmbeddingsServer, answer: str
) -> None:
    """docs/search.md: "Anything else (...) a body that is not an embeddings list (...) is `503
    embedder_unavailable`". `_vectors` catches ValueError, TypeError and KeyError only: JSON
    nested past the parser's depth raises RecursionError, an integer too large for a float
    (`float(10**400)`) and an infinite `index` (`int(1e999)`) raise OverflowError. Suggested:
    catch `(ValueError, TypeError, KeyError, OverflowError, RecursionError)` (or `Exception`)
    there; an integer `index` checked with `isinstance`."""
    embedder = _endpoint(server)
    server.answer = lambda _body: (200, MALFORMED[answer])
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["one"])


@pytest.mark.parametrize("answer", sorted(MALFORMED))
def test_a_hybrid_search_falls_back_to_keyword_on_a_malformed_answer(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    server: EmbeddingsServer,
    answer: str,
) -> None:
    """The same answers to a search's query: a hybrid search (the default, and what MCP's
    `search_memories` and the page's Search run) answers 500 `internal_error` instead of
    falling back to keyword as it does for an endpoint's HTTP 500 (`Recall.answer` falls back
    only from a `MnemosError`)."""

    def malformed_for_queries(body: dict[str, Any]) -> tuple[int, bytes]:
        return good_answer(body) if body["input"] == [AISLE] else (200, MALFORMED[answer])

    server.answer = malformed_for_queries
    embedder = _endpoint(server)
    with _app(settings, store, embedder) as client:
        aisle = put(client, acme["writer"], AISLE)
        drain(store, embedder)
        found = client.get(SEARCH, params={"query": WORDS}, headers=acme["writer"].headers)
    assert found.status_code == 200, found.text
    assert found.json()["meta"]["fallback"] == "embedder_unavailable"
    assert [row["id"] for row in found.json()["data"]] == [aisle]


# --- 3. vectors of another size under the same model name -----------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_model_answering_another_size_under_its_name_does_not_break_search(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    server: EmbeddingsServer,
    mode: str,
) -> None:
    """The model's name is all a vector records (docs/search.md: "Every vector records the
    model that made it, so a change of model is seen"), but an endpoint's name is often an
    alias (vLLM's `--served-model-name`, a LiteLLM or gateway route, Ollama's tag moved to
    another model): the operator points the alias at a model of another size and restarts
    (`MNEMOS_EMBEDDER_DIMENSIONS=0`: the startup probe learns the new size, no error). Every
    stored vector still counts as the current model's: `nearest_memories` compares the
    query's sign bits with rows of another width (`hamming`: a numpy broadcast error), so every
    search by meaning of every tenant holding a vector is a 500, hybrid included (a
    `ValueError` is not the embedder's failure: no fallback). New vectors of the new size join
    the same tails, whose rows `_int8_rows` then reshapes by total length (garbage or an error).
    Suggested: record the size with the model (`model@dims` as the key the layout and
    `memory_vectors` are read by, or a dimensions column checked in the layout reads), so a
    new size is a new model (queued by `reindex`, keyword meanwhile)."""
    first = _endpoint(server, dimensions=8)
    with _app(settings, store, first) as client:
        aisle = put(client, acme["writer"], AISLE)
        drain(store, first)
    server.answer = lambda body: good_answer(body, dims=4)  # the alias now names another model
    resized = load_embedder(server.url, model="m")  # asked at startup: 4
    assert isinstance(resized, EndpointEmbedder) and resized.dimensions == 4
    with _app(settings, store, resized) as client:
        found = client.get(
            SEARCH, params={"query": WORDS, "mode": mode}, headers=acme["writer"].headers
        )
    assert found.status_code in (200, 503), found.text  # answered, or refused in its shape
    if mode == "hybrid":
        assert aisle in [row["id"] for row in found.json()["data"]]


# --- 4. a model whose vectors are not a multiple of 8 long ----------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_a_model_of_any_vector_size_searches_by_meaning(
    settings: Settings,
    store: Store,
    acme: dict[str, Actor],  # noqa: F811
    server: EmbeddingsServer,
    mode: str,
) -> None:
    """An endpoint whose model answers 300 numbers (GloVe/fastText-style sentence models,
    `average_word_embeddings_glove.6B.300d`; any size an operator's model has) is accepted:
    the startup probe learns 300 and the worker stores its vectors. But the sign-bit pass
    packs 300 signs into 38 bytes and `sign_scores` reshapes the query to `(38, 8)`: every
    search by meaning, hybrid included (a `ValueError`, no fallback), is a 500 for every
    tenant. Suggested: pad the query to the packed width (zeros past the last component)
    in `sign_scores`, or refuse a size that is not a multiple of 8 when the embedder is built
    (one line at startup instead of a 500 on every search)."""
    server.answer = lambda body: good_answer(body, dims=300)
    embedder = load_embedder(server.url, model="m")  # asked at startup: 300
    assert isinstance(embedder, EndpointEmbedder) and embedder.dimensions == 300
    with _app(settings, store, embedder) as client:
        aisle = put(client, acme["writer"], AISLE)
        drain(store, embedder)
        found = client.get(
            SEARCH, params={"query": WORDS, "mode": mode}, headers=acme["writer"].headers
        )
    assert found.status_code == 200, found.text
    assert [row["id"] for row in found.json()["data"]] == [aisle]


# --- 5. the endpoint's timeout bounds each read, not the call -------------------------------------


class Dripping:
    """An embeddings endpoint that sends a valid answer one byte every `every` seconds."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                answer = json.dumps({"data": [{"index": 0, "embedding": [1.0, 2.0]}]})
                body = answer.ljust(100).encode()  # JSON may end in spaces: ~10 s of drips
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                try:
                    conn.sendall(head)
                    for byte in body:
                        if self.stop.wait(self.every):
                            return
                        conn.sendall(bytes([byte]))
                except OSError:
                    continue

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def test_the_endpoint_timeout_bounds_the_whole_call() -> None:
    """docs/search.md: `MNEMOS_EMBEDDER_TIMEOUT_SECONDS` is "how long one call to the endpoint
    may take"; `urlopen(timeout=...)` bounds each blocking socket operation, so an endpoint
    (or a proxy in front of it) that sends a byte more often than the timeout holds the call
    for as long as it drips: here a 3 s timeout and an answer of 100 bytes at 0.1 s each is a
    success after ~10 s, where the call should have failed at 3 s. Meanwhile the query's
    embedding holds one of the remote embedding threads (every search by meaning waits for one)
    and the worker's batch holds its claim. Suggested: a deadline for the whole call (read the
    body in pieces and check `time.monotonic()` against it, or run the request under a timer
    that closes the socket)."""
    dripping = Dripping(every=0.1)
    try:
        embedder = EndpointEmbedder(dripping.url, "m", dimensions=2, timeout_seconds=3.0)
        with pytest.raises(EmbedderUnavailable):
            embedder.embed(["one"])
    finally:
        dripping.close()


# --- 6. the answer's indexes are not checked ------------------------------------------------------


@pytest.mark.parametrize("indexes", [(1, 1), (0, 2), (0, 0)])
def test_an_answer_whose_indexes_are_not_each_text_once_is_refused(
    server: EmbeddingsServer, indexes: tuple[int, int]
) -> None:
    """docs/search.md: "one finite, non-zero vector per text (...) in `index` order". `_vectors`
    sorts by `index` and counts the items but never checks the indexes are 0..n-1 once each:
    `[1, 1]`, `[0, 2]`, `[0, 0]` for two texts are taken, and a text gets another text's vector
    (a batching proxy's bug, or a server that numbers per sub-batch, stores wrong vectors in
    silence, found by meaning for what they do not say). Suggested: refuse unless
    `sorted(indexes) == list(range(count))`."""
    embedder = _endpoint(server)

    def numbered(_body: dict[str, Any]) -> tuple[int, bytes]:
        items = [
            {"index": index, "embedding": [float(n + 1)] * 8} for n, index in enumerate(indexes)
        ]
        return 200, json.dumps({"data": items}).encode()

    server.answer = numbered
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["one", "two"])


# --- 7. an answer is parsed whole, up to 64 MB ----------------------------------------------------


def test_an_oversized_answer_is_refused_before_it_is_parsed(server: EmbeddingsServer) -> None:
    """`_request` reads up to `MAX_ANSWER_BYTES` (64 MB) whatever was asked, and `_vectors`
    parses it into Python lists (measured: 18 times the answer's size, ~1.2 GB for 64 MB)
    before it finds the vectors too long. One text of 8 dimensions needs well under a
    kilobyte; here the endpoint answers 4 MB (one vector of a million numbers) and the call
    holds ~73 MB at its peak; a 64 MB answer on each remote embedding thread and the worker at
    once is several GB in one process. Suggested: bound the read by what was asked (`count x
    dimensions x ~32 bytes` plus a margin, the startup probe's answer being one word), so an
    answer past it is refused unread."""
    embedder = _endpoint(server)
    huge = b'{"data":[{"index":0,"embedding":[' + b"1.5," * 999_999 + b"1.5]}]}"
    server.answer = lambda _body: (200, huge)
    tracemalloc.start()
    try:
        with pytest.raises(EmbedderUnavailable):
            embedder.embed(["one"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(huge), f"held {peak / 1e6:.0f} MB for a {len(huge) / 1e6:.0f} MB answer"


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_adds_the_size_to_an_endpoints_stored_vectors(
    backend: str, tmp_path: Path
) -> None:
    """0026: the vectors an endpoint stored under its model's name alone (`m`) get their size
    (`m@8`, in `memory_vectors` and the sealed chunks), so they stay the current model's
    (`EndpointEmbedder.model`) and nothing is embedded again; the local model's are kept."""
    with fresh_database(backend, tmp_path) as url:
        settings = Settings(database_url=url)
        migrate(settings, "0024_vector_chunk_bits_first")
        opened = open_store(settings)
        world = World(opened)
        agent = world.agent(world.user("Ann", "acme"))
        made = [agent_memory(agent, f"note {i}") for i in range(CHUNK_ROWS + 3)]
        opened.replace_memories(agent.tenant, made, [], made[0].inserted_at)
        rng = np.random.default_rng(25)
        vectors = rng.standard_normal((len(made), 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        opened.save_vectors("m", [memory.id for memory in made[:-1]], vectors[:-1])
        opened.save_vectors(LOCAL, [made[-1].id], vectors[-1:])
        opened.close()
        migrate(settings)
        engine = sa.create_engine(driver_url(url))
        with engine.connect() as conn:
            stored = conn.execute(sa.select(memory_vectors.c.model)).scalars().all()
            sealed = conn.execute(sa.select(vector_chunks.c.model)).scalars().all()
        engine.dispose()
        assert sorted(set(stored)) == sorted({"m@8", LOCAL}) and sealed == ["m@8"]
        reopened = open_store(settings)
        try:
            assert reopened.queue_for_model("m@8", batch=100) == 1  # the local model's one
        finally:
            reopened.close()
