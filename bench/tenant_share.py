"""What a request pays for the tenant share (`MNEMOS_MAX_IN_FLIGHT_PER_TENANT`), versions side by
side, in process.

    python -m bench.tenant_share --side before=/tmp/main-tree --side after=. \\
        --requests 3000 --rounds 4

Per round and side (a source tree run with its own code: `bench.sides.in_side`), a fresh SQLite
database with one organization, one person, one agent and 20 memories; the app built by
`create_app` (defaults, rate limits off, no embedder) with its lifespan run, and one httpx client
over `ASGITransport` (no sockets: the middleware, authentication, the route and its thread hop
are all that is measured). Per path, 200 unmeasured requests, then `--requests` one after the
other; reported: mean, p50 and p95 µs per request, and the median of rounds. Sides run one after
the other, the order reversed every other round.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.sides import in_side

MEASURE = """
import asyncio, json, sys, tempfile, time, uuid
from pathlib import Path
import httpx
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store

requests = int(sys.argv[1])
tmp = Path(tempfile.mkdtemp(prefix="mnemos-share-bench-"))
settings = Settings(database_url=f"sqlite:///{tmp / 'bench.db'}", rate_limit_per_minute=0)
migrate(settings)
store = open_store(settings)
org = accounts.create_organization(store, "Bench")
person = accounts.create_user(store, "Ann", "ann@bench.test", org.id)
agent = accounts.create_agent(store, person.user.id, "Bench agent", None)
headers = {"X-API-Key": agent.api_key}
body = {"memory": {"content": "likes green tea", "system": "long_term", "type": "semantic",
                   "segment": "user", "thought": "bench"}}
PATHS = {"agent profile": "/api/v1/agent/me", "list, 20 newest": "/api/v1/agent/memories"}


async def main() -> dict:
    app = create_app(settings, store, embedder=None)
    found = {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for _ in range(20):
                assert (await client.post("/api/v1/agent/memories", json=body,
                                          headers=headers)).status_code == 201
            for name, path in PATHS.items():
                for _ in range(200):
                    assert (await client.get(path, headers=headers)).status_code == 200
                times = []
                for _ in range(requests):
                    started = time.perf_counter()
                    answer = await client.get(path, headers=headers)
                    times.append(time.perf_counter() - started)
                    assert answer.status_code == 200, answer.text
                times.sort()
                found[name] = {
                    "mean_us": round(sum(times) / len(times) * 1e6, 1),
                    "p50_us": round(times[len(times) // 2] * 1e6, 1),
                    "p95_us": round(times[int(len(times) * 0.95)] * 1e6, 1),
                }
    return found

print(json.dumps(asyncio.run(main())))
store.close()
"""


def run(sides: dict[str, Path], requests: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    order = list(sides)
    for number in range(rounds):
        for name in order if number % 2 == 0 else reversed(order):
            found = json.loads(in_side(sides[name], MEASURE, str(requests)))
            runs[name].append(found)
            print(number, name, json.dumps(found), flush=True)  # noqa: T201 - progress
    medians = {
        name: {
            path: {
                figure: round(statistics.median(run[path][figure] for run in found), 1)
                for figure in found[0][path]
            }
            for path in found[0]
        }
        for name, found in runs.items()
    }
    return {"requests": requests, "rounds": rounds, "runs": runs, "medians": medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", action="append", required=True, help="NAME=TREE")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    sides = {name: Path(tree).resolve() for name, tree in (s.split("=", 1) for s in options.side)}
    result = run(sides, options.requests, options.rounds)
    text = json.dumps(result, indent=1)
    if options.out:
        options.out.write_text(text + "\n")
    print(json.dumps(result["medians"], indent=1))  # noqa: T201 - the result


if __name__ == "__main__":
    main()
