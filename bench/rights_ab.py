"""Export paths side by side, in one process on one database: domain objects then JSON in
Python (`RightsService.export` + `ndjson_lines`, the web page's download) against JSON written
by the database (`export_encoded` + `encoded_lines`, the NDJSON route and `export-subject`).

    python -m bench.rights_ab --url sqlite:///bench.db --person UUID --rounds 2

Alternates the two paths `--rounds` times and prints memories per second for each, and their
ratio: on a shared machine only the ratio of one run is worth reading.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable, Iterator

from mnemos.api.app import build_services
from mnemos.api.rights import encoded_lines, ndjson_lines
from mnemos.config import Settings


def rate(chunks: Callable[[], Iterator[bytes]]) -> tuple[int, float]:
    started = time.perf_counter()
    lines = sum(chunk.count(b"\n") for chunk in chunks())
    return lines, lines / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--person", type=uuid.UUID, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    svc = build_services(Settings(database_url=args.url, embedder="none"))
    ctx = svc.store.user_context(args.person)
    assert ctx is not None
    paths = {
        "objects": lambda: ndjson_lines(svc.rights.export(ctx)),
        "encoded": lambda: encoded_lines(svc.rights.export_encoded(ctx)),
    }
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, chunks in paths.items():
            lines, per_second = rate(chunks)
            rates[name].append(round(per_second))
    best = {name: max(values) for name, values in rates.items()}
    result = {
        "memories": lines,
        "per_second": rates,
        "ratio": round(best["encoded"] / best["objects"], 1),
    }
    print(json.dumps(result))  # noqa: T201


if __name__ == "__main__":
    main()
