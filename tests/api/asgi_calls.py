"""Requests sent straight to the ASGI app, for what a test client cannot do: a body that
arrives in parts, or never arrives, from a chosen address."""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.world import memory_body


def http_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]], address: str = "testclient"
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "client": (address, 40000),
        "server": ("testserver", 80),
    }


class SlowUpload:
    """A POST of a memory whose body arrives in two parts, the second only when `finish` is
    called: a client trickling its upload, as a slow or hostile one does over a real socket."""

    def __init__(self, app: FastAPI, path: str, headers: dict[str, str], address: str):
        self.app = app
        body = json.dumps(memory_body("slow upload")).encode()
        self.parts = [body[:10], body[10:]]
        self.scope = http_scope(
            "POST",
            path,
            [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            + [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            address,
        )
        self.release = anyio.Event()
        self.sent = 0
        self.status: int | None = None

    async def run(self) -> None:
        async def receive() -> dict[str, Any]:
            self.sent += 1
            if self.sent == 1:
                return {"type": "http.request", "body": self.parts[0], "more_body": True}
            if self.sent == 2:
                await self.release.wait()
                return {"type": "http.request", "body": self.parts[1], "more_body": False}
            await anyio.sleep_forever()
            raise AssertionError  # pragma: no cover

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]

        await self.app(self.scope, receive, send)


def start_slow_uploads(client: TestClient, uploads: list[SlowUpload]) -> None:
    """Start each upload and wait until each has its body half read."""
    assert client.portal is not None
    for upload in uploads:
        client.portal.start_task_soon(upload.run)
    for _ in range(200):
        if all(u.sent >= 2 for u in uploads):
            return
        client.portal.call(anyio.sleep, 0.01)
    raise AssertionError("the slow uploads never started reading their bodies")


def finish(client: TestClient, uploads: list[SlowUpload]) -> list[int | None]:
    """Send the rest of each upload's body; their statuses once answered."""
    assert client.portal is not None
    for upload in uploads:
        client.portal.call(upload.release.set)
    for _ in range(500):
        if all(u.status is not None for u in uploads):
            break
        client.portal.call(anyio.sleep, 0.01)
    return [u.status for u in uploads]


def cut_body_request(
    client: TestClient, path: str, headers: list[tuple[bytes, bytes]]
) -> list[dict[str, Any]]:
    """A POST whose body's first part arrives and the rest never does: what it was sent."""

    async def call() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        parts = iter([{"type": "http.request", "body": b"{" * 10, "more_body": True}])

        async def receive() -> dict[str, Any]:
            part = next(parts, None)
            if part is None:
                await anyio.sleep_forever()  # the rest of the body never comes
            return part  # type: ignore[return-value]

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        with anyio.fail_after(5):
            await client.app(http_scope("POST", path, headers), receive, send)  # type: ignore[arg-type]
        return sent

    assert client.portal is not None
    return client.portal.call(call)
