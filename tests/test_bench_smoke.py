"""The benchmark itself must keep working: a tiny run, checked for every path and figure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tiny_run(tmp_path: Path, *options: str) -> tuple[dict[str, object], str]:
    command = [sys.executable, "-m", "bench.run", "--memories", "3000", *options]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run: dict[str, object] = json.loads((tmp_path / "sqlite.json").read_text())
    return run, done.stdout


def check(run: dict[str, object], stdout: str) -> None:
    assert run["memories"] == 3000
    assert isinstance(run["server_peak_rss_mib"], int) and run["server_peak_rss_mib"] > 0
    results = run["results"]
    assert isinstance(results, dict) and len(results) == 14
    for name, row in results.items():
        assert row["1 client"]["p50"] > 0 and row["8 clients"]["rate"] > 0, name
        assert row["1 client"]["p50"] <= row["1 client"]["p95"] <= row["1 client"]["p99"], name
        if name != "store":
            assert row["floor"]["p50"] > 0 and row["ratio p50"] > 0, name
    assert "| search common 10%, org-wide |" in stdout
    assert "| search adversarial, org-wide |" in stdout


def test_tiny_benchmark_run_with_python_clients(tmp_path: Path) -> None:
    run, stdout = tiny_run(tmp_path, "--load", "python", "--requests", "16", "--workers", "1")
    assert run["load_generator"] == "python" and run["workers"] == 1
    check(run, stdout)


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_tiny_benchmark_run_with_wrk_and_two_workers(tmp_path: Path) -> None:
    run, stdout = tiny_run(tmp_path, "--load", "wrk", "--seconds", "1", "--workers", "2")
    assert run["load_generator"] == "wrk" and run["workers"] == 2
    assert run["server_peak_total_rss_mib"] > run["server_peak_rss_mib"]  # type: ignore[operator]
    check(run, stdout)


def test_a_kept_database_serves_as_the_next_runs_template(tmp_path: Path) -> None:
    kept = tmp_path / "template.db"
    first = tmp_path / "first"
    tiny_run(
        first,
        "--load",
        "python",
        "--requests",
        "4",
        "--workers",
        "1",
        "--keep-template",
        f"sqlite={kept}",
    )
    assert kept.stat().st_size > 0
    second = tmp_path / "second"
    again, stdout = tiny_run(
        second,
        "--load",
        "python",
        "--requests",
        "16",
        "--workers",
        "1",
        "--template",
        f"sqlite={kept}",
    )
    check(again, stdout)  # every path answers over the copy, with the keys it was given


def test_tiny_rights_benchmark_run(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench.rights", "--memories", "500", "--about", "200"]
    done = subprocess.run(
        [*command, "--backend", "sqlite", "--baseline-seconds", "1", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((tmp_path / "sqlite-500.json").read_text())
    assert run["export"]["memories"] == run["erase"]["erased"] == 200
    assert run["erase"]["left_rows_and_search_hits"] == [0, 0]
    assert run["list_normal"]["requests"] > 0
    assert "| erase 200 memories (request time) |" in done.stdout


def test_the_vector_side_benches_run_on_a_kept_database(tmp_path: Path) -> None:
    """`bench.vectors.copied` serves the vector suite's side benches: each copies a template,
    fills its vectors and measures (tiny here: whether they run, not what they find)."""
    kept = tmp_path / "template.db"
    command = [sys.executable, "-m", "bench.run", "--suite", "vectors", "--memories", "2000"]
    options = ["--load", "python", "--requests", "2", "--workers", "1"]
    done = subprocess.run(
        [*command, *options, "--keep-template", f"sqlite={kept}", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for bench, extra in (
        ("search_profile", ["--requests", "2"]),
        ("check_binds", ["--rounds", "5"]),
    ):
        out = tmp_path / f"{bench}.json"
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{bench}", "--template", f"sqlite={kept}", *extra]
            + ["--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(out.read_text())["sqlite"]
        assert found and all(figures for figures in found.values()), bench
