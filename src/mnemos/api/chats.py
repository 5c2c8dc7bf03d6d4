"""Rooms, in Band's shapes, for agents (`/api/v1/agent/chats`) and people (`/api/v1/me/chats`).

Only the subset that memory visibility needs: create, list, get, and manage participants.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from mnemos.api.deps import Services, agent_caller, services, user_caller
from mnemos.api.responses import JSONResponse, data, errors
from mnemos.api.routing import MnemosRoute
from mnemos.api.schemas import PageMeta
from mnemos.domain.ids import iso
from mnemos.domain.models import AgentContext, ChatRoom, Participant, Role, RoomType, UserContext
from mnemos.domain.pagination import OffsetPage, offset_meta
from mnemos.domain.people import Actor, actor_of


class ChatCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str | None = Field(default=None, max_length=300)
    task_id: str | None = None
    type: RoomType = RoomType.GROUP


class ChatCreateRequest(BaseModel):
    chat: ChatCreate


class ParticipantIn(BaseModel):
    participant_id: str = Field(max_length=64)
    role: Role | None = None


class ParticipantRequest(BaseModel):
    participant: ParticipantIn


# --- response shapes: each declared once, written by one function ----------------------------


class RoomOut(BaseModel):
    id: str
    title: str | None
    type: str
    status: str
    task_id: str | None
    inserted_at: str
    updated_at: str


class RoomEnvelope(BaseModel):
    data: RoomOut


class RoomList(BaseModel):
    data: list[RoomOut]
    meta: PageMeta
    metadata: PageMeta


class ParticipantOut(BaseModel):
    id: str
    type: str
    role: str
    name: str
    handle: str
    description: str | None
    status: str
    online: bool


class ParticipantEnvelope(BaseModel):
    data: ParticipantOut


class ParticipantListMeta(BaseModel):
    has_more: bool
    total_count: int


class ParticipantList(BaseModel):
    data: list[ParticipantOut]
    metadata: ParticipantListMeta


def room_json(room: ChatRoom) -> dict[str, Any]:
    """The one writer of `RoomOut`."""
    return {
        "id": str(room.id),
        "title": room.title,
        "type": room.type.value,
        "status": room.status.value,
        "task_id": None,
        "inserted_at": iso(room.inserted_at),
        "updated_at": iso(room.updated_at),
    }


def room_list_json(rooms: list[ChatRoom], meta: dict[str, Any]) -> dict[str, Any]:
    """`RoomList`: one page of rooms, its pagination as `meta` and `metadata`."""
    return {"data": [room_json(r) for r in rooms], "meta": meta, "metadata": meta}


def participant_json(p: Participant) -> dict[str, Any]:
    """The one writer of `ParticipantOut`."""
    return {
        "id": str(p.id),
        "type": p.type.value,
        "role": p.role.value,
        "name": p.name,
        "handle": p.handle,
        "description": p.description,
        "status": "active",
        "online": False,
    }


def participant_list_json(found: list[Participant]) -> dict[str, Any]:
    """`ParticipantList`: every participant of a room."""
    meta = {"has_more": False, "total_count": len(found)}
    return {"data": [participant_json(p) for p in found], "metadata": meta}


async def _as_agent(request: Request, ctx: AgentContext = Depends(agent_caller)) -> None:
    request.state.actor = actor_of(ctx)


async def _as_person(request: Request, ctx: UserContext = Depends(user_caller)) -> None:
    request.state.actor = actor_of(ctx)


def actor(request: Request) -> Actor:
    """The agent or person calling, as the route's router authenticated them."""
    found: Actor = request.state.actor
    return found


# Each endpoint serves both kinds of caller: one function, one decorator per router (each with
# its full path). The router's dependency authenticates its kind of caller and sets `actor`.
agent_router = APIRouter(
    tags=["Agent API: rooms"], route_class=MnemosRoute, dependencies=[Depends(_as_agent)]
)
human_router = APIRouter(
    tags=["Human API: rooms"], route_class=MnemosRoute, dependencies=[Depends(_as_person)]
)
CREATE: dict[str, Any] = {
    "status_code": 201,
    "response_model": RoomEnvelope,
    "responses": errors(401, 422),
    "summary": "Create a chat room",
}
LIST: dict[str, Any] = {
    "response_model": RoomList,
    "responses": errors(401, 422),
    "summary": "List chat rooms",
}
GET: dict[str, Any] = {
    "response_model": RoomEnvelope,
    "responses": errors(401, 404),
    "summary": "Get a chat room",
}
PARTICIPANTS: dict[str, Any] = {
    "response_model": ParticipantList,
    "responses": errors(401, 404),
    "summary": "List participants",
}
ADD: dict[str, Any] = {
    "status_code": 201,
    "response_model": ParticipantEnvelope,
    "responses": errors(401, 403, 404, 409, 422),
    "summary": "Add a participant",
}
REMOVE: dict[str, Any] = {
    "response_model": ParticipantEnvelope,
    "responses": errors(401, 403, 404),
    "summary": "Remove a participant",
}


@agent_router.post("/api/v1/agent/chats", **CREATE)
@human_router.post("/api/v1/me/chats", **CREATE)
def create(
    body: ChatCreateRequest, me: Actor = Depends(actor), svc: Services = Depends(services)
) -> JSONResponse:
    """Creates a room with the caller as its owner."""
    return data(room_json(svc.rooms.create(me, body.chat.title, body.chat.type)), status=201)


@agent_router.get("/api/v1/agent/chats", **LIST)
@human_router.get("/api/v1/me/chats", **LIST)
def list_rooms(
    page: int = Query(1, ge=1, le=1_000_000),
    page_size: int = Query(20, ge=1, le=100),
    me: Actor = Depends(actor),
    svc: Services = Depends(services),
) -> JSONResponse:
    """The rooms the caller takes part in, newest first."""
    rooms, total = svc.rooms.page(me, page, page_size)
    return JSONResponse(room_list_json(rooms, offset_meta(OffsetPage(page, page_size), total)))


@agent_router.get("/api/v1/agent/chats/{id}", **GET)
@human_router.get("/api/v1/me/chats/{id}", **GET)
def get(id: str, me: Actor = Depends(actor), svc: Services = Depends(services)) -> JSONResponse:
    """A room the caller takes part in."""
    return data(room_json(svc.rooms.get(me, id)))


@agent_router.get("/api/v1/agent/chats/{chat_id}/participants", **PARTICIPANTS)
@human_router.get("/api/v1/me/chats/{chat_id}/participants", **PARTICIPANTS)
def participants(
    chat_id: str, me: Actor = Depends(actor), svc: Services = Depends(services)
) -> JSONResponse:
    """Who takes part in a room."""
    return JSONResponse(participant_list_json(svc.rooms.participants(me, chat_id)))


@agent_router.post("/api/v1/agent/chats/{chat_id}/participants", **ADD)
@human_router.post("/api/v1/me/chats/{chat_id}/participants", **ADD)
def add(
    chat_id: str,
    body: ParticipantRequest,
    me: Actor = Depends(actor),
    svc: Services = Depends(services),
) -> JSONResponse:
    """Adds a person or agent the caller can see; the owner and admins may."""
    added = svc.rooms.add(me, chat_id, body.participant.participant_id, body.participant.role)
    return data(participant_json(added), status=201)


@agent_router.delete("/api/v1/agent/chats/{chat_id}/participants/{id}", **REMOVE)
@human_router.delete("/api/v1/me/chats/{chat_id}/participants/{id}", **REMOVE)
def remove(
    chat_id: str, id: str, me: Actor = Depends(actor), svc: Services = Depends(services)
) -> JSONResponse:
    """Removes a participant (the owner and admins may remove others; anyone may leave)."""
    return data(participant_json(svc.rooms.remove(me, chat_id, id)))
