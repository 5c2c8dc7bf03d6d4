"""Median over rounds of each side's p50 (ms) per row and pool, and the after/before ratio.

python bench/results/2026-12-05/rowscore9/summary.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
sides: dict[str, list[dict]] = {"before": [], "after": []}
for side, runs in sides.items():
    for path in sorted(HERE.glob(f"keyword_leg-{side}-round*.json")):
        runs.append(json.loads(path.read_text()))
first = sides["before"][0]
print(f"rounds: before {len(sides['before'])}, after {len(sides['after'])}")
for backend, rows in first.items():
    for row, pools in rows.items():
        for pool in pools:
            b, a = (
                statistics.median(run[backend][row][pool]["p50"] for run in sides[s])
                for s in ("before", "after")
            )
            overlap = [sides[s][0][backend][row][pool]["overlap"] for s in ("before", "after")]
            print(
                f"{backend:10} {row:42} {pool:9} {b:6.2f} -> {a:6.2f} ms  x{a / b:.2f}"
                f"  overlap {overlap[0]} -> {overlap[1]}"
            )

print(
    "\n| row | SQLite, every match | SQLite, pool 500 | PostgreSQL, every match | PostgreSQL, pool 500 |"
)
print("|---|---|---|---|---|")
for row in first["sqlite"]:
    cells = []
    for backend in ("sqlite", "postgresql"):
        for pool in ("pool None", "pool 500"):
            b, a = (
                statistics.median(run[backend][row][pool]["p50"] for run in sides[s])
                for s in ("before", "after")
            )
            cells.append(f"{b:.2f} → {a:.2f}")
    print(f"| {row} | " + " | ".join(cells) + " |")
