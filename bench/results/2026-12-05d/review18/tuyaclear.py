"""Tuya's clear-all of N device memories; meanwhile another organization's agent reads its
first page (review18, finding 1).

PYTHONPATH=. python bench/results/2026-12-05d/review18/tuyaclear.py URL N
"""

import json
import sys
import threading
import time
import uuid
from urllib.parse import urlencode

from fastapi.testclient import TestClient
from tests.api.tuya_calls import DEVICE, tuya_project
from tests.world import World

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage import migrate, open_store


def main(url: str, count: int) -> None:
    settings = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
    migrate(settings)
    store = open_store(settings)
    world = World(store)
    tag = str(time.time()).replace(".", "")
    ann = world.user(f"Ann{tag}", f"tuya-org{tag}")
    third = world.agent(world.user(f"Cy{tag}", f"third-org{tag}"))
    results: dict[str, tuple[object, float]] = {}
    with TestClient(create_app(settings, store)) as client:
        project = tuya_project(client, store, str(ann.organization_id))
        path = f"{DEVICE}/dev{uuid.uuid4().hex[:8]}/memories"
        for first in range(0, count, 50):
            entries = [
                {"memory_key": f"k{first + i}", "memory_value": "v", "effective_scope": 1}
                for i in range(50)
            ]
            body = {"bind_role_type": 2, "memory_list": entries}
            assert project.post(path, json.dumps(body).encode())["success"]

        def clear() -> None:
            began = time.perf_counter()
            query = urlencode(sorted({"bind_role_type": "2", "clear_all_memory": "true"}.items()))
            headers = project._headers("DELETE", path, query, b"", project.access_token)
            answer = client.delete(f"{path}?{query}", headers=headers).json()
            results["clear"] = (answer.get("success"), round(time.perf_counter() - began, 2))

        def read() -> None:
            began = time.perf_counter()
            status = client.get("/api/v1/agent/memories", headers=third.headers).status_code
            results["third read"] = (status, round(time.perf_counter() - began, 2))

        client.get("/api/v1/agent/memories", headers=third.headers)
        clearing = threading.Thread(target=clear)
        clearing.start()
        time.sleep(0.3)
        reading = threading.Thread(target=read)
        reading.start()
        clearing.join()
        reading.join()
    print(count, "request threads", settings.resolved_worker_threads(), results)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
