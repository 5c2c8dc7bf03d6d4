"""What `pool_pre_ping` costs a connection checkout on PostgreSQL (loopback), in process:
checkouts of a pooled connection with and without the ping, alternating blocks of 500."""

import json
import os
import time

import numpy as np
import sqlalchemy as sa

URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
engines = {ping: sa.create_engine(URL, pool_size=2, pool_pre_ping=ping) for ping in (True, False)}
spent: dict[bool, list[float]] = {True: [], False: []}
for _ in range(10):
    for ping, engine in engines.items():
        for _ in range(500):
            started = time.perf_counter()
            with engine.connect():
                pass
            spent[ping].append((time.perf_counter() - started) * 1e6)
print(
    json.dumps(
        {
            f"checkout us, pre_ping={ping}": {
                f"p{p}": round(float(np.percentile(values[500:], p)), 1) for p in (50, 95, 99)
            }
            for ping, values in spent.items()
        }
        | {"load average": [round(x, 2) for x in os.getloadavg()]}
    )
)
