"""Browser sessions of the people's web page (`/ui/`): short-lived, signed, never a key.

A session is a signed statement "this browser is person P (or nobody yet) until T, and its forms
carry token C". It is an HS256 JWT under a secret of its own (`ui-session`) and audience
`mnemos-ui`, so it is never accepted as a bearer token by the APIs, nor an API token as a
session. Nothing is stored server side: a session ends when it expires, when the browser drops
it (Sign out), or when the person revokes their tokens (`tokens_valid_after` refuses every
session issued before, as it refuses tokens). A session issued to nobody carries only the CSRF
token of the sign-in form.
"""

from __future__ import annotations

import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt

from mnemos.domain.accounts import SigningStore, check_not_revoked
from mnemos.domain.ids import utcnow
from mnemos.domain.models import UserContext
from mnemos.errors import CsrfRefused, SessionExpired, Unauthorized

SESSION_SECRET = "ui-session"
SESSION_AUDIENCE = "mnemos-ui"
SESSION_ISSUER = "mnemos"
ALGORITHM = "HS256"


@dataclass(frozen=True)
class Session:
    user_id: uuid.UUID | None  # None: nobody has signed in yet
    csrf: str
    issued_at: float


class SessionSigner:
    """Issues and reads sessions; every process on one database shares the secret."""

    def __init__(self, store: SigningStore, lifetime_seconds: int):
        self.store = store
        self.lifetime = timedelta(seconds=lifetime_seconds)
        self._key: bytes | None = None

    def _secret(self) -> bytes:
        if self._key is None:  # created once per database, then fixed: read it once
            self._key = self.store.secret(SESSION_SECRET)
        return self._key

    def issue(self, user_id: uuid.UUID | None, now: datetime | None = None) -> tuple[str, Session]:
        """A new session (and a new CSRF token: signing in never keeps the old one)."""
        now = now or utcnow()
        session = Session(user_id, secrets.token_urlsafe(32), now.timestamp())
        claims: dict[str, object] = {
            "iss": SESSION_ISSUER,
            "aud": SESSION_AUDIENCE,
            "iat": session.issued_at,
            "exp": now + self.lifetime,
            "csrf": session.csrf,
        }
        if user_id is not None:
            claims["sub"] = str(user_id)
        return jwt.encode(claims, self._secret(), algorithm=ALGORITHM), session

    def read(self, token: str) -> Session:
        """The session a cookie holds; `session_expired` past its lifetime, else `unauthorized`
        for anything not signed here."""
        try:
            claims = jwt.decode(
                token,
                self._secret(),
                algorithms=[ALGORITHM],
                audience=SESSION_AUDIENCE,
                issuer=SESSION_ISSUER,
                options={"require": ["exp", "iat", "csrf"]},
            )
        except jwt.ExpiredSignatureError:
            raise SessionExpired() from None
        except jwt.PyJWTError:
            raise Unauthorized("Not signed in") from None
        subject, csrf, iat = claims.get("sub"), claims["csrf"], claims["iat"]
        if not isinstance(csrf, str) or not isinstance(iat, int | float):
            raise Unauthorized("Not signed in")
        try:
            user_id = uuid.UUID(subject) if isinstance(subject, str) else None
        except ValueError:
            raise Unauthorized("Not signed in") from None
        return Session(user_id, csrf, float(iat))

    def person(self, session: Session) -> UserContext:
        """The person signed in, as the APIs see them; refused once they revoked their tokens,
        or when the person is gone."""
        if session.user_id is None:
            raise Unauthorized("Not signed in")
        ctx = self.store.user_context(session.user_id)
        if ctx is None:
            raise Unauthorized("Not signed in")
        try:
            check_not_revoked(ctx.user, session.issued_at)
        except Unauthorized:
            raise SessionExpired("Your sessions were ended; sign in again") from None
        return ctx


def check_csrf(session: Session, sent: str | None) -> None:
    """A state-changing request must echo its session's CSRF token (`csrf_refused` if not)."""
    if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        raise CsrfRefused()
