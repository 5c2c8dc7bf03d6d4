"""Organizations, people, agents, their keys and plans.

API keys are random, prefixed by kind (`mn_agent_`, `mn_user_`), shown once, and stored only as
SHA-256 hashes: a key has 256 bits of entropy, so a fast hash is enough and lookups stay O(1).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import jwt

from mnemos.config import DEFAULT_MAX_AGENTS_PER_USER
from mnemos.domain.history import by_person
from mnemos.domain.ids import utcnow
from mnemos.domain.models import Agent, Organization, User
from mnemos.domain.ports import AccountStore, KeyKind, Secrets
from mnemos.domain.tenants import tenant_of
from mnemos.domain.values import check_optional_text, check_text
from mnemos.errors import AgentLimitReached, NotFound, Unauthorized, invalid_field

KEY_PREFIXES: dict[KeyKind, str] = {"agent": "mn_agent_", "user": "mn_user_"}
JWT_ISSUER = "mnemos"
JWT_AUDIENCE = "mnemos"
JWT_ALGORITHM = "HS256"
JWT_SECRET_NAME = "jwt-hs256"
MAX_TOKEN_TTL = 366 * 24 * 3600
AGENT_DELETE_BATCH = 1_000  # an agent's memories deleted or kept without it per transaction


class SigningStore(AccountStore, Secrets, Protocol):
    """People, and the database's shared secrets: what issuing and checking a token reads."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(kind: KeyKind) -> str:
    return KEY_PREFIXES[kind] + secrets.token_urlsafe(32)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"


@dataclass(frozen=True)
class IssuedAgent:
    agent: Agent
    api_key: str


@dataclass(frozen=True)
class IssuedUser:
    user: User
    api_key: str


def _name(value: str, field: str) -> str:
    value = check_text(value, field).strip()
    if not value or len(value) > 200:
        raise invalid_field(field, "must be 1..200 characters")
    return value


def create_organization(store: AccountStore, name: str) -> Organization:
    org = Organization(id=uuid.uuid4(), name=_name(name, "name"))
    store.create_organization(org)
    return org


def create_user(store: AccountStore, name: str, email: str, org_id: uuid.UUID | None) -> IssuedUser:
    check_text(email, "email")
    if "@" not in email or len(email) > 320:
        raise invalid_field("email", "must be an email address")
    if org_id is not None and store.get_organization(org_id) is None:
        raise NotFound("No such organization", {"org": str(org_id)})
    now = utcnow()
    user_id = uuid.uuid4()
    user = User(
        id=user_id,
        name=_name(name, "name"),
        email=email.strip().lower(),
        handle=f"{slug(email.split('@')[0])}-{user_id.hex[:6]}",
        organization_id=org_id,
        memory_enabled=True,
        inserted_at=now,
        updated_at=now,
    )
    store.create_user(user)
    key = new_key("user")
    store.add_api_key(hash_key(key), "user", user.id)
    return IssuedUser(user, key)


def create_agent(
    store: AccountStore,
    owner_id: uuid.UUID,
    name: str,
    description: str | None,
    *,
    max_agents: int = DEFAULT_MAX_AGENTS_PER_USER,
) -> IssuedAgent:
    """An agent for a person, with its key; refused once they own `max_agents` (each agent's key
    has its own request allowance, so the cap bounds what one person can get)."""
    owner = store.get_user(owner_id)
    if owner is None:
        raise NotFound("No such user", {"owner": str(owner_id)})
    check_optional_text(description, "description")
    if description is not None and len(description) > 2000:
        raise invalid_field("description", "must be at most 2000 characters")
    now = utcnow()
    agent_id = uuid.uuid4()
    agent = Agent(
        id=agent_id,
        name=_name(name, "name"),
        description=description,
        owner_id=owner.id,
        handle=f"{owner.handle}/{slug(name)}-{agent_id.hex[:6]}",
        inserted_at=now,
        updated_at=now,
    )
    if not store.create_agent(agent, max_agents):
        raise AgentLimitReached(
            f"A person may own at most {max_agents} agents; delete one first",
            {"max_agents": max_agents},
        )
    key = new_key("agent")
    store.add_api_key(hash_key(key), "agent", agent.id)
    return IssuedAgent(agent, key)


def jwt_secret(store: Secrets, configured: str = "") -> bytes:
    """The configured HS256 secret (at least 32 bytes, checked by Settings) or the database's."""
    return configured.encode() if configured else store.secret(JWT_SECRET_NAME)


def issue_token(store: SigningStore, user_id: uuid.UUID, ttl_seconds: int, secret: str = "") -> str:
    """A JWT for a person, signed with this deployment's shared secret."""
    if not 1 <= ttl_seconds <= MAX_TOKEN_TTL:
        raise invalid_field("ttl", f"must be 1..{MAX_TOKEN_TTL} seconds")
    if store.get_user(user_id) is None:
        raise NotFound("No such user", {"user": str(user_id)})
    now = utcnow()
    claims = {
        "sub": str(user_id),
        "iss": JWT_ISSUER,
        "aud": JWT_AUDIENCE,
        # To the microsecond (a NumericDate may be fractional): a token issued in the same second
        # as, but after, a revocation must stay valid (see `check_not_revoked`).
        "iat": now.timestamp(),
        "exp": now + timedelta(seconds=ttl_seconds),
    }
    return jwt.encode(claims, jwt_secret(store, secret), algorithm=JWT_ALGORITHM)


@dataclass(frozen=True)
class TokenClaims:
    """What Mnemos uses of a verified bearer token."""

    user_id: uuid.UUID
    issued_at: float | None


def token_claims(claims: dict[str, object]) -> TokenClaims:
    """The subject and issue time of verified claims; `unauthorized` if they are not usable."""
    iat = claims.get("iat")
    if iat is not None and (isinstance(iat, bool) or not isinstance(iat, int | float)):
        raise Unauthorized("Invalid or expired token")
    try:
        return TokenClaims(uuid.UUID(str(claims["sub"])), None if iat is None else float(iat))
    except ValueError:
        raise Unauthorized("Invalid or expired token") from None


def own_token_claims(store: Secrets, token: str, secret: str = "") -> TokenClaims:
    """The claims of a Mnemos-issued JWT; `unauthorized` for anything else."""
    try:
        claims = jwt.decode(
            token,
            jwt_secret(store, secret),
            algorithms=[JWT_ALGORITHM],
            audience=JWT_AUDIENCE,
            issuer=JWT_ISSUER,
            options={"require": ["exp", "sub", "iss", "aud"]},
        )
    except jwt.PyJWTError:
        raise Unauthorized("Invalid or expired token") from None
    return token_claims(claims)


def check_not_revoked(user: User, issued_at: float | None) -> None:
    """Refuse a token issued at or before the person's last revocation (or with no `iat` once
    they have revoked). Strictly after: Mnemos tokens carry `iat` to the microsecond, so one
    issued later in the same second passes; an external token's whole-second `iat` in the
    revocation's second is refused (the safe side)."""
    cutoff = user.tokens_valid_after
    if cutoff is None:
        return
    if issued_at is None or issued_at <= cutoff.timestamp():
        raise Unauthorized("Token revoked")


def revoke_tokens(store: AccountStore, user_id: uuid.UUID) -> datetime:
    """Refuse every bearer token issued to the person until now; the revocation time."""
    now = utcnow()
    if not store.set_tokens_valid_after(user_id, now):
        raise NotFound("No such user", {"user": str(user_id)})
    return now


def rotate_user_key(store: AccountStore, user_id: uuid.UUID) -> str:
    """A new API key for a person; their previous keys stop working at once."""
    if store.get_user(user_id) is None:
        raise NotFound("No such user", {"user": str(user_id)})
    return _replace_key(store, "user", user_id)


def rotate_agent_key(
    store: AccountStore, agent_id: uuid.UUID | None, owner_id: uuid.UUID | None = None
) -> str:
    """A new API key for an agent (of `owner_id`, when given: 404 for anyone else's, so
    existence is not leaked); its previous keys stop working at once, its memories stay."""
    agent = store.get_agent(agent_id) if agent_id else None
    if agent is None or (owner_id is not None and agent.owner_id != owner_id):
        raise NotFound("Agent not found")
    return _replace_key(store, "agent", agent.id)


def _replace_key(store: AccountStore, kind: KeyKind, principal_id: uuid.UUID) -> str:
    key = new_key(kind)
    store.replace_api_keys(kind, principal_id, hash_key(key))
    return key


def owned_agent(store: AccountStore, owner_id: uuid.UUID, agent_id: uuid.UUID | None) -> Agent:
    """One of a person's agents (404 for anyone else's: existence is not leaked)."""
    agent = store.get_agent(agent_id) if agent_id else None
    if agent is None or agent.owner_id != owner_id:
        raise NotFound("Agent not found")
    return agent


def delete_owned_agent(
    store: AccountStore, owner_id: uuid.UUID, agent_id: uuid.UUID | None
) -> Agent:
    """Delete one of a person's agents (404 for anyone else's: existence is not leaked).

    Its keys are revoked first, in a short transaction of their own; its memories are then
    deleted (agent-scoped) or kept without it (the others), `AGENT_DELETE_BATCH` a transaction,
    so that no transaction holds SQLite's one writer for long however large the agent; the last
    transaction deletes the agent with what its requests in flight stored meanwhile (404 if
    another deletion of the agent, running at the same time, deleted it first). A crash
    between two leaves the agent, its key revoked, with part of its memories done: what its
    owner was deleting anyway, and deleting it again finishes."""
    agent = owned_agent(store, owner_id, agent_id)
    owner = store.get_user(owner_id)
    tenant = tenant_of(owner.organization_id if owner else None, owner_id)
    by = by_person(owner_id)
    store.revoke_api_keys(agent.id)
    after = store.part_with_agent_memories(agent.id, tenant, AGENT_DELETE_BATCH, None, by=by)
    while after is not None:
        after = store.part_with_agent_memories(agent.id, tenant, AGENT_DELETE_BATCH, after, by=by)
    if not store.delete_agent(agent.id, tenant, by=by):
        raise NotFound("Agent not found")  # another deletion of it finished first
    return agent
