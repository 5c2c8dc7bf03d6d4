"""The index builds at the end of a SQLite `mnemos import`, alone: in one process, on a database
an import filled, every index of the loaded tables dropped and built again inside one transaction
that is then rolled back (the file is left as it was), with the pragmas given, each build timed.

    python -m bench.index_builds FILE [PRAGMA=VALUE ...] [--order reverse|table]

`transfer_bulk` builds them the same way (their own definitions from `sqlite_master`, in its
order, after the load on the same connection with a 256 MiB page cache): the figures here are
what a pragma or an order does to that phase. Prints one JSON object: seconds and CPU seconds
(this process, every thread) per index and in all, the main thread's CPU seconds (what SQLite's
sorter threads, `PRAGMA threads`, take off it), the pragmas' answers, the load average.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

from mnemos.storage.transfer_bulk import SQLITE_CACHE_KIB

TABLES = ("memories", "memory_history", "vector_queue")


def main() -> None:
    path, *rest = sys.argv[1:]
    order = "schema"
    if "--order" in rest:
        at = rest.index("--order")
        order = rest[at + 1]
        del rest[at : at + 2]
    pragmas = [item.split("=", 1) for item in rest]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")  # as the import loads
    conn.execute("BEGIN IMMEDIATE")
    saved = conn.execute(
        "SELECT tbl_name, name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
        f"AND tbl_name IN ({', '.join('?' * len(TABLES))})",
        TABLES,
    ).fetchall()
    for _, name, _ in saved:
        conn.execute(f'DROP INDEX "{name}"')
    if order == "reverse":
        saved.reverse()
    elif order == "table":
        saved.sort(key=lambda row: TABLES.index(row[0]))
    answers = {}
    for name, value in pragmas:
        conn.execute(f"PRAGMA {name} = {value}")
        answers[name] = conn.execute(f"PRAGMA {name}").fetchone()[0]
    load = os.getloadavg()[0]
    builds = {}
    started, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    for _, name, sql in saved:
        one, one_cpu = time.perf_counter(), time.process_time()
        conn.execute(sql)
        builds[name] = [
            round(time.perf_counter() - one, 3),
            round(time.process_time() - one_cpu, 3),
        ]
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    thread_seconds = time.thread_time() - own
    conn.execute("ROLLBACK")
    conn.close()
    result = {
        "pragmas": answers,
        "order": order,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "main_thread_cpu_seconds": round(thread_seconds, 2),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "builds": builds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
