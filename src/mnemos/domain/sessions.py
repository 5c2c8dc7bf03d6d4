"""Browser sessions of the people's web page (`/ui/`): short-lived, signed, never a key.

A session is a signed statement "this browser is person P (or nobody yet) until T, and its forms
carry token C". It is an HS256 JWT under a secret of its own (`ui-session`) and audience
`mnemos-ui`, so it is never accepted as a bearer token by the APIs, nor an API token as a
session. A session ends when it expires, when the person signs out (its id is then recorded
until it would have expired, so a copy of the cookie is refused too), when the person revokes
their tokens (`tokens_valid_after` refuses every session issued before, as it refuses tokens), or
when their key is replaced (every session issued before the rotation is refused).
A session issued to nobody carries only the CSRF token of the sign-in form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import jwt
from cryptography.fernet import Fernet, InvalidToken

from mnemos.domain.accounts import SigningStore, check_not_revoked
from mnemos.domain.ids import utcnow
from mnemos.domain.models import UserContext
from mnemos.domain.ports import EndedSessions
from mnemos.errors import CsrfRefused, SessionExpired, Unauthorized

SESSION_SECRET = "ui-session"
SESSION_AUDIENCE = "mnemos-ui"
SESSION_ISSUER = "mnemos"
ALGORITHM = "HS256"
CLOCK_SKEW_MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class Session:
    user_id: uuid.UUID | None  # None: nobody has signed in yet
    csrf: str
    issued_at: float
    session_id: str
    expires_at: float


class SessionStore(SigningStore, EndedSessions, Protocol):
    """What sessions read: people, the shared secrets, and the sessions ended early."""


class SessionSigner:
    """Issues, reads and ends sessions; every process on one database shares the secret."""

    def __init__(self, store: SessionStore, lifetime_seconds: int):
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
        expires = now + self.lifetime
        session = Session(
            user_id,
            secrets.token_urlsafe(32),
            now.timestamp(),
            secrets.token_urlsafe(16),
            expires.timestamp(),
        )
        claims: dict[str, object] = {
            "iss": SESSION_ISSUER,
            "aud": SESSION_AUDIENCE,
            "iat": session.issued_at,
            "exp": expires,
            "csrf": session.csrf,
            "jti": session.session_id,
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
                options={"require": ["exp", "iat", "csrf", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise SessionExpired() from None
        except jwt.PyJWTError:
            raise Unauthorized("Not signed in") from None
        subject, csrf, iat = claims.get("sub"), claims["csrf"], claims["iat"]
        session_id, exp = claims["jti"], claims["exp"]
        if (
            not isinstance(csrf, str)
            or not isinstance(iat, int | float)
            or not isinstance(session_id, str)
            or not isinstance(exp, int | float)
        ):
            raise Unauthorized("Not signed in")
        try:
            user_id = uuid.UUID(subject) if isinstance(subject, str) else None
        except ValueError:
            raise Unauthorized("Not signed in") from None
        if user_id is not None and self.store.session_ended(session_id):
            raise Unauthorized("Not signed in")
        return Session(user_id, csrf, float(iat), session_id, float(exp))

    def seal(self, session: Session, value: bytes) -> str:
        """`value` encrypted for `session` alone, to travel in a short-lived cookie (the key of
        an agent just registered, to the page that shows it once); `unseal` reads it."""
        return self._sealer().encrypt(session.session_id.encode() + b"\0" + value).decode()

    def unseal(self, session: Session, sealed: str, max_age_seconds: int) -> bytes | None:
        """What `seal` encrypted for this same session at most `max_age_seconds` ago, or None
        (another session's, older, or not sealed here)."""
        try:
            plain = self._sealer().decrypt(sealed.encode(), ttl=max_age_seconds)
        except (InvalidToken, ValueError):
            return None
        sealed_for, _, value = plain.partition(b"\0")
        return value if hmac.compare_digest(sealed_for, session.session_id.encode()) else None

    def _sealer(self) -> Fernet:
        # A key of its own, derived from the session secret: a sealed value is no session.
        derived = hashlib.sha256(b"mnemos-ui-sealed\0" + self._secret()).digest()
        return Fernet(base64.urlsafe_b64encode(derived))

    def end(self, session: Session) -> None:
        """Sign out: this session, and every copy of its cookie, is refused from now on."""
        if session.user_id is None:
            return  # nobody's session opens nothing
        # Kept a margin past the session's expiry: a process whose clock is behind the one that
        # cleans the table up still refuses the cookie until it sees it expired.
        expires_at = datetime.fromtimestamp(session.expires_at, UTC) + CLOCK_SKEW_MARGIN
        self.store.end_session(session.session_id, expires_at)

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
        # A session may have been opened with the key: replacing the key (a leaked one, most
        # likely) ends every session opened before, as the key itself stops working.
        replaced = self.store.user_key_replaced_at(ctx.user.id)
        if replaced is not None and session.issued_at <= replaced.timestamp():
            raise SessionExpired("Your key was replaced; sign in again")
        return ctx


def check_csrf(session: Session, sent: str | None) -> None:
    """A state-changing request must echo its session's CSRF token (`csrf_refused` if not)."""
    if not sent or not hmac.compare_digest(sent.encode(), session.csrf.encode()):
        raise CsrfRefused()
