"""HTTP/1.1 connections no client can hold open: deadlines to send a request, a cap on its head.

This is uvicorn's httptools protocol with what it lacks on an open network:

- **Deadlines.** A request's head (request line and headers) must arrive within `head_timeout`
  of the connection opening, or of the first byte of a next request on a kept-alive connection,
  and its body within `body_timeout` of the head; otherwise the connection is closed. uvicorn
  itself closes only kept-alive connections that sit idle after a response: a socket that never
  sends a whole request would stay open for ever.
- **A bounded head.** Past `max_head_bytes` in all, or `max_line_bytes` in one header, the
  request is answered 431 (414 for a long request target) in the error shape and the connection
  closed, before the application sees it. httptools would buffer a header of any size.
- **Malformed requests in the error shape.** What httptools cannot parse is answered 400
  `bad_request` in JSON like every other error (uvicorn's own answer is plain text).

The limit on requests handled at once lives in the application (`InFlightLimitMiddleware`),
where it counts requests rather than sockets.
"""

from __future__ import annotations

import asyncio
import http
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mnemos.api.middleware import REQUEST_ID_HEADER
from mnemos.api.responses import error_body
from mnemos.config import Settings

HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout: float
    body_timeout: float
    max_head_bytes: int
    max_line_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            head_timeout=settings.header_timeout_seconds,
            body_timeout=settings.body_timeout_seconds,
            max_head_bytes=settings.max_header_bytes,
            max_line_bytes=settings.max_header_line_bytes,
        )


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


MALFORMED = Refusal(400, "bad_request", "The request is not valid HTTP/1.1")


class _Refused(Exception):
    """Raised in a parser callback: httptools stops and reports a callback error."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """One connection; `limits` is set on the subclass that `guarded_protocol` makes."""

    limits: ClassVar[ConnectionLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading_head = True
        self._head_bytes = 0
        self._head_tail = b""  # the last bytes of the head so far, to find an end split in two
        self._target_bytes = 0
        self._refusal: Refusal | None = None
        self._held: Refusal | None = None  # a refusal waiting for the answers before it

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._held is not None:  # the connection ends once the answers before it are out
            return
        if self._reading_head:
            window = self._head_tail + data
            end = window.find(HEAD_END)
            self._head_bytes += len(data) if end < 0 else end + len(HEAD_END) - len(self._head_tail)
            self._head_tail = window[-(len(HEAD_END) - 1) :]
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse(self._too_large_head())
                return
        super().data_received(data)

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a next request on a kept-alive connection
            self._arm(self.limits.head_timeout)

    def on_url(self, url: bytes) -> None:
        self._target_bytes += len(url)
        if self._target_bytes > self.limits.max_line_bytes:
            self._stop(Refusal(414, "uri_too_long", self._over("The request target")))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > self.limits.max_line_bytes:
            self._stop(Refusal(431, "headers_too_large", self._over("A request header")))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_bytes = self._target_bytes = 0
        self._head_tail = b""
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._reading_head = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:  # noqa: ARG002 (uvicorn's text)
        """uvicorn's answer to a parser error (its own is plain text), which is also how a
        callback's refusal arrives."""
        self._refuse(self._refusal or MALFORMED)

    # Limits
    def _over(self, what: str) -> str:
        return f"{what} exceeds {self.limits.max_line_bytes} bytes"

    def _too_large_head(self) -> Refusal:
        message = f"Request headers exceed {self.limits.max_head_bytes} bytes"
        return Refusal(431, "headers_too_large", message)

    def _stop(self, refusal: Refusal) -> None:
        self._refusal = refusal
        raise _Refused(refusal.code)

    def on_response_complete(self) -> None:
        last = not self.pipeline  # uvicorn starts the next queued request, if there is one
        super().on_response_complete()
        if self._held is not None and last:
            self._answer_and_close(self._held)

    def _refuse(self, refusal: Refusal) -> None:
        self._disarm()
        self.logger.warning("Refused a request: %s", refusal.message)
        if self._may_answer():
            self._answer_and_close(refusal)
            return
        queued = bool(self.pipeline) and self.pipeline[0][0] is self.cycle
        if self._reading_head or queued:
            # Requests before it on this connection are still answered (the application may
            # already have acted on them): the refusal follows their answers, then the end.
            # A refused request waiting in the queue (its body failed) never runs.
            if queued:
                self.pipeline.popleft()
            self._held = refusal
            self.transport.pause_reading()
        else:
            self.transport.close()  # its own request is running: the application sees it gone

    def _answer_and_close(self, refusal: Refusal) -> None:
        self._held = None
        if not self.transport.is_closing():
            self.transport.write(_response(refusal))
            self.transport.close()

    def _may_answer(self) -> bool:
        """Whether an answer written now is the next on the wire. While a head is read,
        `cycle` is the request before it: only once that one is answered. While a body is
        read, `cycle` is its own request, which the application may already handle: unless
        it waits behind another or has begun its answer (the application then sees the
        client gone)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return True
        return not self._reading_head and not self.pipeline and not cycle.response_started

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, seconds: float) -> None:
        self._deadline = None
        if self._answering_earlier_request():
            self._arm(seconds)  # the client is not the one keeping us waiting (pipelining)
        elif not self.transport.is_closing():
            self.transport.close()

    def _answering_earlier_request(self) -> bool:
        if self._reading_head:  # `cycle` is the request before the one whose head is due
            return self.cycle is not None and not self.cycle.response_complete
        return bool(self.pipeline)  # the request whose body is due waits behind another


def _response(refusal: Refusal) -> bytes:
    request_id = uuid.uuid4().hex
    body = error_body(refusal.code, refusal.message, request_id)
    head = (
        f"HTTP/1.1 {refusal.status} {http.HTTPStatus(refusal.status).phrase}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
    ).encode()
    return head + REQUEST_ID_HEADER + b": " + request_id.encode() + b"\r\n\r\n" + body


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to hand uvicorn (`Config(http=...)`), with these limits."""
    return type("MnemosHttpProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})
