"""Where `mnemos import` spends its time: one import into a fresh database of each backend, split
into phases (reading and parsing lines, value checks and row building, the driver's inserts per
table, each statement run after the load, the tenants' statements, the commit).

    flock /tmp/mnemos-bench.lock python -m bench.import_profile --memories 100000 \\
        --export /tmp/export.ndjson --backend sqlite --backend postgresql

The export file is made once (the benchmark's seeded data set, as `bench.ops` makes it) and
reused when it exists. The phases are measured by wrapping the import's own functions from the
outside, so the same script profiles any version of the code on `PYTHONPATH`. On PostgreSQL it
also reads the server process's CPU time (`/proc`), and times `to_tsvector` over the loaded rows
alone (what the generated `search` column costs the load). Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.run import database
from mnemos.config import Settings
from mnemos.storage import migrate


class Clock:
    """Seconds (wall and this process's CPU) per phase name."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.active = False  # only the import itself is measured (not the migrations)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.active:
            yield
            return
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.process_time() - cpu

    def wrap(self, module: Any, attr: str, name: Callable[..., str]) -> None:
        original = getattr(module, attr, None)
        if original is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name(*args, **kwargs)):
                return original(*args, **kwargs)

        setattr(module, attr, timed)

    def wrap_generator(self, module: Any, attr: str, name: str) -> None:
        original = getattr(module, attr, None)
        if original is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            inner = original(*args, **kwargs)
            while True:
                with self.phase(name):
                    try:
                        item = next(inner)
                    except StopIteration:
                        return
                yield item

        setattr(module, attr, timed)


def _statement_name(statement: Any) -> str:
    text = " ".join(str(statement).split())
    for word in ("INSERT INTO memories_fts", "INSERT INTO vector_queue", "INSERT INTO subject"):
        if text.startswith(word):
            return f"sql: {word[12:]}"
    return "sql: " + text[:70]


def instrument(clock: Clock) -> None:
    from mnemos.storage import transfer_bulk, transfer_import

    clock.wrap_generator(transfer_import, "_records", "read + parse lines")
    clock.wrap(transfer_bulk, "tuples", lambda table, *_, **__: f"check + build: {table.name}")
    for module in (transfer_bulk, transfer_import):
        if hasattr(module, "columns_of"):
            clock.wrap(module, "columns_of", lambda table, *_, **__: f"check + build: {table.name}")
    clock.wrap(transfer_import, "_name_tenants", lambda *_: "tenants of old rows")
    loader = getattr(transfer_bulk, "Loader", None)
    if loader is not None:
        original = loader.write

        def write(self: Any, table: Any, *args: Any, **kwargs: Any) -> Any:
            with clock.phase(f"load: {table.name} (incl. check + build)"):
                return original(self, table, *args, **kwargs)

        loader.write = write
    run = sa.engine.Connection.exec_driver_sql

    def exec_driver_sql(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        with clock.phase(_statement_name(statement)):
            return run(self, statement, *args, **kwargs)

    sa.engine.Connection.exec_driver_sql = exec_driver_sql  # type: ignore[method-assign]
    execute = sa.engine.Connection.execute

    def timed_execute(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        with clock.phase(_statement_name(statement)):
            return execute(self, statement, *args, **kwargs)

    sa.engine.Connection.execute = timed_execute  # type: ignore[method-assign]
    commit = sa.engine.Transaction.commit

    def timed_commit(self: Any) -> None:
        with clock.phase("commit"):
            commit(self)

    sa.engine.Transaction.commit = timed_commit  # type: ignore[method-assign]


def make_export(count: int, path: Path, tmp: Path) -> None:
    from bench.dataset import load
    from mnemos.storage import open_store
    from mnemos.storage.transfer import export_database

    source, _ = database("sqlite", tmp)
    settings = Settings(database_url=source)
    migrate(settings)
    store = open_store(settings)
    load(store, count)
    store.close()
    with path.open("wb") as out:
        export_database(source, out)


def profile(backend: str, dump: Path, tmp: Path, clock: Clock) -> dict[str, Any]:
    from mnemos.storage.transfer_import import import_database

    target = tmp / f"target-{backend}"
    target.mkdir()
    url, drop = database(backend, target)
    try:
        migrate(Settings(database_url=url))
        load_before = os.getloadavg()[0]
        started, cpu = time.perf_counter(), time.process_time()
        backend_cpu: dict[str, float] = {}
        if backend == "postgresql":
            _watch_backend(backend_cpu)
        clock.active = True
        try:
            with dump.open("rb") as lines:
                summary = import_database(url, lines)
        finally:
            clock.active = False
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
        memories = summary.rows.get("memories", 0)
        found: dict[str, Any] = {
            "memories": memories,
            "rows": sum(summary.rows.values()),
            "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu_seconds, 2),
            "memories_per_second": round(memories / seconds),
            "load_average_1m_before": round(load_before, 2),
            "load_average_1m_after": round(os.getloadavg()[0], 2),
        }
        if backend == "postgresql":
            found["server_cpu_seconds"] = round(backend_cpu.get("seconds", 0.0), 2)
            found["to_tsvector_alone_seconds"] = _tsvector_alone(url)
        return found
    finally:
        drop()


def _watch_backend(into: dict[str, float]) -> None:
    """Sum the CPU time of the import's server process when its connection closes: the import
    opens one engine; its pool's connections report their backend's CPU time on close."""
    from mnemos.storage import transfer

    connect = transfer.connect
    tick = os.sysconf("SC_CLK_TCK")

    def watched(target: str, *, write: bool) -> Any:
        engine = connect(target, write=write)

        @sa.event.listens_for(engine, "checkin")
        def _checkin(dbapi_conn: Any, _record: Any) -> None:
            pid = dbapi_conn.info.backend_pid
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            into["seconds"] = (int(fields[11]) + int(fields[12])) / tick

        return engine

    import mnemos.storage.transfer_import as importer

    importer.connect = watched  # type: ignore[assignment]


def _tsvector_alone(url: str) -> float:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        started = time.perf_counter()
        conn.exec_driver_sql(
            "SELECT sum(length(to_tsvector('simple'::regconfig, search_text))) FROM memories"
        ).scalar()
        seconds = time.perf_counter() - started
    engine.dispose()
    return round(seconds, 2)


def _rounded(phases: dict[str, float]) -> dict[str, float]:
    """Phases of 10 ms or more by name, the rest summed as one."""
    found = {name: round(value, 3) for name, value in sorted(phases.items()) if value >= 0.01}
    found["other statements (under 10 ms each)"] = round(
        sum(value for value in phases.values() if value < 0.01), 3
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--export", type=Path, required=True, help="made if missing, else reused")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--out", type=Path, help="JSON results file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mnemos-import-profile-"))
    result: dict[str, Any] = {"load_average_start": os.getloadavg(), "backends": {}}
    try:
        if not args.export.exists():
            make_export(args.memories, args.export, tmp)
        clock = Clock()
        instrument(clock)
        for backend in args.backend or ["sqlite"]:
            clock.wall.clear()
            clock.cpu.clear()
            found = profile(backend, args.export, tmp, clock)
            found["phases_wall"] = _rounded(clock.wall)
            found["phases_cpu"] = _rounded(clock.cpu)
            result["backends"][backend] = found
            print(backend, json.dumps(found, indent=1), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_average_end"] = os.getloadavg()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
