"""A realistic, seeded data set for the benchmark, loaded through the store's bulk path.

Organizations with people, agents and rooms; one agent with about 1,000 memories and one with
about 10,000; memories of every scope with 8-40 words drawn from a skewed (Zipf) vocabulary, plus
three planted terms: `zebrafinch` (rare, 0.01%), `marigold` (mid, 1%) and `harbor` (common, 10%).
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from mnemos.domain import accounts
from mnemos.domain.ids import uuid7
from mnemos.domain.models import Memory, MemoryType, Scope, Segment, Status, System
from mnemos.storage.base import Store

RARE, MID, COMMON = "zebrafinch", "marigold", "harbor"
SYLLABLES = "ka lo mi ne ru ta vi so pe da gu fe zo ri ba ne ho".split()
BATCH = 5_000


@dataclass
class Dataset:
    org_id: uuid.UUID
    person_key: str
    person_id: uuid.UUID
    small_agent_key: str  # ~1,000 memories
    big_agent_key: str  # ~10,000 memories
    big_agent_id: uuid.UUID
    writer_keys: list[str] = field(default_factory=list)
    total: int = 0


def vocabulary(rng: random.Random, size: int = 5_000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def adversarial_query(seed: int = 1, length: int = 5, count: int = 8) -> str:
    """The most expensive search we found for this data set (issue 11, finding 4): the `count`
    prefixes of `length` letters that cover the most word draws. Each matches many words that
    are each in a large share of all memories, past the SQLite prefix index (3 and 4 letters),
    while few memories have all of them; none implies another, and `count` is the term cap.
    With the bench's seed: "babab babag babap babad baban babak babar babaf".
    """
    words = vocabulary(random.Random(seed))  # the first draws of `load`'s generator
    mass: dict[str, float] = {}
    for rank, word in enumerate(words):
        if len(word) >= length:
            mass[word[:length]] = mass.get(word[:length], 0) + 1 / (rank + 1)
    return " ".join(sorted(mass, key=lambda prefix: -mass[prefix])[:count])


def load(store: Store, count: int, seed: int = 1) -> Dataset:
    """Create accounts and `count` memories; prints progress to stderr."""
    rng = random.Random(seed)
    words = vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    orgs = [accounts.create_organization(store, f"Bench org {i}") for i in range(10)]
    people = [
        accounts.create_user(store, f"Person {i}", f"p{i}-{seed}@bench.test", orgs[i % 10].id)
        for i in range(40)
    ]
    agents = [
        accounts.create_agent(store, people[i % 40].user.id, f"Agent {i}", None) for i in range(100)
    ]
    org_of_agent = [orgs[(i % 40) % 10].id for i in range(100)]
    big, small = agents[0], agents[1]
    person = people[0]
    now = datetime.now(UTC)
    start = now - timedelta(days=400)
    step = timedelta(days=400) / max(count, 1)
    batch: list[Memory] = []
    began = time.monotonic()
    for i in range(count):
        roll = rng.random()
        if roll < 10_000 / count:
            index = 0
        elif roll < 11_000 / count:
            index = 1
        else:
            index = rng.randrange(2, 100)
        agent = agents[index]
        org = org_of_agent[index]
        scope = (Scope.AGENT, Scope.SUBJECT, Scope.ORGANIZATION)[rng.randrange(3)]
        text = rng.choices(words, weights, k=rng.randint(8, 40))
        for term, share in ((RARE, 0.0001), (MID, 0.01), (COMMON, 0.10)):
            if rng.random() < share:
                text[rng.randrange(len(text))] = term
        at = start + step * i
        subject = people[rng.randrange(40)].user.id if scope is Scope.SUBJECT else None
        if scope is Scope.SUBJECT and index in (0, 1) and rng.random() < 0.3:
            subject = person.user.id
        batch.append(
            Memory(
                id=uuid7(int(at.timestamp() * 1000)),
                content=" ".join(text),
                thought="bench",
                system=System.LONG_TERM,
                type=MemoryType.SEMANTIC,
                segment=Segment.USER,
                scope=scope,
                subject_id=subject,
                organization_id=None if scope is Scope.AGENT else org,
                source_agent_id=agent.agent.id,
                chat_room_id=None,
                metadata={},
                status=Status.ACTIVE,
                inserted_at=at,
                updated_at=at,
                tenant_id=org,  # the agent's owner's organization
            )
        )
        if len(batch) == BATCH or i == count - 1:
            store.replace_memories(org, batch, [], now)
            batch = []
            done = i + 1
            rate = done / max(time.monotonic() - began, 1e-6)
            bar = "#" * int(30 * done / count)
            print(
                f"\r  loading [{bar:<30}] {done:,}/{count:,} ({rate:,.0f}/s)",
                end="",
                file=sys.stderr,
            )
    print(file=sys.stderr)
    return Dataset(
        org_id=orgs[0].id,
        person_key=person.api_key,
        person_id=person.user.id,
        small_agent_key=small.api_key,
        big_agent_key=big.api_key,
        big_agent_id=big.agent.id,
        writer_keys=[a.api_key for a in agents[2:10]],
        total=count,
    )


def reuse(store: Store, seed: int = 1) -> Dataset:
    """The `Dataset` of a database `load` filled before (in another process): the same people
    and agents, found by name, with fresh API keys (their old ones were never kept)."""
    from sqlalchemy import func, select

    from mnemos.storage.schema import agents, memories, users
    from mnemos.storage.sql import SqlStore

    assert isinstance(store, SqlStore)
    with store._read() as conn:
        agent_ids = dict(conn.execute(select(agents.c.name, agents.c.id)).all())
        person_id, org_id = conn.execute(
            select(users.c.id, users.c.organization_id).where(
                users.c.email == f"p0-{seed}@bench.test"
            )
        ).one()
        total = conn.execute(select(func.count()).select_from(memories)).scalar_one()
    big = agent_ids["Agent 0"]
    return Dataset(
        org_id=org_id,
        person_key=accounts.rotate_user_key(store, person_id),
        person_id=person_id,
        small_agent_key=accounts.rotate_agent_key(store, agent_ids["Agent 1"]),
        big_agent_key=accounts.rotate_agent_key(store, big),
        big_agent_id=big,
        writer_keys=[
            accounts.rotate_agent_key(store, agent_ids[f"Agent {i}"]) for i in range(2, 10)
        ],
        total=total,
    )
