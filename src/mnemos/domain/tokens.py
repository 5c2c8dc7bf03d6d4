"""Bearer tokens for people: Mnemos-issued (HS256) and an external identity provider's (JWKS).

Algorithms are pinned per issuer (never `none`, never the algorithm the token names), and
`exp`, `iss`, `aud` and `sub` are required. An external token's `sub` must be a Mnemos user id.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import jwt

from mnemos.config import Settings
from mnemos.domain.accounts import user_id_from_token
from mnemos.errors import Unauthorized
from mnemos.storage.base import Store

EXTERNAL_ALGORITHMS = ["RS256", "ES256"]
REQUIRED_CLAIMS = ["exp", "iss", "aud", "sub"]


class TokenVerifier:
    def __init__(self, settings: Settings, store: Store):
        self.store = store
        self.issuer = settings.jwt_issuer
        self.audience = settings.jwt_audience
        self.own_secret = settings.jwt_secret
        self._jwks_client: jwt.PyJWKClient | None = None
        self._jwks: jwt.PyJWKSet | None = None
        if settings.jwks_url:
            self._jwks_client = jwt.PyJWKClient(settings.jwks_url, cache_keys=True, lifespan=300)
        elif settings.jwks_file:
            self._jwks = jwt.PyJWKSet.from_dict(json.loads(Path(settings.jwks_file).read_text()))

    @property
    def external(self) -> bool:
        return bool(self.issuer and self.audience and (self._jwks_client or self._jwks))

    def user_id(self, token: str) -> uuid.UUID:
        """The Mnemos user a token names, or `unauthorized`."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Unauthorized("Malformed token") from None
        if self.external and unverified.get("iss") == self.issuer:
            return self._external(token)
        return user_id_from_token(self.store, token, self.own_secret)

    def _signing_key(self, token: str) -> object:
        if self._jwks_client is not None:
            return self._jwks_client.get_signing_key_from_jwt(token).key
        assert self._jwks is not None
        kid = jwt.get_unverified_header(token).get("kid")
        for key in self._jwks.keys:
            if kid is None or key.key_id == kid:
                return key.key
        raise Unauthorized("Unknown signing key")

    def _external(self, token: str) -> uuid.UUID:
        try:
            claims = jwt.decode(
                token,
                self._signing_key(token),  # type: ignore[arg-type]
                algorithms=EXTERNAL_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": REQUIRED_CLAIMS},
            )
            return uuid.UUID(str(claims["sub"]))
        except (jwt.PyJWTError, ValueError):
            raise Unauthorized("Invalid or expired token") from None
