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
from datetime import timedelta

import jwt

from mnemos.domain.ids import utcnow
from mnemos.domain.models import Agent, Organization, User
from mnemos.domain.values import check_optional_text, check_text
from mnemos.errors import NotFound, PlanRequired, Unauthorized, invalid_field
from mnemos.storage.base import KeyKind, Store

KEY_PREFIXES: dict[KeyKind, str] = {"agent": "mn_agent_", "user": "mn_user_"}
JWT_ISSUER = "mnemos"
JWT_AUDIENCE = "mnemos"
JWT_ALGORITHM = "HS256"
JWT_SECRET_NAME = "jwt-hs256"
MAX_TOKEN_TTL = 366 * 24 * 3600


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(kind: KeyKind) -> str:
    return KEY_PREFIXES[kind] + secrets.token_urlsafe(32)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "x"


def require_memory_plan(user: User, organization: Organization | None) -> None:
    """Memory access needs the person's plan, and their organization's if they have one."""
    if not user.memory_enabled or (organization is not None and not organization.memory_enabled):
        raise PlanRequired()


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


def create_organization(store: Store, name: str) -> Organization:
    org = Organization(id=uuid.uuid4(), name=_name(name, "name"))
    store.create_organization(org)
    return org


def create_user(store: Store, name: str, email: str, org_id: uuid.UUID | None) -> IssuedUser:
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
    store: Store, owner_id: uuid.UUID, name: str, description: str | None
) -> IssuedAgent:
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
    store.create_agent(agent)
    key = new_key("agent")
    store.add_api_key(hash_key(key), "agent", agent.id)
    return IssuedAgent(agent, key)


def jwt_secret(store: Store, configured: str = "") -> bytes:
    """The configured HS256 secret (at least 32 bytes, checked by Settings) or the database's."""
    return configured.encode() if configured else store.secret(JWT_SECRET_NAME)


def issue_token(store: Store, user_id: uuid.UUID, ttl_seconds: int, secret: str = "") -> str:
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
        "iat": now,
        "exp": now + timedelta(seconds=ttl_seconds),
    }
    return jwt.encode(claims, jwt_secret(store, secret), algorithm=JWT_ALGORITHM)


def user_id_from_token(store: Store, token: str, secret: str = "") -> uuid.UUID:
    """The person a Mnemos-issued JWT names; `unauthorized` for anything else."""
    try:
        claims = jwt.decode(
            token,
            jwt_secret(store, secret),
            algorithms=[JWT_ALGORITHM],
            audience=JWT_AUDIENCE,
            issuer=JWT_ISSUER,
            options={"require": ["exp", "sub", "iss", "aud"]},
        )
        return uuid.UUID(str(claims["sub"]))
    except (jwt.PyJWTError, ValueError):
        raise Unauthorized("Invalid or expired token") from None


def delete_owned_agent(store: Store, owner_id: uuid.UUID, agent_id: uuid.UUID | None) -> Agent:
    """Delete one of a person's agents (404 for anyone else's: existence is not leaked)."""
    agent = store.get_agent(agent_id) if agent_id else None
    if agent is None or agent.owner_id != owner_id:
        raise NotFound("Agent not found")
    store.delete_agent(agent.id)
    return agent
