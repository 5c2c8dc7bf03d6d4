"""The embedding worker gives way to requests (`mnemos.indexer.InFlight`): it starts no step (a
claim, one text's embedding, a save) while its process handles a request, and still embeds,
one step per bound, when requests never stop. No timing is asserted: the worker's own counters
say when it is waiting, and the waits below only guard against a hang."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pytest
import sqlalchemy as sa
import uvicorn
from numpy.typing import NDArray

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.indexer import Indexer, InFlight
from mnemos.storage.base import Store
from mnemos.storage.schema import vector_queue
from tests.world import World, agent_memory

HANG = 30.0  # seconds: only a broken worker takes this long
FOREVER = 3600.0  # a bound the tests never reach
WHOLLY = float("inf")  # a share of the last step that never limits the bound


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there"
        time.sleep(0.01)


class Recording:
    """An embedder that costs nothing and records what it embedded; `during` runs inside each
    call (a request that arrives while the worker embeds)."""

    model = "recording"
    dimensions = 8

    def __init__(self, during: Callable[[], object] = lambda: None) -> None:
        self.texts: list[str] = []
        self.during = during

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        self.during()
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


def claimed(store: Store) -> int:
    with store._read() as conn:  # type: ignore[attr-defined]
        found = conn.execute(
            sa.select(sa.func.count())
            .select_from(vector_queue)
            .where(vector_queue.c.claimed_until.is_not(None))
        )
        return int(found.scalar_one())


@contextmanager
def running(worker: Indexer) -> Iterator[Indexer]:
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def test_the_worker_starts_no_step_while_a_request_is_in_flight(store: Store, world: World) -> None:
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    requests, embedder = InFlight(), Recording()
    requests.begin()
    store.insert_memory(agent_memory(agent, "stored during a request"))
    with running(
        Indexer(store, embedder, requests=requests, give_way_seconds=FOREVER, give_way_share=WHOLLY)
    ):
        wait_until(lambda: requests.delayed == 1)  # waiting before its claim
        assert (embedder.texts, claimed(store), store.vector_backlog()) == ([], 0, 1)
        requests.end()
        wait_until(lambda: store.vector_backlog() == 0)
    assert embedder.texts == ["stored during a request"]
    assert requests.overdue == 0


def test_a_request_arriving_mid_batch_holds_the_next_text(store: Store, world: World) -> None:
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    requests = InFlight()
    first = threading.Event()

    def arrives() -> None:  # a request begins while the worker embeds the first text
        if not first.is_set():
            first.set()
            requests.begin()

    embedder = Recording(during=arrives)
    for i in range(3):
        store.insert_memory(agent_memory(agent, f"note {i}"))
    with running(
        Indexer(store, embedder, requests=requests, give_way_seconds=FOREVER, give_way_share=WHOLLY)
    ):
        wait_until(lambda: requests.delayed == 1)
        assert len(embedder.texts) == 1  # the batch's other two wait, claimed
        assert (claimed(store), store.vector_backlog()) == (3, 3)
        requests.end()
        wait_until(lambda: store.vector_backlog() == 0)
    assert sorted(embedder.texts) == ["note 0", "note 1", "note 2"]


def test_requests_that_never_stop_delay_each_step_by_the_bound_only(
    store: Store, world: World
) -> None:
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    requests, embedder = InFlight(), Recording()
    requests.begin()  # never ends
    for i in range(3):
        store.insert_memory(agent_memory(agent, f"note {i}"))
    with running(Indexer(store, embedder, requests=requests, give_way_seconds=0.02)):
        wait_until(lambda: store.vector_backlog() == 0)
    assert sorted(embedder.texts) == ["note 0", "note 1", "note 2"]
    # The claim, three texts and the save each started at the bound, with the request in flight.
    assert requests.overdue >= 5
    assert requests.count == 1


def test_a_worker_told_not_to_wait_embeds_during_requests(store: Store, world: World) -> None:
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    requests, embedder = InFlight(), Recording()
    requests.begin()
    store.insert_memory(agent_memory(agent, "embedded at once"))
    with running(Indexer(store, embedder, requests=requests, give_way_seconds=0)):
        wait_until(lambda: store.vector_backlog() == 0)
    assert (embedder.texts, requests.delayed) == (["embedded at once"], 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_request_in_flight_over_http_holds_the_servers_worker(
    settings: Settings, store: Store, world: World
) -> None:
    """The API's middleware counts a request from its head to its answer: a body still on its
    way keeps the server's own worker waiting (a real HTTP server, the app's own worker)."""
    agent = world.agent(world.user("Ann", "acme"), "Writer")
    embedder = Recording()
    requests = InFlight()
    app = create_app(
        settings.model_copy(
            update={"embed_give_way_ms": 3_600_000, "embed_give_way_share": WHOLLY}
        ),
        store,
        embedder,
        requests,
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started)
        with socket.create_connection(("127.0.0.1", port)) as half:
            half.sendall(
                b"POST /api/v1/agent/memories HTTP/1.1\r\nHost: t\r\n"
                b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{"
            )
            wait_until(lambda: requests.count == 1)
            store.insert_memory(agent_memory(agent, "stored while a body is on its way"))
            wait_until(lambda: requests.delayed == 1)
            assert (embedder.texts, claimed(store), store.vector_backlog()) == ([], 0, 1)
        # The client left mid-body: the request is over, and the worker goes on.
        wait_until(lambda: store.vector_backlog() == 0)
        assert (requests.count, embedder.texts) == (0, ["stored while a body is on its way"])
    finally:
        server.should_exit = True
        thread.join(timeout=HANG)


@pytest.mark.parametrize("bound", [0.0, 0.01])
def test_give_way_returns_at_once_when_no_request_was_in_flight(bound: float) -> None:
    requests = InFlight()
    requests.give_way(0.002, bound)
    assert (requests.delayed, requests.overdue) == (0, 0)
