"""Seed a database and print the query plan of every memory list path, as Markdown.

    python scripts/explain_plans.py sqlite:////tmp/plans.db postgresql://postgres@127.0.0.1/plans \\
        --memories 100000 > docs/explain-plans.md

Each plan is the real statement Mnemos runs (captured through SQLAlchemy and prefixed with
EXPLAIN), for the first page of 20 rows. PostgreSQL plans come from EXPLAIN ANALYZE.
"""

from __future__ import annotations

import argparse
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from mnemos.config import DEFAULT_MAX_AGENTS_PER_USER, Settings
from mnemos.domain.human import HumanMemoryService, human_audiences
from mnemos.domain.ids import uuid7
from mnemos.domain.memories import AgentListParams, MemoryService
from mnemos.domain.models import (
    Agent,
    AgentContext,
    Memory,
    MemoryType,
    Organization,
    Scope,
    Segment,
    Status,
    System,
    User,
    UserContext,
)
from mnemos.domain.queries import Filters, MemoryQuery
from mnemos.domain.search import parse_search
from mnemos.storage import migrate, open_store
from mnemos.storage.sql import SqlStore

WORDS = "retry jitter backoff invoice customer prefers suv tea green meeting deploy review".split()


def seed(store: SqlStore, count: int) -> tuple[AgentContext, UserContext, uuid.UUID]:
    rng = random.Random(7)
    now = datetime.now(UTC)
    org = Organization(uuid.uuid4(), "Plans")
    store.create_organization(org)
    users = [
        User(uuid.uuid4(), f"U{i}", f"u{i}@plans.test", f"u{i}", org.id, True, now, now)
        for i in range(10)
    ]
    for user in users:
        store.create_user(user)
    agents = [
        Agent(uuid.uuid4(), f"A{i}", None, users[i % 10].id, f"u/a{i}", now, now) for i in range(50)
    ]
    for agent in agents:
        store.create_agent(agent, max_per_owner=DEFAULT_MAX_AGENTS_PER_USER)
    room = uuid.uuid4()
    batch: list[Memory] = []
    start = now - timedelta(days=365)
    for i in range(count):
        agent = agents[i % 50]
        scope = (Scope.AGENT, Scope.SUBJECT, Scope.ORGANIZATION)[i % 3]
        at = start + timedelta(seconds=i * 30)
        batch.append(
            Memory(
                id=uuid7(int(at.timestamp() * 1000)),
                content=" ".join(rng.choice(WORDS) for _ in range(12)),
                thought="seed",
                system=System.LONG_TERM,
                type=MemoryType.SEMANTIC,
                segment=Segment.USER,
                scope=scope,
                subject_id=users[i % 7].id if scope is Scope.SUBJECT else None,
                organization_id=None if scope is Scope.AGENT else org.id,
                source_agent_id=agent.id,
                chat_room_id=room if i % 11 == 0 else None,
                metadata={},
                status=Status.ACTIVE,
                inserted_at=at,
                updated_at=at,
            )
        )
        if len(batch) == 5000:
            store.replace_memories(batch, [], now)
            batch = []
    store.replace_memories(batch, [], now)
    ctx = AgentContext(agents[0], users[0], org)
    return ctx, UserContext(users[0], org), users[1].id


def explain(store: SqlStore, query: MemoryQuery) -> str:
    engine: sa.Engine = store._read_engine
    prefix = (
        "EXPLAIN QUERY PLAN "
        if engine.dialect.name == "sqlite"
        else "EXPLAIN (ANALYZE, COSTS OFF) "
    )

    def rewrite(
        _conn: Any, _cursor: Any, statement: str, params: Any, _context: Any, _many: bool
    ) -> tuple[str, Any]:
        return prefix + statement, params

    sa.event.listen(engine, "before_cursor_execute", rewrite, retval=True)
    try:
        with engine.connect() as conn:
            statement, params = store.list_statement(query, limit=21)
            rows = conn.execute(statement, params).cursor.fetchall()
    finally:
        sa.event.remove(engine, "before_cursor_execute", rewrite)
    if engine.dialect.name == "sqlite":
        return "\n".join(f"{row[0]:>3} {row[1]:>3} {row[3]}" for row in rows)
    return "\n".join(row[0] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--memories", type=int, default=100_000)
    args = parser.parse_args()
    print("# Query plans of the memory list paths\n")  # noqa: T201
    print(f"Made by `scripts/explain_plans.py` on {args.memories:,} memories; first page of 20.\n")
    for url in args.urls:
        settings = Settings(database_url=url, sqlite_synchronous="OFF")
        migrate(settings)
        store = open_store(settings)
        assert isinstance(store, SqlStore)
        agent, person, subject = seed(store, args.memories)
        if store._read_engine.dialect.name == "postgresql":
            with store._write_engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        service = MemoryService(store, codec=None)  # type: ignore[arg-type]
        term = parse_search("jitter", 500)
        reach = HumanMemoryService(service, store).reach(person)
        paths: dict[str, MemoryQuery] = {
            "agent: own memories (memory_scope=me)": service.agent_query(
                agent, AgentListParams(), Filters()
            ),
            "agent: organization (memory_scope=org)": service.agent_query(
                agent, AgentListParams("org"), Filters()
            ),
            "agent: one subject (memory_scope=org&scope=subject)": service.agent_query(
                agent, AgentListParams("org", "subject", subject), Filters()
            ),
            "agent: everything (memory_scope=org&scope=all)": service.agent_query(
                agent, AgentListParams("org", "all"), Filters()
            ),
            "agent: own memories, content_query=jitter": service.agent_query(
                agent, AgentListParams(), Filters(search=term)
            ),
            "human: about me": MemoryQuery(audiences=human_audiences(person, "about_me", reach)),
            "human: rooms": MemoryQuery(audiences=human_audiences(person, "room", reach)),
            "human: all": MemoryQuery(audiences=human_audiences(person, "all", reach)),
        }
        print(f"## {store._read_engine.dialect.name}\n")  # noqa: T201
        for title, query in paths.items():
            print(f"### {title}\n\n```\n{explain(store, query)}\n```\n")  # noqa: T201
        store.close()


if __name__ == "__main__":
    main()
