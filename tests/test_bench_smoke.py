"""The benchmark itself must keep working: a tiny run, checked for every path and figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tiny_benchmark_run(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.run", "--memories", "3000", "--requests", "16"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((tmp_path / "sqlite.json").read_text())
    assert run["memories"] == 3000 and run["server_peak_rss_mib"] > 0
    assert len(run["results"]) == 12
    for name, row in run["results"].items():
        assert row["1 client"]["p50"] > 0 and row["8 clients"]["rate"] > 0, name
        if name != "store":
            assert row["floor"]["p50"] > 0 and row["ratio p50"] > 0, name
    assert "| search common 10%, org-wide |" in done.stdout
