"""Two real `mnemos serve` processes on one database (ports 8940, 8941): the same key rotated on
both at once, many rounds; how many rounds leave both new keys working (review17, finding 2).

python rotate_race.py ROUNDS ANN_JSON   (ANN_JSON: the output of `mnemos admin create-user`)
"""

from __future__ import annotations

import json
import sys
import threading

import httpx

PORTS = (8940, 8941)


def one_round(key: str) -> list[str]:
    """Rotate `key` on both processes at once; the new keys that work afterwards."""
    barrier = threading.Barrier(len(PORTS))
    got: dict[int, httpx.Response] = {}

    def rotate(port: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            client.get("/healthz")  # the connection is up before the barrier
            barrier.wait()
            got[port] = client.post("/api/v1/me/api-key/rotate", headers={"X-API-Key": key})

    threads = [threading.Thread(target=rotate, args=(port,)) for port in PORTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    new = [r.json()["data"]["api_key"] for r in got.values() if r.status_code == 200]
    profile = f"http://127.0.0.1:{PORTS[0]}/api/v1/me/profile"
    return [k for k in new if httpx.get(profile, headers={"X-API-Key": k}).status_code == 200]


def main(rounds: int, ann_json: str) -> None:
    with open(ann_json) as file:
        key = json.load(file)["api_key"]
    counts = {"both_new_keys_work": 0, "one_works": 0, "none": 0}
    for _ in range(rounds):
        live = one_round(key)
        counts[{2: "both_new_keys_work", 1: "one_works"}.get(len(live), "none")] += 1
        if not live:
            break
        key = live[-1]
    print(json.dumps({"rounds": rounds, **counts}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
