"""Create or drop a throwaway PostgreSQL database for one test run.

python scripts/test_database.py create        # prints the new database's URL
python scripts/test_database.py drop URL
"""

from __future__ import annotations

import os
import sys
import uuid

import psycopg
from psycopg import sql

SERVER = os.environ.get(
    "MNEMOS_TEST_POSTGRES_SERVER", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def main(argv: list[str]) -> int:
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as conn:
            if argv[:1] == ["create"]:
                name = f"mnemos_test_{uuid.uuid4().hex[:12]}"
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                base = SERVER.rsplit("/", 1)[0]
                print(f"{base}/{name}")
                return 0
            if argv[:1] == ["drop"] and len(argv) == 2:
                name = argv[1].rsplit("/", 1)[1]
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
                return 0
    except psycopg.OperationalError as exc:
        print(f"PostgreSQL not reachable: {exc}".strip(), file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
