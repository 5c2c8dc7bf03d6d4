import time, tempfile, os, statistics, sys
from fastapi.testclient import TestClient
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import open_store, migrate
from tests.world import World, memory_body
url = sys.argv[1]
s = Settings(database_url=url, rate_limit_per_minute=0, embedder="none", max_in_flight_per_tenant=0)
migrate(s)
store = open_store(s); w = World(store)
a = w.agent(w.user("Ann", "amp-org"+str(time.time())))
texts = {"ascii words": " ".join(f"w{i%997}" for i in range(1700))[:10000],
         "a a a": "a " * 5000,
         "FDFA x10000": "\uFDFA" * 10000}
with TestClient(create_app(s, store)) as c:
    for rnd in range(3):
        for name, t in texts.items():
            ts = []
            for i in range(10):
                t0 = time.perf_counter(); r = c.post("/api/v1/agent/memories", json=memory_body(t), headers=a.headers); ts.append(time.perf_counter()-t0)
                assert r.status_code == 201, r.text[:200]
            print(rnd, f"{name:12s} median {statistics.median(ts)*1000:.1f} ms")
