import time, sys, uuid, threading
from datetime import UTC, datetime, timedelta
from fastapi.testclient import TestClient
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import open_store, migrate
from tests.world import World, memory_body, agent_memory
url, n = sys.argv[1], int(sys.argv[2])
s = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
migrate(s)
store = open_store(s); w = World(store)
tag = str(time.time())
ann = w.user("Ann", "del-org"+tag); a = w.agent(ann)
other = w.agent(w.user("Bob", "other-org"+tag))
third = w.agent(w.user("Cy", "third-org"+tag))
start = datetime.now(UTC) - timedelta(days=1)
for k in range(0, n, 5000):
    rows = [agent_memory(a, f"private note {i} about harbor tea", start + timedelta(milliseconds=i), id=uuid.uuid4()) for i in range(k, min(n, k+5000))]
    store.replace_memories(a.tenant, rows, [], datetime.now(UTC))
print("threads", s.resolved_worker_threads())
with TestClient(create_app(s, store)) as c:
    res = {}
    def deleter():
        t0 = time.perf_counter(); r = c.delete(f"/api/v1/me/agents/{a.id}", headers=ann.headers); res["delete"] = (r.status_code, time.perf_counter()-t0)
    def storer():
        t0 = time.perf_counter(); r = c.post("/api/v1/agent/memories", json=memory_body("x"), headers=other.headers); res["B store"] = (r.status_code, time.perf_counter()-t0)
    def reader():
        t0 = time.perf_counter(); r = c.get("/api/v1/agent/memories", headers=third.headers); res["C read"] = (r.status_code, time.perf_counter()-t0)
    c.get("/api/v1/agent/memories", headers=third.headers)
    t0 = time.perf_counter(); c.get("/api/v1/agent/memories", headers=third.headers); print(f"C read alone {time.perf_counter()-t0:.3f}s")
    ts = [threading.Thread(target=deleter)]; ts[0].start(); time.sleep(0.3)
    ts.append(threading.Thread(target=storer)); ts[1].start(); time.sleep(0.1)
    ts.append(threading.Thread(target=reader)); ts[2].start()
    for t in ts: t.join()
    print(n, {k: (v[0], round(v[1], 2)) for k, v in res.items()})
