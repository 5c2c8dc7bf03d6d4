"""Each response shape is a pydantic model, and its one writer produces exactly that shape.

Routes return the writers' dicts through orjson without validating them (for speed), while
OpenAPI documents the models; these tests keep the two the same, key for key and in order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, get_args, get_origin

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from mnemos.api import chats, schemas, superagent
from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import IssuedAgent
from mnemos.domain.ids import utcnow, uuid7
from mnemos.domain.models import (
    Agent,
    ChatRoom,
    Memory,
    MemoryType,
    Organization,
    Participant,
    ParticipantType,
    Role,
    RoomStatus,
    RoomType,
    Scope,
    Segment,
    Status,
    System,
    User,
    UserContext,
)

NOW = utcnow()
USER = User(uuid.uuid4(), "Ann Lee", "ann@x", "ann", uuid.uuid4(), True, NOW, NOW)
AGENT = Agent(uuid.uuid4(), "Bot", None, USER.id, "ann/bot", NOW, NOW)
MEMORY = Memory(
    uuid7(), "c", "t", System.LONG_TERM, MemoryType.SEMANTIC, Segment.USER, Scope.SUBJECT,
    USER.id, USER.organization_id, AGENT.id, uuid.uuid4(), {"k": 1}, Status.ACTIVE, NOW, NOW,
    USER.organization_id or USER.id,
)  # fmt: skip
ROOM = ChatRoom(
    uuid.uuid4(), None, RoomType.GROUP, RoomStatus.ACTIVE, ParticipantType.USER, USER.id, NOW, NOW
)
PARTICIPANT = Participant(ROOM.id, ParticipantType.AGENT, AGENT.id, Role.MEMBER, "Bot", "ann/bot")
CTX = UserContext(USER, Organization(USER.organization_id or uuid.uuid4(), "Org"))
OFFSET_META = {"page": 1, "page_size": 20, "total_count": 1, "total_pages": 1}

WRITERS: list[tuple[type[BaseModel], Callable[[], Any]]] = [
    (schemas.MemoryOut, lambda: schemas.memory_json(MEMORY)),
    (schemas.AgentMeOut, lambda: schemas.agent_json(AGENT, USER.organization_id)),
    (schemas.ProfileOut, lambda: schemas.profile_json(USER)),
    (schemas.MyAgentOut, lambda: schemas.my_agent_json(AGENT)),
    (schemas.MyAgentList, lambda: schemas.my_agent_list_json([AGENT])),
    (schemas.RegisteredEnvelopeData, lambda: schemas.registered_json(IssuedAgent(AGENT, "k"))),
    (schemas.AgentCredentials, lambda: schemas.credentials_json("k")),
    (schemas.TokensRevoked, lambda: schemas.tokens_revoked_json(NOW)),
    (schemas.DeletedAgent, lambda: schemas.deleted_agent_json(AGENT)),
    (chats.RoomOut, lambda: chats.room_json(ROOM)),
    (chats.RoomList, lambda: chats.room_list_json([ROOM], OFFSET_META)),
    (chats.ParticipantOut, lambda: chats.participant_json(PARTICIPANT)),
    (chats.ParticipantList, lambda: chats.participant_list_json([PARTICIPANT])),
    (superagent.SuperagentMemory, lambda: superagent.superagent_memory_json(CTX, MEMORY)),
]


# A page's meta carries only the keys of its pagination family: checked by the pagination tests.
PARTIAL = (schemas.PageMeta,)


def assert_shape(model: type[BaseModel], value: Any) -> None:
    """`value` has the model's fields, in its order, with nested models checked the same way."""
    assert isinstance(value, dict)
    assert list(value) == list(model.model_fields), model.__name__
    model.model_validate(value)
    for name, field in model.model_fields.items():
        inner, items = field.annotation, [value[name]]
        if get_origin(inner) is list:
            (inner,) = get_args(inner)
            items = value[name]
        if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in PARTIAL:
            for item in items:
                assert_shape(inner, item)


@pytest.mark.parametrize(("model", "write"), WRITERS, ids=[m.__name__ for m, _ in WRITERS])
def test_each_writer_produces_its_model(model: type[BaseModel], write: Callable[[], Any]) -> None:
    assert_shape(model, write())


# JSON answers without a response model: Tuya's envelope (documented in api/tuya.py) and the
# health check.
UNMODELLED = ("/v1.0/", "/healthz")


def test_every_json_route_declares_its_response_model() -> None:
    app = create_app(Settings(database_url="sqlite:///:memory:"), store=object())  # type: ignore[arg-type]
    routes = [route for route in app.routes if isinstance(route, APIRoute)]
    missing = [
        f"{sorted(route.methods)} {route.path}"
        for route in routes
        if route.status_code != 204
        and route.response_model is None
        and not route.path.startswith(UNMODELLED)
        and route.include_in_schema
    ]
    assert missing == []
