"""An erasure killed with kill -9 is all or nothing: after the kill, every memory about the
person and every search hit is still there with no erasure event, or none is and the event is.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.domain.queries import ALL_STATUSES, Audience, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.storage import migrate, open_store
from mnemos.storage.base import Store
from tests.conftest import BACKENDS
from tests.live.conftest import _database_for

ROWS = 20_000
WORD = "quokkabanana"
ERASER = textwrap.dedent(
    """
    import sys, uuid
    from mnemos.config import Settings
    from mnemos.domain.history import by_operator
    from mnemos.domain.ids import utcnow, uuid7
    from mnemos.domain.models import Erasure
    from mnemos.storage import open_store
    store = open_store(Settings(database_url=sys.argv[1]))
    erasure = Erasure(uuid7(), uuid.UUID(sys.argv[2]), by_operator(), utcnow())
    print("erasing", flush=True)
    store.erase_subject(erasure)
    print("erased", flush=True)
    """
)


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    databases = _database_for(request.param, tmp_path)
    yield next(databases)
    databases.close()


def _fill(store: Store, subject: uuid.UUID, agent: uuid.UUID, org: uuid.UUID) -> None:
    start = utcnow() - timedelta(days=1)
    rows = [
        Memory(
            uuid7(),
            f"{WORD} fact {i}",
            None,
            System.LONG_TERM,
            MemoryType.SEMANTIC,
            Segment.USER,
            Scope.SUBJECT,
            subject,
            org,
            agent,
            None,
            {},
            Status.ACTIVE,
            start + timedelta(milliseconds=i),
            start,
            org,
        )  # fmt: skip
        for i in range(ROWS)
    ]
    for at in range(0, ROWS, 2_000):
        store.replace_memories(org, rows[at : at + 2_000], [], utcnow())


def _state(store: Store, subject: uuid.UUID) -> tuple[int, int, int]:
    """(memories about the person, their search hits, erasure events)."""
    about = (Audience(subject_id=subject),)
    rows = store.count_memories(MemoryQuery(audiences=about, statuses=ALL_STATUSES))
    search = parse_search(WORD, 100)
    hits = store.count_memories(MemoryQuery(audiences=about, statuses=ALL_STATUSES, search=search))
    return rows, hits, len(store.erasures_of(subject))


def test_kill_9_mid_erasure_is_all_or_nothing(database: str) -> None:
    settings = Settings(database_url=database)
    migrate(settings)
    store = open_store(settings)
    org = accounts.create_organization(store, "Crash")
    person = accounts.create_user(store, "Ann", f"ann-{uuid.uuid4().hex[:6]}@t.test", org.id)
    other = accounts.create_user(store, "Bob", f"bob-{uuid.uuid4().hex[:6]}@t.test", org.id)
    agent = accounts.create_agent(store, other.user.id, "Bot", None).agent.id
    subject = person.user.id
    _fill(store, other.user.id, agent, org.id)  # someone else's, never touched
    for _round in range(3):
        if _state(store, subject)[0] == 0:
            _fill(store, subject, agent, org.id)
        before = _state(store, subject)
        eraser = subprocess.Popen(
            [sys.executable, "-c", ERASER, database, str(subject)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert eraser.stdout is not None and eraser.stdout.readline().strip() == "erasing"
        subprocess.run(["sleep", f"{random.uniform(0, 1.5):.3f}"], check=True)
        eraser.kill()  # SIGKILL
        eraser.wait()
        after = _state(store, subject)
        erased = after[2] > before[2]  # the kill came after the commit
        assert after == ((0, 0, before[2] + 1) if erased else before), (before, after)
    assert _state(store, other.user.id)[:2] == (ROWS, ROWS)
    if database.startswith("sqlite"):
        assert store.integrity_check() == "ok"  # type: ignore[attr-defined]
    store.close()
