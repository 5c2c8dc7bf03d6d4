"""Where an erasure and an export spend their time, in one process, statement by statement.

    python -m bench.rights_profile --backend sqlite --memories 200000 --about 100000

Loads (or copies `--template`, as `bench.rights` keeps one) a database like `bench.rights`',
then, on a fresh copy for each:

- the erasure through `SqlStore.erase_subject`, timing every SQL statement it runs (and on
  PostgreSQL, first, `EXPLAIN (ANALYZE, BUFFERS)` of each in a transaction rolled back: per-row
  triggers and foreign-key checks show there);
- the export through `RightsService.export_encoded` and `api.rights.encoded_lines`: the time in
  the database's statement, in reading its rows, and in building the lines. On PostgreSQL the
  export's statements run on the driver's connection, pipelined (`storage/pg_export.py`):
  SQLAlchemy does not see them, so `statement_seconds` is 0 and the whole time is the export's.

Prints one JSON object (`--out` writes it too).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.rights import Loaded, load_or_copy
from mnemos.api.app import build_services
from mnemos.api.rights import encoded_lines
from mnemos.config import Settings
from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import Erasure
from mnemos.storage import open_store
from mnemos.storage.sql import SqlStore


@contextmanager
def statement_times(engine: sa.Engine) -> Iterator[list[dict[str, Any]]]:
    """Every statement run on `engine` meanwhile: its first words, seconds and rows."""
    found: list[dict[str, Any]] = []

    def before(conn: Any, *_: Any) -> None:
        conn.info["started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        took = time.perf_counter() - conn.info.pop("started", time.perf_counter())
        text = " ".join(statement.split())[:160]
        found.append({"sql": text, "ms": round(took * 1000, 2), "rows": cursor.rowcount})

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)
    try:
        yield found
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)
        sa.event.remove(engine, "after_cursor_execute", after)


def erase_profile(store: SqlStore, person: uuid.UUID) -> dict[str, Any]:
    erasure = Erasure(uuid7(), person, SERVER, utcnow())
    committing: list[float] = []

    def commit(_conn: Any) -> None:
        committing.append(time.perf_counter())

    sa.event.listen(store._write_engine, "commit", commit)
    try:
        with statement_times(store._write_engine) as statements:
            started = time.perf_counter()
            erased = store.erase_subject(erasure)
            ended = time.perf_counter()
    finally:
        sa.event.remove(store._write_engine, "commit", commit)
    in_sql = sum(s["ms"] for s in statements)
    commit_ms = (ended - committing[-1]) * 1000 if committing else 0.0
    return {
        "erased": erased,
        "seconds": round(ended - started, 3),
        "commit_ms": round(commit_ms, 1),
        "outside_statements_and_commit_ms": round((ended - started) * 1000 - in_sql - commit_ms, 1),
        "statements": statements,
    }


def pg_plans(url: str, person: uuid.UUID) -> list[dict[str, Any]]:
    """PostgreSQL: the erasure's statements once more under EXPLAIN (ANALYZE, BUFFERS), in a
    transaction rolled back (run on a copy the profile did not erase)."""
    store = open_store(Settings(database_url=url, embedder="none"))
    assert isinstance(store, SqlStore)
    engine = store._write_engine
    recorded: list[tuple[str, Any]] = []

    class Rollback(Exception):
        pass

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        recorded.append((statement, parameters))
        if statement.lstrip().upper().startswith("INSERT INTO ERASURES"):
            raise Rollback  # the erasure's last statement: its transaction rolls back

    sa.event.listen(engine, "before_cursor_execute", keep)
    try:
        store.erase_subject(Erasure(uuid7(), person, SERVER, utcnow()))
    except Rollback:
        pass
    finally:
        sa.event.remove(engine, "before_cursor_execute", keep)
    plans = []
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, parameters in recorded:
            if not statement.lstrip().upper().startswith(("DELETE", "INSERT", "SELECT")):
                continue
            started = time.perf_counter()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
            plan = [row[0][:300] for row in cursor.fetchall()]
            plans.append(
                {
                    "sql": " ".join(statement.split())[:160],
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                    "plan": plan,
                }
            )
        raw.rollback()
    finally:
        raw.close()
        store.close()
    return plans


def export_profile(url: str, person: uuid.UUID, profile: bool) -> dict[str, Any]:
    svc = build_services(Settings(database_url=url, embedder="none"))
    store = svc.store
    assert isinstance(store, SqlStore)
    ctx = store.user_context(person)
    assert ctx is not None
    timings: list[list[dict[str, Any]]] = []
    profiler = cProfile.Profile() if profile else None
    with statement_times(store._read_engine.engine) as statements:
        timings.append(statements)
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        lines = size = 0
        for chunk in encoded_lines(svc.rights.export_encoded(ctx)):
            lines += chunk.count(b"\n")
            size += len(chunk)
        if profiler:
            profiler.disable()
        total = time.perf_counter() - started
    in_sql = sum(s["ms"] for s in statements) / 1000
    result: dict[str, Any] = {
        "lines": lines,
        "bytes": size,
        "seconds": round(total, 3),
        "per_second": round(lines / total),
        "statement_seconds": round(in_sql, 3),
        "python_us_per_line": round((total - in_sql) / max(lines, 1) * 1e6, 2),
        "statements": len(statements),
        "slowest_statements": sorted(statements, key=lambda s: -s["ms"])[:3],
    }
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        result["profile"] = out.getvalue().splitlines()[:45]
    store.close()
    return result


def run(args: argparse.Namespace, url: str, loaded: Loaded) -> dict[str, Any]:
    result: dict[str, Any] = {"backend": args.backend, "memories": args.memories}
    result["export"] = export_profile(url, loaded.person_id, args.cprofile)
    if args.backend == "postgresql" and args.explain:
        result["erase_plans"] = pg_plans(url, loaded.person_id)
    store = open_store(Settings(database_url=url, embedder="none"))
    assert isinstance(store, SqlStore)
    result["erase"] = erase_profile(store, loaded.person_id)
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], required=True)
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--about", type=int, default=100_000)
    parser.add_argument("--template", help="a database `bench.rights --keep-template` saved")
    parser.add_argument("--keep-template", help="save the database loaded as a --template")
    parser.add_argument("--explain", action="store_true", help="PostgreSQL: EXPLAIN ANALYZE")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the export")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ["MNEMOS_EMBEDDER"] = "none"
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-rights-profile-"))
    try:
        url, drop, loaded, _ = load_or_copy(
            args.backend, args.memories, args.about, tmp, args.template, args.keep_template
        )
        try:
            result = run(args, url, loaded)
        finally:
            drop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text, file=sys.stdout)  # noqa: T201


if __name__ == "__main__":
    main()
