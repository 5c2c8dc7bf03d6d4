"""The memories page: the person's view exactly as the Band human API defines it (the same
domain calls as `api/band_human.py`), with filters, cursor paging, Search, and the changes the
person may make. Nothing here decides who sees or changes what: `HumanMemoryService` does.
"""

from __future__ import annotations

import typing
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, Depends, Query, Request, Response

from mnemos.api.deps import Services, services
from mnemos.api.params import list_filters, page_request, remote_embed_threads
from mnemos.api.ui.web import (
    Posted,
    SignedIn,
    UiRoute,
    page,
    posted,
    redirect,
    safe_back,
    signed_in,
    with_notice,
)
from mnemos.domain.human import HumanListParams, HumanView
from mnemos.domain.ids import parse_uuid
from mnemos.domain.models import Memory, MemoryType, Segment, Status, System
from mnemos.domain.people import actor_of
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters
from mnemos.domain.recall import SearchMode
from mnemos.errors import invalid_field

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)

PAGE_SIZE = 20
VIEWS: dict[str, str] = {
    "all": "Everything I can see",
    "about_me": "About me",
    "organization": "My organization",
    "room": "My rooms",
}
assert set(VIEWS) == set(typing.get_args(HumanView))
CHOICES = {
    "status": [s.value for s in Status] + ["all"],
    "system": [s.value for s in System],
    "type": [t.value for t in MemoryType],
    "segment": [s.value for s in Segment],
}
# status change name -> (the status it sets, the notice shown after it)
CHANGES = {
    "archive": (Status.ARCHIVED, "archived"),
    "restore": (Status.ACTIVE, "restored"),
    "supersede": (Status.SUPERSEDED, "superseded"),
}
NOTICES = {
    "archived": "Memory archived.",
    "restored": "Memory restored.",
    "superseded": "Memory marked superseded.",
    "deleted": "Memory deleted.",
}


@dataclass(frozen=True)
class Listed:
    """One page of the list: memories, their display fields, which the person may change."""

    items: list[Memory]
    shown: dict[uuid.UUID, dict[str, Any]]
    changeable: set[uuid.UUID]
    next_cursor: str | None


def _blank(value: str | None) -> str | None:
    return value or None


def _view(value: str | None) -> HumanView:
    if value is None:
        return "all"
    if value not in VIEWS:
        raise invalid_field("scope", f"must be one of {', '.join(VIEWS)}")
    return typing.cast(HumanView, value)


def list_page(
    svc: Services, who: SignedIn, params: HumanListParams, filters: Filters, cursor: str | None
) -> Listed:
    """The Band human list (`GET /api/v1/me/memories`) of these parameters, newest first."""
    request = page_request(svc, cursor, PAGE_SIZE, None, None)
    result, shown = svc.human.page_with_display(who.ctx, params, filters, request)
    changeable = svc.human.may_change(who.ctx, result.items)
    return Listed(result.items, shown, changeable, result.meta.get("next_cursor"))


def search_page(
    svc: Services,
    who: SignedIn,
    params: HumanListParams,
    filters: Filters,
    text: str,
    cursor: str | None,
    probe: Probe | None = None,
) -> Listed:
    """The page's Search: the same list, best match for `text` first, by the best search Mnemos
    has (`GET /api/v1/me/memories/search`'s hybrid recall: keyword and meaning fused, keyword
    alone without an embedder); its cursor continues only this same search."""
    found, shown = svc.human.recall(
        who.ctx, params, filters, text, SearchMode.HYBRID, PAGE_SIZE, cursor, probe
    )
    items = [ranked.memory for ranked in found.items]
    changeable = svc.human.may_change(who.ctx, items)
    return Listed(items, shown, changeable, found.meta["next_cursor"])


def _agent_choices(
    svc: Services, who: SignedIn, listed: Listed, chosen: str | None
) -> dict[str, str]:
    """The person's agents, then any other agent named on this page (and the chosen one, so
    the filter in force stays visible even when nothing matches it)."""
    choices = {str(agent.id): agent.name for agent in svc.store.agents_of(who.ctx.user.id)}
    for memory in listed.items:
        name = listed.shown[memory.id].get("source_agent_name")
        if memory.source_agent_id and name:
            choices.setdefault(str(memory.source_agent_id), name)
    if chosen:
        choices.setdefault(chosen, "the chosen agent")
    return choices


def _room_choices(svc: Services, who: SignedIn, chosen: str | None) -> dict[str, str]:
    """The rooms the person takes part in (and the chosen one)."""
    rooms, _ = svc.rooms.page(actor_of(who.ctx), 1, 50)
    choices = {str(room.id): room.title or "Untitled room" for room in rooms}
    if chosen:
        choices.setdefault(chosen, "the chosen room")
    return choices


@dataclass(frozen=True)
class Chosen:
    """The page's query parameters: as chosen (for the form and the links), and parsed."""

    values: dict[str, str | None]
    params: HumanListParams
    filters: Filters
    cursor: str | None


async def chosen_view(
    scope: str | None = Query(None),
    system: str | None = Query(None),
    type: str | None = Query(None),
    segment: str | None = Query(None),
    status: str | None = Query(None),
    agent: str | None = Query(None),
    room: str | None = Query(None),
    q: str | None = Query(None),
    cursor: str | None = Query(None),
    who: SignedIn = Depends(signed_in),  # noqa: ARG001 - a signed-in person's, parsed after
    svc: Services = Depends(services),
) -> Chosen:
    """The page's filters and Search, parsed (only for a signed-in person)."""
    values = {
        "scope": _blank(scope),
        "system": _blank(system),
        "type": _blank(type),
        "segment": _blank(segment),
        "status": _blank(status),
        "agent": _blank(agent),
        "room": _blank(room),
        "q": q.strip() if q and q.strip() else None,
    }
    params = HumanListParams(
        scope=_view(values["scope"]),
        chat_room_id=parse_uuid(values["room"], "room") if values["room"] else None,
        source_agent_id=parse_uuid(values["agent"], "agent") if values["agent"] else None,
    )
    filters = list_filters(
        svc, values["system"], values["type"], values["segment"], values["status"], None
    )
    return Chosen(values, params, filters, _blank(cursor))


async def searched_first(
    chosen: Chosen = Depends(chosen_view),
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
    threads: CapacityLimiter = Depends(remote_embed_threads),
) -> Probe | None:
    """The Search's words embedded before the page is built, by an embeddings endpoint (as
    `api/params.py` `ranked`: after the person's checks, and the wait holds no request
    thread); else None."""
    text = chosen.values["q"]
    recall = svc.memories.recall
    if not text or len(text) > recall.max_query_chars:  # the search refuses it as before
        return None
    if not recall.embeds_elsewhere(SearchMode.HYBRID, chosen.cursor):
        return None
    svc.human.check(who.ctx, chosen.params, chosen.filters)
    return await to_thread.run_sync(recall.embedded_first, text, limiter=threads)


@router.get("/")
def memories(
    request: Request,
    done: str | None = Query(None),
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
    chosen: Chosen = Depends(chosen_view),
    probe: Probe | None = Depends(searched_first),
) -> Response:
    text, cursor = chosen.values["q"], chosen.cursor
    if text:
        listed = search_page(svc, who, chosen.params, chosen.filters, text, cursor, probe)
    else:
        listed = list_page(svc, who, chosen.params, chosen.filters, cursor)
    kept = {name: value for name, value in chosen.values.items() if value}
    here = request.url.path + ("?" + request.url.query if request.url.query else "")
    return page(
        "memories.html",
        who=who,
        active="memories",
        listed=listed,
        chosen=chosen.values,
        views=VIEWS,
        choices=CHOICES,
        agents=_agent_choices(svc, who, listed, chosen.values["agent"]),
        rooms=_room_choices(svc, who, chosen.values["room"]),
        filtered=bool(kept),
        next_url=(
            "/ui/?" + urllib.parse.urlencode({**kept, "cursor": listed.next_cursor})
            if listed.next_cursor
            else None
        ),
        first_url=("/ui/?" + urllib.parse.urlencode(kept)) if cursor else None,
        here=here,
        notice=NOTICES.get(done or ""),
    )


def _change_route(action: str) -> None:
    new_status, notice = CHANGES[action]

    def change(
        id: str, form: Posted = Depends(posted), svc: Services = Depends(services)
    ) -> Response:
        svc.human.set_status(form.who.ctx, id, new_status)
        return redirect(with_notice(form.back, notice))

    router.post(f"/memories/{{id}}/{action}", name=f"ui_{action}")(change)


for _action in CHANGES:
    _change_route(_action)


@router.get("/memories/{id}/delete")
def confirm_delete(
    id: str,
    back: str | None = Query(None),
    who: SignedIn = Depends(signed_in),
    svc: Services = Depends(services),
) -> Response:
    """Asks before deleting a memory the person may delete (else 404/403, as the delete)."""
    memory = svc.human.changeable(who.ctx, id)
    return page(
        "confirm.html",
        who=who,
        title="Delete this memory?",
        question="Delete this memory for good? It cannot be brought back.",
        quoted=memory.content,
        action=f"/ui/memories/{memory.id}/delete",
        confirm="Delete for good",
        back=safe_back(back),
    )


@router.post("/memories/{id}/delete")
def delete(id: str, form: Posted = Depends(posted), svc: Services = Depends(services)) -> Response:
    svc.human.delete(form.who.ctx, id)
    return redirect(with_notice(form.back, "deleted"))
