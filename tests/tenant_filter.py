"""The suite's check that every query of a memory-side table names its tenant (issue 18).

`tests/conftest.py` installs `record` on every engine of the test process (SQLAlchemy's
`before_cursor_execute`, on the `Engine` class) and `report` at the end of the session, which
fails the run (exit status 1) and prints each offending statement with the line of Mnemos code
that ran it. What counts as naming the tenant, per statement that reads or writes a memory-side
table (`schema.MEMORY_SIDE`):

- a SELECT, UPDATE or DELETE: a condition on `tenant_id` (`tenant_id = ...`, `tenant_id IN
  (...)`, or a join on it: `... = x.tenant_id`);
- an INSERT: a `tenant_id` among its columns (an INSERT ... SELECT that reads a memory-side
  table: a condition, as a SELECT).

Exempt, and only these (`ALLOWED`):

- statements Mnemos marks as reading every tenant (`sql.EVERY_TENANT`, docs/deploying.md,
  "Multi-shard queries");
- schema changes (CREATE, ALTER, DROP, PRAGMA) and whatever migrations run (`migrations/`);
- `mnemos export` and `mnemos import` (`storage/transfer*.py`): they move a whole database,
  every tenant by design, and the import's bulk paths (COPY, set-based replays) with them;
- statements a test runs itself (the first frame outside SQLAlchemy is in `tests/`): fixtures
  that empty tables or read rows back to check them.

Servers and admin commands the live tests start in processes of their own run through
`tests/watched.py`, which checks their statements the same way and hands them to this process
through a file (`absorb`). Out of reach: PostgreSQL's binary-cursor reads of vector blobs (the
driver's cursor, not SQLAlchemy's), checked on SQLite instead, and the CLI commands other tests
start with `python -m mnemos`.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import sqlalchemy as sa

from mnemos.storage.schema import MEMORY_SIDE
from mnemos.storage.sql_base import EVERY_TENANT

TABLES = "|".join(MEMORY_SIDE)
TOUCHES = re.compile(rf'\b(?:FROM|JOIN|UPDATE|INTO)\s+"?({TABLES})"?(?:\s|\(|$)', re.I)
CONDITION = re.compile(r'tenant_id"?\s*(?:=|IN\s*\(|=\s*ANY)|=\s*"?\w+"?\."?tenant_id\b', re.I)
SCHEMA_CHANGE = re.compile(r"^\s*(?:CREATE|ALTER|DROP|PRAGMA|COPY)\b", re.I)
INSERT = re.compile(r"^\s*INSERT\b", re.I)
ONE = r"(?:\?|%\(\w+\)s(?:::\w+)?)"
PARAMETERS = re.compile(rf"\({ONE}(?:, {ONE})*\)")
ROOT = Path(__file__).resolve().parents[1]
SOURCE = str(ROOT / "src" / "mnemos") + "/"
TESTS = (str(ROOT / "tests") + "/", str(ROOT / "bench") + "/")
ALLOWED = (
    SOURCE + "migrations/",
    SOURCE + "storage/transfer",  # transfer.py and transfer_*.py (export, import)
)
LOG_ENV = "MNEMOS_TEST_TENANT_LOG"  # where processes of their own report (`tests/watched.py`)
SKIPPED = ("/sqlalchemy/", "/alembic/", "/contextlib.py", "/threading.py", __file__)


@dataclass
class Findings:
    """Statements of Mnemos that touch a memory-side table without naming a tenant."""

    missing: dict[str, set[str]] = field(default_factory=dict)  # statement -> where
    checked: int = 0


FINDINGS = Findings()


def _origin(frame: FrameType | None) -> str | None:
    """`path:line` of the first frame outside SQLAlchemy and the standard plumbing."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in SKIPPED):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def lacks_tenant(statement: str) -> bool:
    """Whether `statement` touches a memory-side table without naming its tenant."""
    if EVERY_TENANT in statement or SCHEMA_CHANGE.match(statement):
        return False
    if not TOUCHES.search(statement):
        return False
    if INSERT.match(statement):
        at = statement.upper().find(" SELECT ")
        if at < 0 or not TOUCHES.search(statement[at:]):  # no memory-side table read
            return "tenant_id" not in statement[: at if at >= 0 else None]
    return CONDITION.search(statement) is None


def record(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> None:
    """`before_cursor_execute` on every engine: note a statement of Mnemos lacking a tenant."""
    del conn, cursor, parameters, context, executemany
    if not TOUCHES.search(statement):
        return
    origin = _origin(sys._getframe(1))
    if origin is None or origin.startswith(TESTS) or not origin.startswith(SOURCE):
        return  # a test's (or a benchmark's) own statement
    if origin.startswith(ALLOWED):
        return
    FINDINGS.checked += 1
    if lacks_tenant(statement):
        FINDINGS.missing.setdefault(_shape(statement), set()).add(origin)


def _shape(statement: str) -> str:
    """A statement on one line, each list of parameters as one: `IN (?, ?, ?)` is `IN (?...)`."""
    return PARAMETERS.sub("(?...)", " ".join(statement.split()))


def install() -> None:
    if not sa.event.contains(sa.engine.Engine, "before_cursor_execute", record):
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)


def absorb(path: str) -> None:
    """Add what processes of their own found (`tests/watched.py` wrote it to `path`)."""
    try:
        with open(path, encoding="utf-8") as log:
            lines = log.readlines()
    except FileNotFoundError:
        return
    for line in lines:
        found = json.loads(line)
        FINDINGS.missing.setdefault(found["statement"], set()).update(found["origins"])


def report() -> list[str]:
    """The offending statements, each with where Mnemos ran it (empty: all good)."""
    lines = []
    for statement, origins in sorted(FINDINGS.missing.items()):
        where = ", ".join(sorted(o.removeprefix(str(ROOT) + "/") for o in origins))
        lines.append(f"{statement[:400]}\n    from {where}")
    return lines
