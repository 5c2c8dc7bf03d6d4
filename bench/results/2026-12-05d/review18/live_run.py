"""The agent's deletion, another organization's store and a third's read, from three clients
(review18, finding 1, against a real `mnemos serve`).

python bench/results/2026-12-05d/review18/live_run.py http://127.0.0.1:PORT keys.json
"""

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

BASE = "/api/v1/agent/memories"
MEMORY = {
    "content": "x",
    "system": "long_term",
    "type": "semantic",
    "segment": "user",
    "thought": "t",
}


def main(url: str, keys_file: str) -> None:
    keys = json.loads(Path(keys_file).read_text())
    results: dict[str, tuple[int, float]] = {}

    def timed(name: str, call: Callable[[], int]) -> None:
        began = time.perf_counter()
        status = call()
        results[name] = (status, round(time.perf_counter() - began, 2))

    clients = [httpx.Client(base_url=url, timeout=120) for _ in range(3)]
    owner, other, third = clients
    try:
        third.get(BASE, headers={"X-API-Key": keys["third"]})
        began = time.perf_counter()
        third.get(BASE, headers={"X-API-Key": keys["third"]})
        print("read alone", round(time.perf_counter() - began, 4))
        calls: list[tuple[str, Callable[[], int]]] = [
            (
                "delete",
                lambda: (
                    owner.delete(
                        f"/api/v1/me/agents/{keys['doomed']}", headers={"X-API-Key": keys["ann"]}
                    ).status_code
                ),
            ),
            (
                "other store",
                lambda: (
                    other.post(
                        BASE, json={"memory": MEMORY}, headers={"X-API-Key": keys["other"]}
                    ).status_code
                ),
            ),
            (
                "third read",
                lambda: third.get(BASE, headers={"X-API-Key": keys["third"]}).status_code,
            ),
        ]
        threads = []
        for (name, call), pause in zip(calls, (0.3, 0.1, 0.0), strict=True):
            thread = threading.Thread(target=timed, args=(name, call))
            thread.start()
            threads.append(thread)
            time.sleep(pause)
        for thread in threads:
            thread.join()
    finally:
        for client in clients:
            client.close()
    print(results)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
