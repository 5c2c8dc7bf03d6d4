"""An export file `times` as big as another: its memories and their history repeated, each copy
with keys of its own (row numbers moved past the previous copy's, the last 12 hex digits of each
memory id replaced by the copy's number), everything else once.

    python -m bench.replicate_export /tmp/export-100k.ndjson /tmp/export-1m.ndjson 10

Much faster than loading a data set of that size and exporting it; the copies share content,
owners and times, so the file is not `bench.dataset`'s at that size (ids no longer follow the
row order), but every row is a valid, distinct row of the same tables.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

IDS = {"memories": ("id",), "memory_history": ("memory_id", "superseded_by")}


def _moved(row: dict[str, Any], table: str, copy: int, step: int) -> dict[str, Any]:
    row = {**row, "pk": row["pk"] + copy * step}
    for column in IDS[table]:
        if row.get(column) is not None:
            row[column] = row[column][:24] + f"{copy:012x}"
    return row


def main() -> None:
    source, target, times = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    lines = source.read_bytes().splitlines()
    header, trailer = lines[0], orjson.loads(lines[-1])
    blocks: dict[str, list[dict[str, Any]]] = {}  # the file's tables, in its order
    for line in lines[1:-1]:
        record = orjson.loads(line)
        blocks.setdefault(record["t"], []).append(record["r"])
    with target.open("wb") as out:
        out.write(header + b"\n")
        for table, rows in blocks.items():
            prefix = b'{"t":' + orjson.dumps(table) + b',"r":'
            if table not in IDS:
                out.write(b"".join(prefix + orjson.dumps(row) + b"}\n" for row in rows))
                continue
            step = max(row["pk"] for row in rows)
            for copy in range(times):
                out.write(
                    b"".join(
                        prefix + orjson.dumps(_moved(row, table, copy, step)) + b"}\n"
                        for row in rows
                    )
                )
            trailer["rows"][table] *= times
        out.write(orjson.dumps(trailer) + b"\n")


if __name__ == "__main__":
    main()
