"""Retrieval quality: does a question in other words find the memory that answers it?

    python -m bench.recall_eval [--url URL --api-key KEY] [--mem0-python PY] [--out DIR]
                                [--floors 0.2,0.3,0.4]

The set (`bench/recall/`): 210 memories, each with a question that paraphrases it without its key
words (names of people aside), across 21 domains, plus 210 distractor memories on the same topics
and people that answer none of the questions. Every memory is stored for one agent; each question
is asked with limit 5, and recall@5 is the share of questions whose memory is among the five.

Modes:
- through the server's search API (`GET /api/v1/agent/memories/search?mode=...`), mode by mode,
  when the server has it;
- otherwise `keyword` is the Band list's `content_query` (what Mnemos had before: every word must
  match, newest first) and `semantic` is computed directly: the local embedder and exact cosine
  in numpy over the same memories (`semantic-direct`, always reported);
- `mem0` (with `--mem0-python`): Mem0 in its own venv, given the same memories with the same
  embedding model, served to its OpenAI embedder by `bench.embeddings_server`.

With `--floors`, the server's semantic and hybrid searches are asked again with each similarity
floor (`min_score`), and so are 60 questions about nothing stored (`bench/recall/unrelated.jsonl`:
general knowledge): recall@5 of the set, and how many unrelated questions get an empty answer.

Without `--url`, a fresh SQLite server is started (`mnemos serve`, loopback, free port).
Results: `bench/results/2026-12-01/recall/recall.json`, and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).parent
SET = HERE / "recall"
RESULTS = HERE / "results" / "2026-12-01" / "recall"
K = 5
AGENT = "/api/v1/agent/memories"
STOP = set(
    "a an the is are was were be been do does did what which who whom whose where when why how to"
    " of in on at for from by with and or not no this that these those it its his her their our"
    " my your i we you he she they them us me can could should would will must may might each"
    " every any some into than then so as if about after before per up out one person get gets"
    " have has had".split()
)


def load_pairs() -> tuple[list[dict[str, str]], list[str]]:
    """The pairs (`id`, `domain`, `memory`, `question`) and the distractor memories."""
    pairs = [json.loads(line) for line in (SET / "pairs.jsonl").read_text().splitlines()]
    distractors = [
        json.loads(line)["memory"] for line in (SET / "distractors.jsonl").read_text().splitlines()
    ]
    return pairs, distractors


def content_words(text: str) -> set[str]:
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP and len(w) > 2}


def figures(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)
    return {
        "p50_ms": round(ms[len(ms) // 2], 2),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2),
    }


def score(
    pairs: list[dict[str, str]],
    search: Callable[[str], list[str]],
) -> dict[str, Any]:
    """Ask every question; `search` answers the texts of the top memories, best first."""
    hits, latencies, misses = 0, [], []
    for pair in pairs:
        began = time.perf_counter()
        found = search(pair["question"])[:K]
        latencies.append(time.perf_counter() - began)
        if pair["memory"] in found:
            hits += 1
        else:
            misses.append({"id": pair["id"], "question": pair["question"], "top": found[:1]})
    return {
        f"recall@{K}": round(hits / len(pairs), 4),
        "questions": len(pairs),
        **figures(latencies),
        "misses": misses,
    }


def semantic_direct(memories: list[str]) -> Callable[[str], list[str]]:
    """The local embedder and exact cosine over all memories in numpy (no server)."""
    from mnemos.embedding import load_embedder

    embedder = load_embedder("local")
    assert embedder is not None
    matrix = embedder.embed(memories)

    def search(question: str) -> list[str]:
        scores = matrix @ embedder.embed([question])[0]
        top = np.argpartition(-scores, K)[:K]
        return [memories[i] for i in top[np.argsort(-scores[top])]]

    return search


# --- A server ------------------------------------------------------------------------------


def free_port() -> int:
    if os.environ.get("MNEMOS_BENCH_PORT"):
        return int(os.environ["MNEMOS_BENCH_PORT"])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def local_server() -> Iterator[tuple[str, str]]:
    """A fresh SQLite Mnemos on loopback with one agent: yields (base URL, agent key)."""
    with tempfile.TemporaryDirectory(prefix="mnemos-recall-") as tmp:
        env = {
            **os.environ,
            "MNEMOS_DATABASE_URL": f"sqlite:///{tmp}/recall.db",
            "MNEMOS_RATE_LIMIT_PER_MINUTE": "0",
        }

        def cli(*args: str) -> dict[str, Any]:
            done = subprocess.run(
                [sys.executable, "-m", "mnemos", *args], env=env, check=True, capture_output=True
            )
            answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
            return answer

        subprocess.run([sys.executable, "-m", "mnemos", "migrate"], env=env, check=True)
        user = cli("admin", "create-user", "--name", "Recall", "--email", "recall@example.com")
        agent = cli("admin", "create-agent", "--owner", user["id"], "--name", "Recall Agent")
        port = free_port()
        command = [sys.executable, "-m", "mnemos", "serve", "--port", str(port)]
        process = subprocess.Popen([*command, "--log-level", "warning"], env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            else:
                raise RuntimeError("server did not start")
            yield base, agent["api_key"]
        finally:
            process.terminate()
            process.wait(timeout=60)


@contextmanager
def given_server(url: str, key: str) -> Iterator[tuple[str, str]]:
    yield url, key


def store_all(http: httpx.Client, memories: list[str]) -> None:
    for content in memories:
        response = http.post(
            AGENT,
            json={
                "memory": {
                    "content": content,
                    "thought": "recall evaluation",
                    "system": "long_term",
                    "type": "semantic",
                    "segment": "user",
                }
            },
        )
        if response.status_code not in (200, 201):
            raise RuntimeError(f"store refused: {response.status_code} {response.text}")


def api_search(
    http: httpx.Client, mode: str, min_score: float | None = None
) -> tuple[Callable[[str], list[str]] | None, str]:
    """The server's search API in `mode` (with a similarity floor, if given), or None and why
    when the server cannot search so."""
    floor = {} if min_score is None else {"min_score": min_score}
    params = {"mode": mode, "limit": K, **floor}
    probe = http.get(f"{AGENT}/search", params={"query": "probe", **params})
    if probe.status_code != 200:
        return None, f"search API unavailable (HTTP {probe.status_code})"

    def search(question: str) -> list[str]:
        response = http.get(f"{AGENT}/search", params={"query": question, **params})
        if response.status_code == 422:  # keyword: too many words or too expensive: nothing found
            return []
        response.raise_for_status()
        return [item["content"] for item in response.json()["data"]]

    return search, f"search API mode={mode}"


def wait_indexed(http: httpx.Client, memories: list[str], seconds: float = 900) -> float | None:
    """Wait until every memory is found by meaning (the server embeds in the background);
    None when the server has no semantic search, else the seconds waited."""
    began = time.monotonic()
    for content in reversed(memories):
        while True:
            params = {"query": content, "mode": "semantic", "limit": 1}
            response = http.get(f"{AGENT}/search", params=params)
            if response.status_code != 200:
                return None
            if [item["content"] for item in response.json()["data"]] == [content]:
                break
            if time.monotonic() - began > seconds:
                raise RuntimeError(f"not searchable by meaning after {seconds} s: {content!r}")
            time.sleep(0.5)
    return round(time.monotonic() - began, 1)


def load_unrelated() -> list[str]:
    """Questions about nothing the set stores (`--floors`)."""
    lines = (SET / "unrelated.jsonl").read_text().splitlines()
    return [json.loads(line)["question"] for line in lines]


def floors(http: httpx.Client, pairs: list[dict[str, str]], wanted: list[float]) -> dict[str, Any]:
    """For each mode by meaning and floor (None: none): recall@5, and how many unrelated
    questions are answered with nothing."""
    unrelated = load_unrelated()
    found: dict[str, Any] = {}
    for mode in ("semantic", "hybrid"):
        for floor in (None, *wanted):
            search, _ = api_search(http, mode, floor)
            if search is None:
                continue
            scored = score(pairs, search)
            empty = sum(not search(question) for question in unrelated)
            found[f"{mode} min_score={floor}"] = {
                f"recall@{K}": scored[f"recall@{K}"],
                "unrelated_empty": empty,
                "unrelated": len(unrelated),
                "p50_ms": scored["p50_ms"],
            }
    return found


def floors_markdown(found: dict[str, Any]) -> str:
    lines = [
        "\n",
        f"| mode, floor | recall@{K} | unrelated questions answered empty |",
        "|---|---|---|",
    ]
    for name, row in found.items():
        lines.append(
            f"| {name} | {row[f'recall@{K}']:.3f} | {row['unrelated_empty']} of {row['unrelated']} |"
        )
    return "\n".join(lines)


def list_keyword(http: httpx.Client) -> Callable[[str], list[str]]:
    """The Band list with `content_query`: every word must match, newest first."""

    def search(question: str) -> list[str]:
        response = http.get(AGENT, params={"content_query": question, "limit": K})
        if response.status_code == 422:  # too many words or too expensive: nothing found
            return []
        response.raise_for_status()
        return [item["content"] for item in response.json()["data"]]

    return search


# --- Mem0 ----------------------------------------------------------------------------------


def run_mem0(python: str, pairs: list[dict[str, str]], memories: list[str]) -> dict[str, Any]:
    """Mem0 in its own venv, embedding through our model served over /v1/embeddings."""
    from bench.embeddings_server import serve
    from mnemos.embedding import load_embedder

    embedder = load_embedder("local")
    assert embedder is not None
    server = serve(embedder)
    try:
        with tempfile.TemporaryDirectory(prefix="mem0-recall-") as tmp:
            spec = Path(tmp) / "spec.json"
            out = Path(tmp) / "out.json"
            spec.write_text(
                json.dumps(
                    {
                        "memories": memories,
                        "questions": [p["question"] for p in pairs],
                        "k": K,
                        "embeddings_url": f"http://127.0.0.1:{server.server_address[1]}/v1",
                        "model": embedder.model,
                    }
                )
            )
            script = HERE / "peer_mem0_recall.py"
            subprocess.run([python, str(script), str(spec), str(out)], check=True)
            answer: dict[str, Any] = json.loads(out.read_text())
    finally:
        server.shutdown()
        server.server_close()
    found = iter(answer["results"])
    result = score(pairs, lambda _question: next(found))
    result.update(
        {
            "p50_ms": answer["search"]["p50_ms"],
            "p95_ms": answer["search"]["p95_ms"],
            "load_seconds": answer["load_seconds"],
            "version": answer["version"],
        }
    )
    return result


# --- Report --------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Recall@{K} on {report['pairs']} paraphrased questions over {report['memories']} memories "
        f"({report['share_sharing_a_word']:.0%} of questions share a content word, mostly a "
        "name, with their memory):",
        "",
        f"| mode | how | recall@{K} | search p50 / p95 ms |",
        "|---|---|---|---|",
    ]
    for mode, result in report["modes"].items():
        if "recall@5" not in result:
            lines.append(f"| {mode} | {result['how']} | - | - |")
            continue
        lines.append(
            f"| {mode} | {result['how']} | {result[f'recall@{K}']:.3f} | "
            f"{result['p50_ms']} / {result['p95_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running Mnemos (default: start a fresh SQLite one)")
    parser.add_argument("--api-key", help="an agent key on --url with none of its own memories")
    parser.add_argument("--mem0-python", help="python of a venv with mem0ai and qdrant-client")
    parser.add_argument("--no-server", action="store_true", help="only the direct semantic path")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--floors", help="similarity floors to measure, comma-separated")
    args = parser.parse_args()
    wanted = [float(x) for x in args.floors.split(",")] if args.floors else []
    floored: dict[str, Any] = {}

    pairs, distractors = load_pairs()
    memories = [p["memory"] for p in pairs] + distractors
    sharing = sum(bool(content_words(p["question"]) & content_words(p["memory"])) for p in pairs)
    modes: dict[str, Any] = {}
    waited: float | None = None
    direct = semantic_direct(memories)
    modes["semantic-direct"] = {
        "how": "local embedder + numpy exact cosine",
        **score(pairs, direct),
    }

    if not args.no_server:
        server = given_server(args.url, args.api_key) if args.url else local_server()
        with server as (base, key):
            with httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=30) as http:
                store_all(http, memories)
                waited = wait_indexed(http, memories)
                for mode in ("keyword", "semantic", "hybrid"):
                    search, how = api_search(http, mode)
                    if search is None and mode == "keyword":
                        search, how = list_keyword(http), "Band list content_query"
                    if search is None:
                        modes[mode] = {"how": how}
                        continue
                    modes[mode] = {"how": how, **score(pairs, search)}
                if wanted:
                    floored = floors(http, pairs, wanted)

    if args.mem0_python:
        modes["mem0"] = {
            "how": "Mem0, same model via /v1/embeddings, infer=False",
            **run_mem0(args.mem0_python, pairs, memories),
        }

    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "pairs": len(pairs),
        "memories": len(memories),
        "share_sharing_a_word": round(sharing / len(pairs), 3),
        "seconds_until_all_searchable_by_meaning": waited,
        "modes": modes,
        **({"floors": floored} if floored else {}),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall.json").write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report) + (floors_markdown(floored) if floored else ""))


if __name__ == "__main__":
    main()
