"""Fifth hostile review (review13): findings in the body-phase slot, the 405's `Allow` and
`restore-expired` under concurrent writers.

Each test states the behaviour the finding asks for and failed, when written, for the finding's
reason; all are fixed (docs/decisions.md, "Fifth hostile review: what was fixed")."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage.base import Store
from tests.api.asgi_calls import SlowUpload, finish, http_scope, start_slow_uploads
from tests.api.test_ui_http import signed_in
from tests.world import World, memory_body

SHARE = 2
BASE = "/api/v1/agent/memories"


@pytest.fixture
def app(settings: Settings, store: Store) -> FastAPI:
    return create_app(settings.model_copy(update={"max_in_flight_per_tenant": SHARE}), store)


def wait_until(client: TestClient, done: Any, what: str) -> None:
    assert client.portal is not None
    for _ in range(300):
        if done():
            return
        client.portal.call(anyio.sleep, 0.01)
    raise AssertionError(what)


# --- 1. the body-phase slot ----------------------------------------------------------------


def test_slow_bodies_to_the_health_check_are_bounded_per_address(app: FastAPI) -> None:
    """`AccessMiddleware` exempts `/healthz` from every slot, yet `BodyLimitMiddleware` reads
    any request's body first: POST (or GET) /healthz with a trickled body holds one of the
    process's in-flight slots for the body timeout, as many per address as the client opens
    (the 503 `overloaded` for everyone that review12's first finding closed on other paths)."""
    with TestClient(app) as client:
        assert client.portal is not None
        uploads = [SlowUpload(app, "/healthz", {}, "10.13.0.1") for _ in range(SHARE + 1)]
        for upload in uploads:
            client.portal.start_task_soon(upload.run)
        wait_until(
            client,
            lambda: all(u.sent >= 2 or u.status is not None for u in uploads),
            "the uploads neither read their bodies nor were answered",
        )
        waiting = sum(u.status is None for u in uploads)
        finish(client, uploads)
    # At most the address's share of bodies may still be arriving; the next is answered.
    assert waiting <= SHARE


class UnreadDownload:
    """An anonymous GET whose client reads nothing of the answer (its response body's `send`
    waits) until `leave`: a request past its body that holds its address's slot for its life."""

    def __init__(self, app: FastAPI, path: str, address: str = "testclient"):
        self.app = app
        self.scope = http_scope("GET", path, [], address)
        self.gone = anyio.Event()
        self.status: int | None = None
        self.answering = False

    async def run(self) -> None:
        read = False

        async def receive() -> dict[str, Any]:
            nonlocal read
            if not read:
                read = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                self.answering = True
                await self.gone.wait()

        await self.app(self.scope, receive, send)


def test_anonymous_requests_do_not_lock_keys_and_pages_of_their_address_out(
    app: FastAPI, world: World
) -> None:
    """A request without a credential keeps its address's slot for its whole life; since the
    body-phase slot, a request with a key (or a signed-in page) needs the same key's slot before
    its body, so `SHARE` anonymous requests in flight from a shared address (NAT, a proxy whose
    address is not forwarded) refuse every agent and signed-in person there, bodies all in.
    docs/decisions.md says such a client is refused "only while its address has 16 bodies still
    arriving", and the review10 fix ("A page request with a session cookie is counted by the
    page") meant anonymous neighbours not to lock a signed-in person out of the page."""
    ann = world.user("Ann", "r13-nat")
    agent = world.agent(ann)
    with TestClient(app) as client:  # every call here comes from "testclient"
        assert client.portal is not None
        signed_in(client, ann)
        downloads = [UnreadDownload(app, "/openapi.json") for _ in range(SHARE)]
        for download in downloads:
            client.portal.start_task_soon(download.run)
        wait_until(
            client, lambda: all(d.answering for d in downloads), "the downloads never started"
        )
        try:
            api = client.get(BASE, headers=agent.headers)
            page = client.get("/ui/agents")
        finally:
            for download in downloads:
                client.portal.call(download.gone.set)
    assert (api.status_code, page.status_code) == (200, 200), (api.text, page.status_code)


def test_a_page_refused_for_its_address_is_a_page(app: FastAPI, world: World) -> None:
    """Since the body-phase slot a signed-in person's page takes its address's slot in
    `AccessMiddleware`, whose refusal (`_busy`) is the API's JSON without the page's security
    headers: the person's browser shows raw JSON (an error page elsewhere, "Pages' 404 and 405
    are pages"; the tenant's refusal is a page, `test_the_web_page_refuses_with_a_page`)."""
    ann = world.user("Ann", "r13-page")
    with TestClient(app) as client:
        signed_in(client, ann)
        # Bodies still arriving from the person's address (with a key: requests without one
        # hold the address's other count, which never refuses a signed-in page).
        made_up = {"X-API-Key": "mn_made_up"}
        uploads = [SlowUpload(app, BASE, made_up, "testclient") for _ in range(SHARE)]
        start_slow_uploads(client, uploads)
        try:
            page = client.get("/ui/agents")
        finally:
            finish(client, uploads)
    assert page.status_code == 429
    assert "text/html" in page.headers["content-type"], page.text
    assert "frame-ancestors" in page.headers.get("content-security-policy", "")


def test_a_made_up_key_on_a_public_path_is_counted_against_its_address(
    settings: Settings, store: Store
) -> None:
    """`AccessMiddleware` leaves every request carrying a credential header to authentication,
    but `/openapi.json`, `/docs` and the pages' static files never authenticate: with any
    `X-API-Key` such requests meet no per-minute limit and hold no slot once their body is in."""
    limited = settings.model_copy(update={"rate_limit_per_minute": 1})
    with TestClient(create_app(limited, store)) as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/openapi.json").status_code == 429  # the address's limit
        junk = {"X-API-Key": "mn_made_up"}
        answers = [client.get("/openapi.json", headers=junk).status_code for _ in range(3)]
    assert answers == [429, 429, 429]


# --- 2. Allow on 405s ------------------------------------------------------------------------


def test_a_405_on_a_static_file_names_the_methods_it_serves(client: TestClient) -> None:
    """`allowed_methods` asks `Route`s only; `/ui/static` is a `Mount` (StaticFiles, GET and
    HEAD), so POST /ui/static/ui.css answers 405 with `Allow:` empty, which says no method is
    served there (RFC 9110 15.5.6: the target's supported methods)."""
    answer = client.post("/ui/static/ui.css")
    assert answer.status_code == 405
    assert {m.strip() for m in answer.headers["allow"].split(",")} == {"GET", "HEAD"}


# --- 3. restore-expired under concurrent writers ----------------------------------------------


def expired_memories(client: TestClient, world: World, store: Store, count: int) -> uuid.UUID:
    """`count` organization working memories a wrong 1-day policy expired (policy lifted since);
    the organization's id."""
    from mnemos.domain.ids import utcnow
    from mnemos.storage.schema import memories

    ann = world.user("Ann", "r13-restore")
    bot = world.agent(ann)
    for n in range(count):
        body = memory_body(f"release step {n}", scope="organization", system="working")
        answer = client.post(BASE, json={**body, "type": "episodic"}, headers=bot.headers)
        assert answer.status_code == 201, answer.text
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(memories.update().values(inserted_at=utcnow() - timedelta(days=10)))
    services = client.app.state.services  # type: ignore[attr-defined]
    org = uuid.UUID(world.org("r13-restore"))
    services.retention.set(org, "working", 1)  # meant 100
    assert services.retention.expire() == count
    services.retention.set(org, "working", 0)
    return org


@contextlib.contextmanager
def rows_held(
    settings: Settings, org: uuid.UUID, run: Callable[[], int], whose: str
) -> Iterator[tuple[sa.Connection, Any, list[int]]]:
    """Hold the organization's memory rows in a transaction while `run` goes on a thread until
    it waits for one of them; yield the transaction's connection, the id of the memory waited
    for and the list `run`'s answer lands in. The transaction commits at the block's end, then
    `run` finishes."""
    from mnemos.storage.postgres import driver_url
    from mnemos.storage.schema import memories

    engine = sa.create_engine(driver_url(settings.database_url))
    answers: list[int] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            answers.append(run())
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    try:
        with engine.connect() as holder:
            with holder.begin():
                holder.execute(
                    sa.select(memories.c.pk).where(memories.c.tenant_id == org).with_for_update()
                )
                thread = threading.Thread(target=target)
                thread.start()
                yield holder, row_waited_for(holder, whose), answers
            thread.join(20)
    finally:
        engine.dispose()
    assert not failed and answers, failed


def row_waited_for(holder: sa.Connection, whose: str) -> Any:
    """The id of the memory whose row another session waits for while `holder` has it locked
    (PostgreSQL's tuple lock, granted to the first waiter)."""
    for _ in range(200):
        waited = holder.execute(
            sa.text(
                "SELECT m.id FROM pg_locks l JOIN memories m"
                " ON m.tableoid = l.relation"
                " AND m.ctid = format('(%s,%s)', l.page, l.tuple)::tid"
                " WHERE l.locktype = 'tuple' AND l.granted"
                " AND l.pid <> pg_backend_pid()"
            )
        ).scalar()
        if waited is not None:
            return waited
        time.sleep(0.02)
    raise AssertionError(f"{whose} never waited")


def test_restore_expired_brings_back_every_memory_while_a_person_restores_one(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """`RetentionService.restore` stops when a batch changes fewer than `batch` memories. On
    PostgreSQL a memory the batch chose but someone changed before the update locked it (a
    person's restore, committed while the operator's statement waited for its row) is not
    changed, so that batch is short and the command ends, answering a count, with every memory
    of the later batches still archived. The same stop ends a retention pass early."""
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite runs one writer at a time: no batch meets a concurrent change")
    from mnemos.domain.history import by_operator
    from mnemos.domain.retention import RetentionService
    from mnemos.storage.schema import memories

    org = expired_memories(client, world, store, 4)
    operator = RetentionService(store, batch=2, pause_seconds=0)  # the default is 500
    # The person's transaction has the rows (as a person's restore of one does); the
    # operator's update waits for the row it chose first.
    restore = functools.partial(operator.restore, org, "working", by_operator())
    with rows_held(settings, org, restore, "the operator's update") as (person, waited, restored):
        person.execute(memories.update().where(memories.c.id == waited).values(status="active"))
    with store._read() as conn:  # type: ignore[attr-defined]
        statuses = conn.execute(
            sa.select(memories.c.status).where(memories.c.tenant_id == org)
        ).scalars()
        assert sorted(statuses) == ["active"] * 4
    assert restored == [3]


def test_a_retention_pass_keeps_a_memory_a_person_restored_while_it_waited(
    client: TestClient, world: World, store: Store, settings: Settings
) -> None:
    """review13's open note: a pass chose an expired active memory, then waited for its row
    while a person archived and restored it (history `restored`: kept for the period). After
    the lock, PostgreSQL read the row again and checked only its status, active again, so the
    pass archived a memory restored a moment before. The pass now changes a row only as it
    was chosen (its `updated_at`)."""
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite runs one writer at a time: no batch meets a concurrent change")
    from mnemos.domain.ids import utcnow
    from mnemos.domain.retention import RetentionService
    from mnemos.storage.schema import memories

    ann = world.user("Ann", "r14-retention")
    bot = world.agent(ann)
    for n in range(3):
        body = memory_body(f"scratch note {n}", scope="organization", system="working")
        answer = client.post(BASE, json={**body, "type": "episodic"}, headers=bot.headers)
        assert answer.status_code == 201, answer.text
    org = uuid.UUID(world.org("r14-retention"))
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(
            memories.update()
            .where(memories.c.tenant_id == org)
            .values(inserted_at=utcnow() - timedelta(days=10))
        )
    services = client.app.state.services  # type: ignore[attr-defined]
    services.retention.set(org, "working", 1)
    server = RetentionService(store, batch=500, pause_seconds=0)
    with rows_held(settings, org, server.expire, "the retention pass's update") as held:
        person, waited, expired = held
        for status in ("archived", "active"):  # the person's archive and restore, as the API
            person.execute(
                memories.update()
                .where(memories.c.id == waited)
                .values(status=status, updated_at=utcnow())
            )
    assert expired == [2]
    with store._read() as conn:  # type: ignore[attr-defined]
        kept = conn.execute(sa.select(memories.c.status).where(memories.c.id == waited)).scalar()
    assert kept == "active"
