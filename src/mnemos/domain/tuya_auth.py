"""Tuya's cloud authentication: project credentials, access tokens and request signatures.

Every request carries `client_id`, `t` (milliseconds), `sign` and, except the token calls,
`access_token`. The signature is HMAC-SHA256 with the project's secret over
`client_id + access_token + t + nonce + stringToSign`, upper-case hex, where stringToSign is
`METHOD \\n sha256(body) \\n signed headers \\n path?sorted(k=v)&...`, exactly as the official
`tuya-connector-python` computes it. A signature is accepted once: a replay is refused with
1004 (send a `nonce` to make identical requests within one millisecond differ). Tokens and seen
signatures live in the database (tokens as hashes), so every process honours every other's.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from mnemos.domain.ids import utcnow
from mnemos.domain.ports import TuyaStore
from mnemos.errors import MnemosError

ACCESS_TTL = 7200
REFRESH_TTL = 30 * 24 * 3600
MAX_SKEW_MS = 5 * 60 * 1000
MAX_LIVE_PAIRS = 100
"""Token pairs a project holds at once; a new grant past them ends the oldest pair (a project
granting in a loop would otherwise add a pair a request for 30 days)."""
# What a well-formed header can hold; anything else is refused before it reaches a parser or
# the database (a 5,000-digit `t` would overflow `int()`, a non-ASCII `sign` `compare_digest`).
TIMESTAMP = re.compile(r"[0-9]{1,13}")
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")
EMPTY_OBJECT = re.compile(rb"\s*\{\s*\}\s*")


class TuyaError(MnemosError):
    """A refusal in Tuya's terms: HTTP 200 with `success: false`, a numeric code and a message."""

    status = 200
    code = "tuya_error"

    def __init__(self, tuya_code: int, message: str):
        super().__init__(message)
        self.tuya_code = tuya_code


def param_empty(name: str) -> TuyaError:
    return TuyaError(1100, f"param is empty: {name}")


def param_illegal(name: str, why: str) -> TuyaError:
    return TuyaError(1109, f"param is illegal: {name} {why}")


def sign_invalid() -> TuyaError:
    return TuyaError(1004, "sign invalid")


def token_expired() -> TuyaError:
    return TuyaError(1010, "token expired")


def token_invalid() -> TuyaError:
    return TuyaError(1011, "token invalid")


def permission_deny(why: str = "") -> TuyaError:
    return TuyaError(1106, f"permission deny{': ' + why if why else ''}")


@dataclass(frozen=True)
class SignedRequest:
    """What the signature covers, taken from the HTTP request by the API layer."""

    method: str
    path: str
    query: Sequence[tuple[str, str]]
    body: bytes
    headers: Mapping[str, str]


@dataclass(frozen=True)
class TuyaCaller:
    client_id: str
    organization_id: uuid.UUID


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _body_digest(body: bytes) -> str:
    # The connector signs an empty dict as no body. Recognised without parsing the body: the
    # signature is checked before anything else, so the body is still untrusted here.
    content = b"" if EMPTY_OBJECT.fullmatch(body) else body
    return hashlib.sha256(content).hexdigest()


def string_to_sign(request: SignedRequest) -> str:
    signed_headers = ""
    names = request.headers.get("signature-headers", "")
    for name in filter(None, (part.strip() for part in names.split(":"))):
        signed_headers += f"{name}:{request.headers.get(name.lower(), '')}\n"
    url = request.path
    if request.query:
        url += "?" + "&".join(f"{k}={v}" for k, v in sorted(request.query, key=lambda kv: kv[0]))
    return f"{request.method.upper()}\n{_body_digest(request.body)}\n{signed_headers}\n{url}"


def expected_sign(secret: str, client_id: str, access_token: str, request: SignedRequest) -> str:
    headers = request.headers
    message = client_id + access_token + headers.get("t", "") + headers.get("nonce", "")
    message += string_to_sign(request)
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest().upper()


class TuyaAuth:
    def __init__(self, store: TuyaStore):
        self.store = store

    def _project(self, request: SignedRequest, access_token: str) -> tuple[str, uuid.UUID]:
        client_id = request.headers.get("client_id", "")
        if not client_id:
            raise param_empty("client_id")
        if not CLIENT_ID.fullmatch(client_id):
            raise TuyaError(1005, "client id invalid")
        if not request.headers.get("sign"):
            raise param_empty("sign")
        t = request.headers.get("t", "")
        if not TIMESTAMP.fullmatch(t):
            raise param_illegal("t", "must be milliseconds since the epoch")
        if abs(int(t) - int(time.time() * 1000)) > MAX_SKEW_MS:
            raise TuyaError(1013, "request time is invalid")
        project = self.store.tuya_project(client_id)
        if project is None:
            raise TuyaError(1005, "client id invalid")
        secret, org = project
        want = expected_sign(secret, client_id, access_token, request)
        given = request.headers.get("sign", "").upper().encode()
        if not hmac.compare_digest(want.encode(), given):
            raise sign_invalid()
        self._refuse_replay(client_id, want, int(t))
        return client_id, org

    def _refuse_replay(self, client_id: str, sign: str, t: int) -> None:
        """Accept each signed request once. A signature covers the method, path, query, body,
        token, `t` and `nonce`, so a second request with the same one is a copy of the first;
        it is remembered until `t` leaves the accepted window, when `t` alone refuses it."""
        digest = hashlib.sha256(f"{client_id}:{sign}".encode()).hexdigest()
        until = datetime.fromtimestamp((t + MAX_SKEW_MS) / 1000, UTC)
        if not self.store.remember_tuya_signature(digest, until):
            raise TuyaError(1004, "sign invalid: this signed request was already used")

    def _issue(self, client_id: str, replaces: uuid.UUID | None = None) -> dict[str, object]:
        access, refresh = secrets.token_hex(16), secrets.token_hex(16)
        now = utcnow()
        saved = self.store.save_tuya_tokens(
            client_id,
            uuid.uuid4(),
            {
                "access": (_hash(access), now + timedelta(seconds=ACCESS_TTL)),
                "refresh": (_hash(refresh), now + timedelta(seconds=REFRESH_TTL)),
            },
            replaces=replaces,
            keep=MAX_LIVE_PAIRS,
        )
        if not saved:  # another refresh with the same token replaced the pair first
            raise token_invalid()
        return {
            "access_token": access,
            "refresh_token": refresh,
            "expire_time": ACCESS_TTL,
            "uid": client_id,
        }

    def grant(self, request: SignedRequest, grant_type: str | None) -> dict[str, object]:
        """`GET /v1.0/token?grant_type=1`: a token for a correctly signed project."""
        if grant_type is None:
            raise param_empty("grant_type")
        if grant_type != "1":
            raise param_illegal("grant_type", "must be 1")
        client_id, _ = self._project(request, "")
        return self._issue(client_id)

    def refresh(self, request: SignedRequest, refresh_token: str) -> dict[str, object]:
        """`GET /v1.0/token/{refresh_token}`: a new pair; the old pair stops working. A refresh
        token refreshes once: a second refresh with it, even one running at the same time,
        gets 1011 `token invalid`."""
        client_id, _ = self._project(request, "")
        found = self.store.tuya_token(_hash(refresh_token), "refresh")
        if found is None or found[0] != client_id:
            raise token_invalid()
        if found[2] < utcnow():
            raise token_expired()
        return self._issue(client_id, replaces=found[1])

    def caller(self, request: SignedRequest) -> TuyaCaller:
        """The project behind a signed business request with a live access token."""
        access_token = request.headers.get("access_token", "")
        if not access_token:
            raise param_empty("access_token")
        if not TOKEN.fullmatch(access_token):
            raise token_invalid()
        client_id, org = self._project(request, access_token)
        found = self.store.tuya_token(_hash(access_token), "access")
        if found is None or found[0] != client_id:
            raise token_invalid()
        if found[2] < utcnow():
            raise token_expired()
        return TuyaCaller(client_id, org)


def new_project_credentials() -> tuple[str, str]:
    """A client id and secret in Tuya's style (20 and 32 characters)."""
    return secrets.token_hex(10), secrets.token_hex(16)
