"""The cost of the embedding worker's adoption look (`SqlStore.adopt_vectors` with nothing to
adopt) over N vectors of 384 numbers, written straight into a migrated database (the look
reads `memory_vectors` only).

    python adopt_look.py sqlite:////tmp/look.db 1000000
    python adopt_look.py postgresql://postgres@127.0.0.1:5432/h_look 1000000
"""

from __future__ import annotations

import sys
import time
import uuid

import numpy as np
import sqlalchemy as sa

from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.storage.postgres import driver_url

INSERT = sa.text(
    "INSERT INTO memory_vectors (tenant_id, memory_pk, model, scale, vector) "
    "VALUES (:t, :p, :m, 1.0, :v)"
)


def main(url: str, count: int) -> None:
    migrate(Settings(database_url=url))
    engine = sa.create_engine(driver_url(url) if url.startswith("postgres") else url)
    sqlite = engine.dialect.name == "sqlite"
    tenant = uuid.uuid4().hex if sqlite else uuid.uuid4()
    vector = np.random.default_rng(1).integers(-127, 127, 384, dtype=np.int8).tobytes()
    with engine.begin() as conn:
        if sqlite:
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        for start in range(0, count, 50_000):
            rows = range(start, min(count, start + 50_000))
            model = "nomic-embed-text@384"
            conn.execute(INSERT, [{"t": tenant, "p": p, "m": model, "v": vector} for p in rows])
    if not sqlite:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE memory_vectors")
    engine.dispose()
    store = open_store(Settings(database_url=url))
    times = []
    for _ in range(7):
        began = time.perf_counter()
        assert store.adopt_vectors("nomic-embed-text", "nomic-embed-text@384", 384) == 0
        times.append(time.perf_counter() - began)
    store.close()
    with open("/proc/loadavg") as load:
        shown = [round(t * 1000) for t in times]
        median = sorted(times)[len(times) // 2] * 1000
        print(f"{engine.dialect.name} N={count} look ms: median {median:.0f}, all {shown}")
        print(f"load {load.read().strip()}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
