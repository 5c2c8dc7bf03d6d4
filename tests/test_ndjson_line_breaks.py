"""Every NDJSON producer escapes the line breaks JSON allows raw (U+2028, U+2029, U+0085), so
that a reader splitting on them (Python's `str.splitlines`) sees one line per record; the values
read back are the same (the person's export, `mnemos admin export-subject`, `mnemos export`
and `mnemos import`, the JSON log), on both backends."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import orjson
from fastapi.testclient import TestClient

from mnemos.logs import JsonFormatter
from mnemos.ndjson import LINE_BREAKS, line_safe
from mnemos.storage.transfer_import import import_database
from tests.test_rights_admin import ok, stored
from tests.test_transfer import client_on, dump, fresh, rows_of
from tests.world import World

BREAKS = "a\u2028b\u2029c\x85d"
CONTENT = f"first {BREAKS} end"
RAW = tuple(raw for raw, _ in LINE_BREAKS)


def _one_line_each(data: bytes) -> list[dict[str, object]]:
    """The records of NDJSON `data`, split as the strictest reader splits it."""
    assert not any(raw in data for raw in RAW)
    text = data.decode()
    assert text.splitlines() == data.decode().split("\n")[:-1]
    return [json.loads(line) for line in text.splitlines()]


def test_line_safe_escapes_each_break_and_keeps_the_value() -> None:
    value = {"k\u2028": [BREAKS, {"n": "\x85"}], "plain": "é “quoted” \\ \u2027"}
    line = line_safe(orjson.dumps(value))
    assert not any(raw in line for raw in RAW)
    assert orjson.loads(line) == json.loads(line) == value
    untouched = orjson.dumps({"plain": "é “quoted” \u2027 х"})
    assert line_safe(untouched) is untouched  # nothing to escape: no copy
    for alone in ("’ é \u2029", "\u2028 ©", "х \x85 ’"):  # each break beside its bytes' kin
        line = line_safe(orjson.dumps(alone))
        assert not any(raw in line for raw in RAW) and json.loads(line) == alone


def test_a_json_log_record_is_one_line() -> None:
    record = logging.makeLogRecord({"msg": "stored %s", "args": (BREAKS,), "name": "mnemos"})
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == f"stored {BREAKS}"


def test_the_persons_export_and_the_admin_export_are_one_line_per_memory(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    ann, bob = world.user("Ann", "acme"), world.user("Bob", "acme")
    bot = world.agent(bob, f"bot {BREAKS}")
    ids = {
        stored(client, bot, f"{CONTENT} {i}", scope="subject", subject_id=ann.id) for i in (1, 2)
    }

    answer = client.get("/api/v1/me/memories/export", headers=ann.headers)
    assert answer.status_code == 200, answer.text
    lines = _one_line_each(answer.content)
    assert {line["id"] for line in lines} == ids
    assert {line["content"] for line in lines} == {f"{CONTENT} 1", f"{CONTENT} 2"}
    assert {line["source_agent_name"] for line in lines} == {f"bot {BREAKS}"}

    out = tmp_path / "ann.ndjson"
    ok(database_url, "admin", "export-subject", "--user", ann.id, "--out", str(out))
    assert sorted(_one_line_each(out.read_bytes()), key=str) == sorted(lines, key=str)


def test_the_database_export_is_one_line_per_row_and_imports_back_the_same(
    client: TestClient, world: World, database_url: str, tmp_path: Path
) -> None:
    agent = world.agent(world.user("Ann", "acme"), f"bot {BREAKS}")
    memory_id = stored(client, agent, CONTENT, metadata={BREAKS: BREAKS})
    first = dump(database_url)
    records = _one_line_each(first)
    assert [r["r"]["content"] for r in records if r.get("t") == "memories"] == [CONTENT]

    backend = "postgresql" if database_url.startswith("postgres") else "sqlite"
    with fresh(backend, tmp_path / "again") as again:
        import_database(again, [*io.BytesIO(first)])
        assert rows_of(dump(again)) == rows_of(first)
        with client_on(again) as moved:
            answer = moved.get(f"/api/v1/agent/memories/{memory_id}", headers=agent.headers)
            assert answer.status_code == 200, answer.text
            assert answer.json()["data"]["content"] == CONTENT
            assert answer.json()["data"]["metadata"] == {BREAKS: BREAKS}
