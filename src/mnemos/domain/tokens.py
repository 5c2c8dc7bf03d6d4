"""Bearer tokens for people: Mnemos-issued (HS256) and an external identity provider's (JWKS).

Algorithms are pinned per issuer and, for an external token, per key: the algorithm comes from
the key the token names, never from the token itself (so an ES256 header naming an RSA key is
refused, not tried). `exp`, `iss`, `aud` and `sub` are required. An external token's `sub` must
be a Mnemos user id. A token issued at or before the person's last revocation is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import jwt

from mnemos.config import Settings
from mnemos.domain.accounts import (
    SigningStore,
    TokenClaims,
    check_not_revoked,
    own_token_claims,
    token_claims,
)
from mnemos.domain.models import UserContext
from mnemos.errors import Unauthorized

EXTERNAL_ALGORITHMS = frozenset({"RS256", "ES256"})
REQUIRED_CLAIMS = ["exp", "iss", "aud", "sub"]


def _invalid() -> Unauthorized:
    return Unauthorized("Invalid or expired token")


class TokenVerifier:
    def __init__(self, settings: Settings, store: SigningStore):
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

    def user(self, token: str) -> UserContext:
        """The person a live token names, with their organization; else `unauthorized`."""
        claims = self.claims(token)
        ctx = self.store.user_context(claims.user_id)
        if ctx is None:
            raise Unauthorized("Invalid credentials")
        check_not_revoked(ctx.user, claims.issued_at)
        return ctx

    def claims(self, token: str) -> TokenClaims:
        """The verified subject and issue time of a token, or `unauthorized`."""
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Unauthorized("Malformed token") from None
        if self.external and unverified.get("iss") == self.issuer:
            return self._external(token)
        return own_token_claims(self.store, token, self.own_secret)

    def _signing_key(self, token: str) -> jwt.PyJWK:
        try:
            if self._jwks_client is not None:
                return self._jwks_client.get_signing_key_from_jwt(token)
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            raise Unauthorized("Unknown signing key") from None
        assert self._jwks is not None
        for key in self._jwks.keys:
            if kid is None or key.key_id == kid:
                return key
        raise Unauthorized("Unknown signing key")

    def _external(self, token: str) -> TokenClaims:
        key = self._signing_key(token)
        if key.algorithm_name not in EXTERNAL_ALGORITHMS:
            raise _invalid()
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.PyJWTError:
            raise _invalid() from None
        return token_claims(claims)
