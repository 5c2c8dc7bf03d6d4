"""Whether two SQLite databases hold the same content: the same schema text in `sqlite_master`,
the same rows in every table (FTS5's shadow tables included, compared by a digest of each
table's rows in rowid or key order), and `PRAGMA integrity_check` ok in both. For checking that
a change to `mnemos import` leaves what it writes as it was.

    python -m bench.sqlite_same A.db B.db

Prints one JSON object (`same`, and what differs) and exits 1 when they differ.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from typing import Any


def describe(path: str) -> dict[str, Any]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    schema = sorted(
        db.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%'"
        ).fetchall(),
        key=lambda row: (row[0], row[1]),
    )
    tables = [
        name
        for kind, name, _, sql in schema
        if kind == "table" and sql and not sql.upper().startswith("CREATE VIRTUAL")
    ]
    digests = {}
    for table in tables:
        digest = hashlib.sha256()
        order = "rowid"
        if "WITHOUT ROWID" in next(sql for _, name, _, sql in schema if name == table).upper():
            order = "1"  # every column, in order
        rows = 0
        for row in db.execute(f'SELECT * FROM "{table}" ORDER BY {order}'):
            digest.update(repr(row).encode())
            rows += 1
        digests[table] = (rows, digest.hexdigest())
    integrity = db.execute("PRAGMA integrity_check").fetchall()
    db.close()
    return {"schema": schema, "tables": digests, "integrity": integrity}


def main() -> None:
    first, second = describe(sys.argv[1]), describe(sys.argv[2])
    differs = [
        table
        for table in sorted(set(first["tables"]) | set(second["tables"]))
        if first["tables"].get(table) != second["tables"].get(table)
    ]
    found = {
        "same": not differs
        and first["schema"] == second["schema"]
        and first["integrity"] == second["integrity"] == [("ok",)],
        "schema_same": first["schema"] == second["schema"],
        "tables_differ": differs,
        "rows": {table: rows for table, (rows, _) in first["tables"].items() if rows},
        "integrity": [first["integrity"][:3], second["integrity"][:3]],
    }
    print(json.dumps(found))
    sys.exit(0 if found["same"] else 1)


if __name__ == "__main__":
    main()
