import time, sys, uuid, threading, json
from fastapi.testclient import TestClient
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import open_store, migrate
from tests.world import World
from tests.api.tuya_calls import tuya_project, DEVICE
url, n = sys.argv[1], int(sys.argv[2])
s = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
migrate(s)
store = open_store(s); w = World(store)
tag = str(time.time())
ann = w.user("Ann"+tag.replace(".",""), "tuya-org"+tag)
third = w.agent(w.user("Cy"+tag.replace(".",""), "third-org"+tag))
with TestClient(create_app(s, store)) as c:
    p = tuya_project(c, store, ann.organization_id)
    dev = "dev" + uuid.uuid4().hex[:8]
    path = f"{DEVICE}/{dev}/memories"
    for k in range(0, n, 50):
        body = {"bind_role_type": 2, "memory_list": [{"memory_key": f"k{k+i}", "memory_value": f"v{k+i}", "effective_scope": 1} for i in range(50)]}
        r = p.post(path, json.dumps(body).encode()); assert r["success"], r
    res = {}
    def clear():
        t0 = time.perf_counter()
        from urllib.parse import urlencode
        q = urlencode(sorted({"bind_role_type": "2", "clear_all_memory": "true"}.items()))
        h = p._headers("DELETE", path, q, b"", p.access_token)
        r = c.delete(path + "?" + q, headers=h); res["clear"] = (r.json().get("success"), time.perf_counter() - t0)
    def read():
        t0 = time.perf_counter(); r = c.get("/api/v1/agent/memories", headers=third.headers); res["C read"] = (r.status_code, time.perf_counter() - t0)
    c.get("/api/v1/agent/memories", headers=third.headers)
    ts = [threading.Thread(target=clear)]; ts[0].start(); time.sleep(0.3)
    ts.append(threading.Thread(target=read)); ts[1].start()
    for t in ts: t.join()
    print(n, "threads", s.resolved_worker_threads(), {k: (v[0], round(v[1], 2)) for k, v in res.items()})
