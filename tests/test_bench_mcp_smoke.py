"""The MCP-vs-REST benchmark keeps working: a tiny run, every path measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = {
    "rest search",
    "mcp search_memories",
    "mcp search_memories, 2026",
    "mcp search_memories, raw",
    "rest list",
    "mcp list_memories",
}


def test_tiny_mcp_vs_rest_run(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.mcp_vs_rest", "--memories", "2000", "--requests", "5"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((tmp_path / "sqlite.json").read_text())
    assert run["memories"] == 2000 and set(run["results"]) == PATHS
    for name, row in run["results"].items():
        assert 0 < row["p50"] <= row["p95"] <= row["p99"], name
        assert row["vs rest p50"] > 0, name
    assert "| mcp search_memories |" in done.stdout
