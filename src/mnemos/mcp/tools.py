"""The memory tools Mnemos serves over MCP: names, descriptions for a language model, argument
models, and the domain call behind each one.

Each tool calls the same domain service as its REST route (`api/band_agent.py` for an agent's
key, `api/band_human.py` for a person's key or token), and parses its arguments with the same
parsers (`api/params.py`): no visibility, plan or value rule is written here. Arguments are
pydantic models (or the domain's `MemoryDraft`, the REST store request's own schema), so a tool's
input schema is generated from the types the REST API validates with.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, JsonValue, PrivateAttr, TypeAdapter

from mnemos.api.deps import Services
from mnemos.api.params import list_filters, page_request
from mnemos.api.schemas import MemoryOut, UserMemoryOut, memory_json
from mnemos.domain.human import HumanListParams, HumanView
from mnemos.domain.memories import AgentListParams, MemoryDraft, ScopeFilter, Whose
from mnemos.domain.models import (
    VALID_TYPES,
    AgentContext,
    Memory,
    MemoryType,
    Segment,
    Status,
    System,
    UserContext,
)
from mnemos.domain.pagination import DEFAULT_LIMIT
from mnemos.domain.probes import Probe
from mnemos.domain.queries import Filters
from mnemos.domain.recall import MAX_LIMIT, SearchMode, check_floor, check_limit
from mnemos.errors import NotFound, Unauthorized

Caller = AgentContext | UserContext
Structured = dict[str, Any]


def _taxonomy() -> str:
    kinds = "; ".join(
        f"{system.value}: {', '.join(kind.value for kind in kinds)}"
        for system, kinds in VALID_TYPES.items()
    )
    return f"Valid `type` for each `system`: {kinds}."


TAXONOMY = f"""\
`system`: sensory (raw, fleeting impressions), working (what matters for the task at hand),
long_term (what should outlive this task). {_taxonomy()}
`type`: episodic (an event: what happened, when), semantic (a fact or preference),
procedural (how to do something, a rule to follow); iconic, echoic and haptic are seen,
heard and touched impressions (sensory only).
`segment`: user (about a person), agent (about yourself), tool (about a tool or system),
guideline (an instruction or policy to follow).
`scope`: agent (only you can read it), subject (every agent of your organization that asks
about `subject_id`, the person or thing it is about), organization (every agent of your
organization)."""

# What each argument means, for a language model; merged into every tool's input schema.
# tests/api/test_mcp_tools.py checks that every argument of every tool has a description here
# or in its model.
ARGUMENT_HELP: dict[str, str] = {
    "content": "The memory itself: one self-contained statement, written so that it makes sense "
    "when read later without this conversation.",
    "thought": "Why this is worth remembering (your reasoning); shown alongside the memory.",
    "system": "sensory, working or long_term (see the tool description).",
    "type": "Must be valid for the system: episodic, semantic or procedural for working and "
    "long_term; iconic, echoic or haptic for sensory.",
    "segment": "user, agent, tool or guideline: what the memory is about.",
    "scope": "Who may read it. Omit it: subject when subject_id is given, else agent.",
    "subject_id": "The id (UUID) of the person or thing a subject-scoped memory is about.",
    "chat_room_id": "The id (UUID) of the chat room the memory was made in (you must take part "
    "in it).",
    "metadata": "A small JSON object of your own (tags, sources); not searched.",
    "memory_scope": "Whose memories: me (the ones you stored, default) or org (your "
    "organization's shared ones).",
    "status": "active (default), superseded, archived, or all.",
    "content_query": "Keep only memories whose content contains these words (any order; "
    "'quoted phrase' for exact phrases). Order stays newest first: use search_memories to "
    "rank by relevance.",
    "query": "What you are looking for: a question or a few words in plain language. Memories "
    "are matched by meaning as well as by their words, so a memory need not share a word with "
    "the query ('quoted phrase' for an exact phrase).",
    "limit": "How many memories to return, 1-100 (default 20).",
    "cursor": "next_cursor from the previous answer, to get the next page.",
    "memory_id": "The id of a memory, as a list or search returned it.",
    "source_agent_id": "Only memories stored by this agent (a UUID).",
}

_STATUS_VALUES: list[JsonValue] = [*(status.value for status in Status), "all"]


class _Filters(BaseModel):
    """The narrowing filters every memory list shares (REST: `api/params.py` `list_query`)."""

    system: System | None = None
    type: MemoryType | None = None
    segment: Segment | None = None
    status: str | None = Field(default=None, json_schema_extra={"enum": _STATUS_VALUES})
    limit: int | None = None
    cursor: str | None = Field(default=None, max_length=512)
    # The query this call ranks by, embedded before the call ran by an embedder on another
    # machine (`Tool.embeds`), and the filters parsed then; never arguments (a private
    # attribute is not validated input).
    _probe: Probe | None = PrivateAttr(default=None)
    _filters: Filters | None = PrivateAttr(default=None)

    @property
    def probe(self) -> Probe | None:
        return self._probe

    def embedded(self, probe: Probe) -> None:
        self._probe = probe

    def searched_words(self) -> str | None:
        """The list's `content_query` (a search's words are its `query`, not a filter)."""
        return None

    def parsed(self, svc: Services) -> Filters:
        """The filters, parsed once: a call embedded first parses them before (`Tool.embeds`)
        and its run takes them from there."""
        if self._filters is None:
            self._filters = list_filters(
                svc,
                self.system.value if self.system else None,
                self.type.value if self.type else None,
                self.segment.value if self.segment else None,
                self.status,
                self.searched_words(),
            )
        return self._filters


class _AgentReach(_Filters):
    """Whose and which memories an agent reads (REST: `GET /api/v1/agent/memories`)."""

    memory_scope: Whose = "me"
    scope: ScopeFilter | None = Field(
        default=None,
        description="Which memories: agent, subject, organization, or all. With memory_scope "
        "me: your memories of that scope. With org: organization (default) for shared ones, "
        "subject (with subject_id) for what the organization knows about someone, all for both "
        "plus your own.",
    )
    subject_id: uuid.UUID | None = None

    def params(self) -> AgentListParams:
        return AgentListParams(self.memory_scope, self.scope, self.subject_id)


class AgentListArguments(_AgentReach):
    content_query: str | None = None

    def searched_words(self) -> str | None:
        return self.content_query


class SearchArguments(_AgentReach):
    query: str
    limit: int | None = Field(
        default=None, description=f"How many memories to return, 1-{MAX_LIMIT} (default 20)."
    )
    min_score: float | None = Field(
        default=None,
        description="Leave out memories less similar in meaning than this, 0-1 (omit it: "
        "the nearest are returned however far). A memory that shares the query's words is "
        "still returned.",
    )


class PersonListArguments(_Filters):
    """A person's view (REST: `GET /api/v1/me/memories`)."""

    scope: HumanView = Field(
        default="all",
        description="about_me (memories about you), organization (your organization's), room "
        "(made in chat rooms you are in), or all (these and your own agents' private ones).",
    )
    chat_room_id: uuid.UUID | None = None
    source_agent_id: uuid.UUID | None = None
    content_query: str | None = None

    def searched_words(self) -> str | None:
        return self.content_query

    def params(self) -> HumanListParams:
        return HumanListParams(self.scope, self.chat_room_id, self.source_agent_id)


class MemoryIdArguments(BaseModel):
    memory_id: str


# --- what a tool answers ------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A tool's result: the structured content and a short text for text-only clients."""

    structured: Structured
    text: str


def _line(memory: dict[str, Any]) -> str:
    kind = f"{memory['system']}/{memory['type']}, {memory['segment']}, scope {memory['scope']}"
    return f"[{memory['id']}] ({kind}, {memory['status']}) {memory['content']}"


def one(memory: dict[str, Any]) -> Answer:
    return Answer(memory, _line(memory))


def many(memories: list[dict[str, Any]], next_cursor: str | None) -> Answer:
    count = "1 memory" if len(memories) == 1 else f"{len(memories)} memories"
    lines = [count + (":" if memories else ".")]
    lines += [f"- {_line(memory)}" for memory in memories]
    if next_cursor is not None:
        lines.append(f"More: call again with cursor={next_cursor}")
    return Answer({"memories": memories, "next_cursor": next_cursor}, "\n".join(lines))


def _with_display(
    items: list[Memory], shown: dict[uuid.UUID, dict[str, Any]]
) -> list[dict[str, Any]]:
    """A person's rows carry display fields, as the human REST API's do."""
    return [{**memory_json(memory), **shown[memory.id]} for memory in items]


def _displayed(svc: Services, ctx: UserContext, memory: Memory) -> dict[str, Any]:
    return _with_display([memory], svc.human.display_fields(ctx, [memory]))[0]


# --- the tools ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: TypeAdapter[Any]
    run: Callable[[Services, Any, Any], Answer]
    output: type[BaseModel]  # one memory's shape; lists wrap it (`output_schema`)
    listing: bool = False
    read_only: bool = False
    destructive: bool = False
    embeds: Callable[[Services, Any, Any], str | None] | None = None
    """The text a call ranks by meaning, to embed before the call runs when the embedder is on
    another machine (`Recall.embedded_first`; None: the call needs no embedding first), after
    the checks the call would refuse it by (the caller's plan, the arguments), so a refused
    call costs no embedding. Takes the services, the caller and the parsed arguments."""

    @property
    def write(self) -> str | None:
        """What a successful call did to memories, as the metrics count it; None for a read."""
        if self.read_only:
            return None
        if self.destructive:
            return "deleted"
        return "stored" if self.name == "store_memory" else "changed"

    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = self.arguments.json_schema()
        for name, prop in schema.get("properties", {}).items():
            if "description" not in prop and name in ARGUMENT_HELP:
                prop["description"] = ARGUMENT_HELP[name]
        schema.pop("description", None)
        schema.pop("title", None)
        return schema

    def output_schema(self) -> dict[str, Any]:
        """The answer's JSON schema, written for cheap checking: clients (the official SDK's
        `ClientSession` among them) validate every result against it, and a `$ref` per listed
        memory or an `anyOf` per nullable field made that check cost more than the search
        (issue 14). The same constraints as the pydantic schema, in plain keywords (`lean`)."""
        item = lean(self.output.model_json_schema())
        if not self.listing:
            return item
        return {
            "type": "object",
            "properties": {
                "memories": {"type": "array", "items": item},
                "next_cursor": {"type": ["string", "null"]},
            },
            "required": ["memories", "next_cursor"],
        }


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every local `$ref` inlined, every `anyOf` of plain types written as a list
    of types, and no titles: the same instances valid, less work per check. Definitions that
    refer to themselves stay as they are (never the case for the answer models)."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def walk(node: Any, inside: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(item, inside) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            name = ref.removeprefix("#/$defs/")
            if name in defs and name not in inside:
                return walk(defs[name], (*inside, name))
        out = {
            key: walk(value, inside)
            for key, value in node.items()
            if key != "$defs" and not (key == "title" and isinstance(value, str))
        }
        branches = out.get("anyOf")
        if isinstance(branches, list) and branches and all(map(_plain_type, branches)):
            del out["anyOf"]
            kinds = [branch["type"] for branch in branches]
            out["type"] = kinds if len(kinds) > 1 else kinds[0]
        return out

    leaned: dict[str, Any] = walk(schema, ())
    if '"$ref"' in json.dumps(leaned):
        leaned["$defs"] = defs  # self-referring definitions: keep them where the refs point
    return leaned


def _plain_type(branch: Any) -> bool:
    return isinstance(branch, dict) and set(branch) == {"type"} and isinstance(branch["type"], str)


SEARCH_MODE = SearchMode.HYBRID
"""How `search_memories` ranks: the best search Mnemos has (`best_search`)."""


def best_search(
    svc: Services,
    ctx: AgentContext,
    params: AgentListParams,
    filters: Filters,
    query: str,
    limit: int,
    cursor: str | None,
    probe: Probe | None = None,
    min_score: float | None = None,
) -> tuple[list[Memory], str | None]:
    """THE one place that picks how `search_memories` ranks: the best search Mnemos has. The
    best `limit` memories for `query` among the agent list of `params` and `filters`, and the
    cursor of the next page (None: no more).

    Hybrid recall (`GET /api/v1/agent/memories/search`'s default: keyword and meaning fused,
    docs/search.md), which is full text alone when the server has no embedder
    (`MNEMOS_EMBEDDER=none`); its cursor continues only this same search. `probe`: the query
    embedded first, if it was (`Tool.embeds`); `min_score`: the similarity floor.
    """
    found = svc.memories.recall_as_agent(
        ctx, params, filters, query, SEARCH_MODE, limit, cursor, probe, min_score=min_score
    )
    return [ranked.memory for ranked in found.items], found.meta["next_cursor"]


def _search_text(svc: Services, ctx: AgentContext, args: SearchArguments) -> str | None:
    """As the REST search (`api/params.py` `ranked`): checked, then its query."""
    if not svc.memories.recall.embeds_elsewhere(SEARCH_MODE, args.cursor):
        return None
    svc.memories.checked_query(ctx, args.params(), args.parsed(svc))
    check_limit(_search_limit(args))
    check_floor(args.min_score, SEARCH_MODE)
    return args.query


def _agent_list_text(svc: Services, ctx: AgentContext, args: AgentListArguments) -> str | None:
    """As the REST list (`api/params.py` `ranked`): a list ranked by relevance, checked."""
    page = page_request(svc, args.cursor, args.limit, None, None)
    text = svc.memories.ranked_list_text(args.parsed(svc), page)
    if text is not None:
        svc.memories.checked_query(ctx, args.params(), args.parsed(svc))
    return text


def _person_list_text(svc: Services, ctx: UserContext, args: PersonListArguments) -> str | None:
    """As the REST list (`api/params.py` `ranked`): a list ranked by relevance, checked."""
    page = page_request(svc, args.cursor, args.limit, None, None)
    text = svc.memories.ranked_list_text(args.parsed(svc), page)
    if text is not None:
        svc.human.check(ctx, args.params(), args.parsed(svc))
    return text


def _search_limit(args: SearchArguments) -> int:
    return DEFAULT_LIMIT if args.limit is None else args.limit  # `Recall.search` checks it


def _store(svc: Services, ctx: AgentContext, draft: MemoryDraft) -> Answer:
    return one(memory_json(svc.memories.store_as_agent(ctx, draft)))


def _search(svc: Services, ctx: AgentContext, args: SearchArguments) -> Answer:
    found, next_cursor = best_search(
        svc,
        ctx,
        args.params(),
        args.parsed(svc),
        args.query,
        _search_limit(args),
        args.cursor,
        args.probe,
        args.min_score,
    )
    return many([memory_json(memory) for memory in found], next_cursor)


def _agent_list(svc: Services, ctx: AgentContext, args: AgentListArguments) -> Answer:
    page = page_request(svc, args.cursor, args.limit, None, None)
    result = svc.memories.list_as_agent(ctx, args.params(), args.parsed(svc), page, args.probe)
    return many([memory_json(memory) for memory in result.items], result.meta.get("next_cursor"))


def _agent_get(svc: Services, ctx: AgentContext, args: MemoryIdArguments) -> Answer:
    return one(memory_json(svc.memories.get_as_agent(ctx, args.memory_id)))


def _agent_status(status: Status) -> Callable[[Services, AgentContext, MemoryIdArguments], Answer]:
    def change(svc: Services, ctx: AgentContext, args: MemoryIdArguments) -> Answer:
        return one(memory_json(svc.memories.set_status_as_agent(ctx, args.memory_id, status)))

    return change


def _person_list(svc: Services, ctx: UserContext, args: PersonListArguments) -> Answer:
    page = page_request(svc, args.cursor, args.limit, None, None)
    filters = args.parsed(svc)
    result, shown = svc.human.page_with_display(ctx, args.params(), filters, page, args.probe)
    return many(_with_display(result.items, shown), result.meta.get("next_cursor"))


def _person_get(svc: Services, ctx: UserContext, args: MemoryIdArguments) -> Answer:
    return one(_displayed(svc, ctx, svc.human.get(ctx, args.memory_id)))


def _person_status(status: Status) -> Callable[[Services, UserContext, MemoryIdArguments], Answer]:
    def change(svc: Services, ctx: UserContext, args: MemoryIdArguments) -> Answer:
        return one(_displayed(svc, ctx, svc.human.set_status(ctx, args.memory_id, status)))

    return change


def _person_delete(svc: Services, ctx: UserContext, args: MemoryIdArguments) -> Answer:
    deleted = str(svc.human.delete(ctx, args.memory_id))  # the memory's id, as every tool's
    return Answer({"id": deleted, "deleted": True}, f"Deleted memory {deleted}.")


class Deleted(BaseModel):
    id: str
    deleted: bool


_ID = TypeAdapter(MemoryIdArguments)
_READ_ONE = "Only memories you may read are found: anything else is not_found."

AGENT_TOOLS: tuple[Tool, ...] = (
    Tool(
        "store_memory",
        "Remember something for later: a fact, a preference, an instruction, how to do a task, "
        "or what happened. Store one self-contained statement per call; you can find it again "
        "with search_memories in any later conversation.\n\n" + TAXONOMY + "\n\nErrors start "
        "with a code: invalid_memory_type (type not valid for system), subject_id_required "
        "(scope subject needs subject_id), subject_id_requires_subject_scope, "
        "org_scope_requires_organization, validation_failed (details name the field).",
        TypeAdapter(MemoryDraft),
        _store,
        MemoryOut,
    ),
    Tool(
        "search_memories",
        "Find memories relevant to a question, best match first. Use it before answering "
        "anything that may depend on what you or your organization learned earlier (people's "
        "preferences, guidelines, past events). Searches your memories by default; "
        "memory_scope org searches your organization's shared ones. Filters narrow the "
        "search; next_cursor continues it.",
        TypeAdapter(SearchArguments),
        _search,
        MemoryOut,
        listing=True,
        read_only=True,
        embeds=_search_text,
    ),
    Tool(
        "list_memories",
        "List memories newest first, narrowed by filters (no ranking: to find memories about "
        "something, use search_memories). memory_scope me (default) lists what you stored; "
        "org lists your organization's shared memories. Another agent's private memories are "
        "never listed. Only active memories unless status says otherwise.",
        TypeAdapter(AgentListArguments),
        _agent_list,
        MemoryOut,
        listing=True,
        read_only=True,
        embeds=_agent_list_text,
    ),
    Tool(
        "get_memory",
        "Read one memory by its id. " + _READ_ONE,
        _ID,
        _agent_get,
        MemoryOut,
        read_only=True,
    ),
    Tool(
        "supersede_memory",
        "Mark a memory you stored as outdated or wrong (it stays, with status superseded, and "
        "lists skip it). Store the corrected memory with store_memory. Only the agent that "
        "stored a memory may change it: forbidden otherwise.",
        _ID,
        _agent_status(Status.SUPERSEDED),
        MemoryOut,
    ),
    Tool(
        "archive_memory",
        "Mark a memory you stored as still valid but not needed now (status archived; lists "
        "skip it unless status is archived or all). Only the agent that stored it may: "
        "forbidden otherwise.",
        _ID,
        _agent_status(Status.ARCHIVED),
        MemoryOut,
    ),
)

PERSON_TOOLS: tuple[Tool, ...] = (
    Tool(
        "list_memories",
        "List the memories agents keep that concern you, newest first: memories about you "
        "(about_me), your organization's shared memories (organization), memories made in "
        "chat rooms you are in (room), and your own agents' private memories; scope all "
        "(default) is every one of them. Only active memories unless status says otherwise.",
        TypeAdapter(PersonListArguments),
        _person_list,
        UserMemoryOut,
        listing=True,
        read_only=True,
        embeds=_person_list_text,
    ),
    Tool(
        "get_memory",
        "Read one memory by its id: not_found if there is no such memory, forbidden if it is "
        "not one you may see.",
        _ID,
        _person_get,
        UserMemoryOut,
        read_only=True,
    ),
    Tool(
        "supersede_memory",
        "Mark a memory about you, or one of your agents' private memories, as outdated or "
        "wrong (status superseded). Other memories: forbidden.",
        _ID,
        _person_status(Status.SUPERSEDED),
        UserMemoryOut,
    ),
    Tool(
        "archive_memory",
        "Hide a memory about you, or one of your agents' private memories, keeping it (status "
        "archived; restore_memory brings it back). Other memories: forbidden.",
        _ID,
        _person_status(Status.ARCHIVED),
        UserMemoryOut,
    ),
    Tool(
        "restore_memory",
        "Bring an archived memory back (status active). memory_not_archived if it is not "
        "archived; forbidden for memories that are neither about you nor your agents' private "
        "ones.",
        _ID,
        _person_status(Status.ACTIVE),
        UserMemoryOut,
    ),
    Tool(
        "delete_memory",
        "Delete for good a memory about you, or one of your agents' private memories. This "
        "cannot be undone: prefer archive_memory to only hide it. Other memories: forbidden.",
        _ID,
        _person_delete,
        Deleted,
        destructive=True,
    ),
)


def tools_for(caller: Caller) -> tuple[Tool, ...]:
    """The tools a caller has: an agent's key gets the agent tools, a person's the person's."""
    return AGENT_TOOLS if isinstance(caller, AgentContext) else PERSON_TOOLS


def find_tool(caller: Caller, name: str) -> Tool:
    for tool in tools_for(caller):
        if tool.name == name:
            return tool
    available = ", ".join(tool.name for tool in tools_for(caller))
    if any(tool.name == name for tool in (*AGENT_TOOLS, *PERSON_TOOLS)):
        # As on REST, where the other kind of credential is 401 on these routes.
        kind = "an agent's" if isinstance(caller, AgentContext) else "a person's"
        raise Unauthorized(f"{name} cannot be used with {kind} credential; yours: {available}")
    raise NotFound(f"No tool named {name!r}; available: {available}")
