"""One `mnemos import` of a file into a database that exists and is migrated, timed, as a process
of its own: `bench.ops --baseline` runs it with another version of Mnemos on `PYTHONPATH`, so
both versions import the same file into the same kind of database in the same run.

    PYTHONPATH=/tmp/main/src python -m bench.import_once URL FILE

Prints one JSON object: memories, rows, seconds, cpu_seconds (this process, every thread),
thread_cpu_seconds (the importing thread alone: SQLite's sorter threads are not in it), the
source file of the import code that ran.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mnemos.storage import transfer_import
from mnemos.storage.transfer_import import import_database


def main() -> None:
    url, file = sys.argv[1], Path(sys.argv[2])
    started, cpu, own = time.perf_counter(), time.process_time(), time.thread_time()
    with file.open("rb") as lines:
        summary = import_database(url, lines)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    thread_cpu_seconds = time.thread_time() - own
    found = {
        "memories": summary.rows.get("memories", 0),
        "rows": sum(summary.rows.values()),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "thread_cpu_seconds": thread_cpu_seconds,
        "code": transfer_import.__file__,
    }
    print(json.dumps(found))


if __name__ == "__main__":
    main()
