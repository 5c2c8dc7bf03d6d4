"""The ports: what the domain needs from storage, one narrow interface per kind of state.

The domain declares them and never imports `mnemos.storage`; storage implements them all
(`mnemos.storage.base.Store` is their union). Each domain service asks only for the ports it
uses. Implementations translate calls to SQL and back to domain objects; they decide nothing
about who may see what (the `MemoryQuery` they get already says it).

The methods are abstract, so a backend that misses one cannot be built.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from mnemos.domain.models import (
    Agent,
    AgentContext,
    Batch,
    Change,
    ChangedBy,
    ChatRoom,
    EncodedBatch,
    Erasure,
    Memory,
    Organization,
    Participant,
    ParticipantType,
    RetentionPolicy,
    Role,
    Status,
    System,
    User,
    UserContext,
)
from mnemos.domain.pagination import Position
from mnemos.domain.queries import MemoryQuery
from mnemos.domain.search import Scored
from mnemos.domain.tenants import Tenants

KeyKind = Literal["agent", "user"]
"""Who an API key authenticates."""

AgentMemoryPosition = tuple[datetime, uuid.UUID]
"""Where a batched walk over one agent's memories stopped: the last one's `(inserted_at, id)`."""


class Secrets(Protocol):
    """Secrets shared by every process on one database (cursor and token signing)."""

    @abc.abstractmethod
    def secret(self, name: str) -> bytes:
        """A random secret shared by every process on this database, created on first use.

        >>> store.secret("cursor") == store.secret("cursor")
        True
        """


class EndedSessions(Protocol):
    """Sessions of the web page ended before they expire (Sign out), shared by every process."""

    @abc.abstractmethod
    def end_session(self, session_id: str, expires_at: datetime) -> None:
        """Remember that session `session_id` has ended, until it would have expired anyway."""

    @abc.abstractmethod
    def session_ended(self, session_id: str) -> bool:
        """True once `end_session` was called for it (read where the write went: never stale)."""


class SearchPages(Protocol):
    """The ordered answers of searches being paged (`domain/recall.py`), shared by every
    process, kept until they expire."""

    @abc.abstractmethod
    def keep_search(
        self,
        search_id: str,
        ranked: Sequence[tuple[uuid.UUID, float]],
        expires_at: datetime,
        owner: str,
        most: int,
    ) -> None:
        """Keep `ranked` (memory ids and scores, in order) as `search_id` until `expires_at`,
        for `owner`, whose answers beyond its newest `most` (this one included) go. A kept
        answer is a cache: one the store cannot write is as one lost in a crash (its cursor
        says "expired"), and the search it belongs to is still answered."""

    @abc.abstractmethod
    def kept_search(self, search_id: str) -> list[tuple[uuid.UUID, float]] | None:
        """What `keep_search` kept, in its order; None once it expired (or never was, or
        cannot be read)."""


class MemoryStore(Protocol):
    """Memories: insert, read, list, change and delete them.

    Each call names the tenants it touches (`domain/tenants.py`): a memory's own `tenant_id`
    when it inserts one, a `tenant_id` or `Tenants` otherwise, or the audiences' tenants.

    Every method that changes memories appends their history rows (`domain/history.py`) in the
    same transaction, with `by` as the actor (None: the server itself, e.g. a bulk loader).
    """

    @abc.abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """Within it, this thread's reads share one connection and see one state of the data
        (writes go their own way). A page and its display fields read together this way."""

    @abc.abstractmethod
    def insert_memory(self, memory: Memory, *, by: ChangedBy | None = None) -> None:
        """Insert a memory; `unauthorized`, and nothing inserted, if its source agent is gone
        (deleted since the agent's request was authenticated)."""

    @abc.abstractmethod
    def insert_memory_once(
        self,
        memory: Memory,
        principal_id: uuid.UUID,
        key: str,
        fingerprint: str,
        ttl: timedelta,
        *,
        by: ChangedBy | None = None,
    ) -> tuple[uuid.UUID, str]:
        """Insert `memory` unless `(principal_id, key)` was used within `ttl`.

        Returns the memory id and request fingerprint stored under the key: `memory.id` when this
        call inserted it, the first call's otherwise. Concurrent calls with one key insert once.
        `unauthorized`, and nothing kept, if the agent is gone (as `insert_memory`).
        """

    @abc.abstractmethod
    def forget_idempotency_keys(self, before: datetime, batch: int) -> int:
        """In one transaction, delete up to `batch` idempotency keys stored before `before`
        (every tenant's: a key past its time answers nothing); how many."""

    @abc.abstractmethod
    def get_memory(self, memory_id: uuid.UUID, tenants: Tenants) -> Memory | None:
        """The memory with this id in one of `tenants`, or None."""

    @abc.abstractmethod
    def memory_exists(self, memory_id: uuid.UUID) -> bool:
        """Whether a memory with this id exists in any tenant: a query of every shard, only for
        a person's 403 on a memory they may not see (docs/design.md, "GET one")."""

    @abc.abstractmethod
    def set_memory_status(
        self,
        tenant_id: uuid.UUID,
        memory_id: uuid.UUID,
        status: Status,
        now: datetime,
        *,
        by: ChangedBy | None = None,
        only_from: Status | None = None,
    ) -> Memory | None:
        """Change a memory's status and `updated_at` (with `only_from`: only while it has that
        status, decided in the same statement); the memory as it is then, or None if gone."""

    @abc.abstractmethod
    def list_memories(
        self,
        query: MemoryQuery,
        *,
        limit: int,
        after: Position | None = None,
        offset: int = 0,
    ) -> Sequence[Memory]:
        """Up to `limit` memories matching `query`, newest first by `(inserted_at, id)`.

        `after` continues strictly after a row (keyset); `offset` skips rows (offset family).
        """

    @abc.abstractmethod
    def rank_memories(
        self, query: MemoryQuery, *, limit: int, pool: int | None = None
    ) -> Sequence[Scored]:
        """The full-text `Ranker`: the ids of up to `limit` memories matching `query` (which
        must have a search and `Order.RELEVANCE`), best first by `(score, id)`, with their
        scores, within the search budget. With `pool`, the store may score only the newest
        `pool` matches of each audience (a bound on the work a common word costs), but answers
        `limit` whenever that many match.

        >>> [r.score for r in store.rank_memories(query, limit=3)]
        [4.2, 1.7, 1.7]
        """

    @abc.abstractmethod
    def count_memories(self, query: MemoryQuery) -> int: ...

    @abc.abstractmethod
    def delete_memory(
        self, tenant_id: uuid.UUID, memory_id: uuid.UUID, *, by: ChangedBy | None = None
    ) -> bool:
        """Delete a memory for good; False if it was not there."""

    @abc.abstractmethod
    def delete_memories(
        self, tenant_id: uuid.UUID, memory_ids: list[uuid.UUID], *, by: ChangedBy | None = None
    ) -> int:
        """Delete memories for good; how many were there."""

    @abc.abstractmethod
    def replace_memories(
        self,
        tenant_id: uuid.UUID,
        new: list[Memory],
        superseded: list[uuid.UUID],
        now: datetime,
        *,
        by: ChangedBy | None = None,
    ) -> None:
        """In one transaction: mark `superseded` (memories of `tenant_id`, if still active)
        superseded, insert `new` (each in its own tenant)."""


class RightsStore(Protocol):
    """What people's rights need: everything about one person, their erasure, and history."""

    @abc.abstractmethod
    def memories_about(
        self, subject_id: uuid.UUID, *, after: Memory | None, limit: int
    ) -> Sequence[Memory]:
        """Up to `limit` memories whose subject is `subject_id` (any scope and status, in every
        tenant that holds some: `Tenants(about=subject_id)`) in a
        stable order (the subject index's), continuing after `after`, a memory of the previous
        batch: keyset pagination, so an export of any size reads one batch at a time."""

    @abc.abstractmethod
    def memories_about_encoded(
        self, subject_id: uuid.UUID, *, limit: int
    ) -> Generator[EncodedBatch, None, None]:
        """`memories_about` for an export, encoded by the database: every memory about
        `subject_id` (each one JSON object with its history, and the key of its owners), in the
        same order and batches of up to `limit`, no batch empty. Each batch is read as
        `memories_about` reads one (keyset after the previous batch's last memory). A backend
        may read the next batch while the caller handles this one: close the generator (or run
        it out) to release what it holds."""

    @abc.abstractmethod
    def erase_subject(self, erasure: Erasure) -> int:
        """In one transaction: delete every memory whose subject is `erasure.subject_id` (any
        scope and status) through the store's delete path (so every search index forgets it),
        delete their history and idempotency keys, and record the erasure with the count; how
        many were erased."""

    @abc.abstractmethod
    def erasures_of(self, subject_id: uuid.UUID) -> list[Erasure]:
        """The erasure events of a person, oldest first (kept in the person's own tenant)."""

    @abc.abstractmethod
    def history_of(
        self, tenants: Tenants, memory_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, list[Change]]:
        """The history of each memory (of `tenants`), oldest first (none: [])."""

    @abc.abstractmethod
    def history_page(
        self, tenants: Tenants, memory_id: uuid.UUID, after: int, limit: int
    ) -> list[tuple[int, Change]]:
        """Up to `limit` changes of a memory (of `tenants`), oldest first, each with its place in
        the history (increasing; history is append-only, so a place is stable): the changes
        after place `after` (0: from the first). Reads only the rows it answers, at any depth."""

    @abc.abstractmethod
    def set_retention(self, policy: RetentionPolicy) -> bool:
        """Keep (or replace) an organization's retention for a system; `days` 0 removes it.
        False when no such organization exists."""

    @abc.abstractmethod
    def retention_policies(self) -> list[RetentionPolicy]: ...

    @abc.abstractmethod
    def expire_memories(
        self, policy: RetentionPolicy, before: datetime, batch: int, by: ChangedBy
    ) -> Batch:
        """In one transaction, archive up to `batch` active memories of the policy's system
        stored before `before` by the organization (its organization and subject memories, and
        the agent-scoped ones of its people's agents) and not restored since `before`, with
        their `expired` history."""

    @abc.abstractmethod
    def restore_expired(
        self, organization_id: uuid.UUID, system: System, batch: int, by: ChangedBy
    ) -> Batch:
        """In one transaction, make up to `batch` of the organization's memories of `system`
        whose last change was retention's expiry active again, with their `restored`
        history."""


class AccountStore(Protocol):
    """Organizations, people, agents and their credentials."""

    @abc.abstractmethod
    def create_organization(self, org: Organization) -> None: ...

    @abc.abstractmethod
    def get_organization(self, org_id: uuid.UUID) -> Organization | None: ...

    @abc.abstractmethod
    def create_user(self, user: User) -> None: ...

    @abc.abstractmethod
    def get_user(self, user_id: uuid.UUID) -> User | None: ...

    @abc.abstractmethod
    def set_memory_enabled(
        self, kind: Literal["organization", "user"], entity_id: uuid.UUID, enabled: bool
    ) -> bool:
        """Turn memory access on or off; False when no such entity exists."""

    @abc.abstractmethod
    def create_agent(self, agent: Agent, max_per_owner: int) -> bool:
        """Create an agent unless its owner already has `max_per_owner`; False then.

        Concurrent calls for one owner count each other (the cap holds under races)."""

    @abc.abstractmethod
    def get_agent(self, agent_id: uuid.UUID) -> Agent | None: ...

    @abc.abstractmethod
    def add_api_key(self, key_hash: str, kind: KeyKind, principal_id: uuid.UUID) -> None:
        """Record the hash of a newly issued key (the key itself is never stored)."""

    @abc.abstractmethod
    def replace_api_keys(self, kind: KeyKind, principal_id: uuid.UUID, key_hash: str) -> None:
        """In one transaction: revoke every live key of the principal, record the new one."""

    @abc.abstractmethod
    def user_key_replaced_at(self, user_id: uuid.UUID) -> datetime | None:
        """When the person's key was last replaced (their keys' latest revocation); None if
        never. Page sessions opened at or before it are ended."""

    @abc.abstractmethod
    def set_tokens_valid_after(self, user_id: uuid.UUID, moment: datetime) -> bool:
        """Refuse from now on the person's bearer tokens issued at or before `moment`;
        False when no such person exists."""

    @abc.abstractmethod
    def agent_by_key(self, key_hash: str) -> AgentContext | None:
        """The agent whose live agent key hashes to `key_hash`, with owner and organization."""

    @abc.abstractmethod
    def user_by_key(self, key_hash: str) -> UserContext | None:
        """The person whose live user key hashes to `key_hash`, with organization."""

    @abc.abstractmethod
    def user_context(self, user_id: uuid.UUID) -> UserContext | None:
        """A person and their organization, by id (for JWT callers)."""

    @abc.abstractmethod
    def agents_of(self, owner_id: uuid.UUID) -> list[Agent]:
        """The agents a person owns, oldest first."""

    @abc.abstractmethod
    def revoke_api_keys(self, principal_id: uuid.UUID) -> None:
        """Revoke every live key of the principal (one short transaction)."""

    @abc.abstractmethod
    def part_with_agent_memories(
        self,
        agent_id: uuid.UUID,
        tenant_id: uuid.UUID,
        batch: int,
        after: AgentMemoryPosition | None,
        *,
        by: ChangedBy | None = None,
    ) -> AgentMemoryPosition | None:
        """One transaction of an agent's deletion: of the agent's next `batch` memories (in its
        tenant, oldest first, after `after`), delete the agent-scoped ones and keep the others
        with `source_agent_id` null (history as `delete_agent`). Where to go on from, or None
        once fewer than `batch` were left."""

    @abc.abstractmethod
    def delete_agent(
        self, agent_id: uuid.UUID, tenant_id: uuid.UUID, *, by: ChangedBy | None = None
    ) -> bool:
        """Revoke the agent's keys, delete its agent-scoped memories (in its tenant,
        `tenant_id`) and its room seats, keep its
        other memories with `source_agent_id` null, and delete the agent: one transaction (with
        the history: `deleted`, `source_removed`), which locks the agent's row first (a store
        by the agent commits before it, or inserts nothing: `insert_memory`). False, and
        nothing changed, when the agent is gone (another deletion committed first)."""

    @abc.abstractmethod
    def users_by_ids(self, ids: Iterable[uuid.UUID]) -> list[User]: ...

    @abc.abstractmethod
    def agents_by_ids(self, ids: Iterable[uuid.UUID]) -> list[tuple[Agent, uuid.UUID | None]]:
        """Agents with their owner's organization id, in one query."""


class RoomStore(Protocol):
    """Chat rooms and who takes part in them."""

    @abc.abstractmethod
    def create_room(self, room: ChatRoom) -> None:
        """Create a room with its owner as the `owner` participant."""

    @abc.abstractmethod
    def get_room(self, room_id: uuid.UUID) -> ChatRoom | None: ...

    @abc.abstractmethod
    def rooms_by_ids(self, ids: list[uuid.UUID]) -> list[ChatRoom]: ...

    @abc.abstractmethod
    def rooms_of(self, member_id: uuid.UUID, limit: int, offset: int) -> tuple[list[ChatRoom], int]:
        """A page of the rooms someone takes part in, newest first, and their total."""

    @abc.abstractmethod
    def member_rooms(self, member_id: uuid.UUID, room_ids: list[uuid.UUID]) -> set[uuid.UUID]: ...

    @abc.abstractmethod
    def member_room_ids(self, member_id: uuid.UUID, limit: int) -> list[uuid.UUID]:
        """Up to `limit` ids of the rooms someone takes part in."""

    @abc.abstractmethod
    def role_in(self, room_id: uuid.UUID, member_id: uuid.UUID) -> Role | None: ...

    @abc.abstractmethod
    def add_participant(
        self, room_id: uuid.UUID, kind: ParticipantType, member_id: uuid.UUID, role: Role
    ) -> None: ...

    @abc.abstractmethod
    def remove_participant(self, room_id: uuid.UUID, member_id: uuid.UUID) -> bool: ...

    @abc.abstractmethod
    def participants(self, room_id: uuid.UUID) -> list[Participant]: ...


class TuyaStore(Protocol):
    """Tuya vendor state: projects, tokens, devices, role bindings, slot-keyed memories and
    replay digests. Only the Tuya modules of the domain use it."""

    @abc.abstractmethod
    def create_tuya_project(
        self, client_id: str, secret: str, organization_id: uuid.UUID
    ) -> None: ...

    @abc.abstractmethod
    def tuya_project(self, client_id: str) -> tuple[str, uuid.UUID] | None:
        """`(client_secret, organization_id)` of a project."""

    @abc.abstractmethod
    def save_tuya_tokens(
        self,
        client_id: str,
        pair_id: uuid.UUID,
        tokens: dict[str, tuple[str, datetime]],
        replaces: uuid.UUID | None = None,
        keep: int | None = None,
    ) -> bool:
        """Store an access/refresh pair (as hashes), dropping the pair it replaces and, past
        `keep` pairs of the project, its oldest. False, and nothing stored, when the pair it
        replaces is gone (its refresh token was used by another refresh: a refresh token is
        used once, however many refreshes send it at once)."""

    @abc.abstractmethod
    def tuya_token(self, token_hash: str, kind: str) -> tuple[str, uuid.UUID, datetime] | None: ...

    @abc.abstractmethod
    def tuya_device(self, device_id: str) -> tuple[uuid.UUID, uuid.UUID] | None: ...

    @abc.abstractmethod
    def claim_tuya_device(
        self, device_id: str, organization_id: uuid.UUID
    ) -> tuple[uuid.UUID, uuid.UUID]:
        """`(organization_id, subject_id)`: the first organization to write a device owns it."""

    @abc.abstractmethod
    def bind_tuya_role(
        self, organization_id: uuid.UUID, role_id: str, agent_id: uuid.UUID
    ) -> None: ...

    @abc.abstractmethod
    def tuya_role_agent(self, organization_id: uuid.UUID, role_id: str) -> uuid.UUID | None: ...

    @abc.abstractmethod
    def put_tuya_memories(
        self, new: Sequence[tuple[Memory, str]], now: datetime, *, by: ChangedBy | None = None
    ) -> bool:
        """In one transaction, insert each `(memory, slot)` and supersede the active memory of the
        same subject and slot (its history names the new memory). One memory per subject and slot
        is active, always (a unique index); a concurrent writer of the same slot is superseded,
        never a second active value. False, and nothing written, if a source agent of the
        memories (a role's) is gone: deleted since the role was read (as `insert_memory`).
        Raises `Conflict` if writers of the same slots keep racing."""

    @abc.abstractmethod
    def delete_tuya_memories(
        self,
        tenant_id: uuid.UUID,
        subject_id: uuid.UUID,
        slots: Sequence[str],
        prefixes: Sequence[str],
        batch: int,
        *,
        by: ChangedBy | None = None,
    ) -> int:
        """Delete every version (any status) of the subject's memories whose Tuya slot is in
        `slots` or starts with one of `prefixes`, `batch` rows per transaction, until none is
        left; how many were deleted."""

    @abc.abstractmethod
    def remember_tuya_signature(self, digest: str, expires_at: datetime) -> bool:
        """Record a signed request's digest until `expires_at` (shared by every process on the
        database; expired digests are dropped); False if the digest was already recorded.

        >>> store.remember_tuya_signature("ab12", soon), store.remember_tuya_signature("ab12", soon)
        (True, False)
        """


class VectorStore(Protocol):
    """Memory vectors for recall by meaning (docs/search.md): the queue of memories to embed,
    their vectors, and the nearest memories to a vector within a query's audiences."""

    @abc.abstractmethod
    def claim_unembedded(self, limit: int, lease: timedelta) -> list[tuple[uuid.UUID, str]]:
        """Up to `limit` queued memories `(id, content)`, held by this caller for `lease` (after
        which another process may take them over: a process that dies loses nothing).

        Shared between tenants: the newest queued memory, then each tenant's newest in turn
        (a round over the tenants with queued memories that carries on from one claim to the
        next), so a tenant storing faster than the memories are embedded never holds another
        tenant's memory back for more than a round of claims."""

    @abc.abstractmethod
    def save_vectors(
        self, model: str, ids: Sequence[uuid.UUID], vectors: NDArray[np.float32]
    ) -> int:
        """Store one unit vector per memory (row `i` is `ids[i]`'s), made by `model`, replacing
        one of another model, and take the memories off the queue; memories deleted meanwhile,
        or held by another transaction (being deleted, changed, or saved by another worker:
        never waited for, so an erasure never deadlocks with a save; they stay queued) are
        skipped, and so is a memory whose vector of `model` is stored already (a memory's
        text never changes: a second save, concurrent or not, adds nothing). How many were
        stored."""

    @abc.abstractmethod
    def nearest_memories(
        self,
        query: MemoryQuery,
        vector: NDArray[np.float32] | Callable[[], NDArray[np.float32]],
        model: str,
        limit: int,
    ) -> Sequence[Scored]:
        """The ids of up to `limit` memories of `query` (its audiences and filters; no
        full-text search) whose `model` vectors are nearest to `vector`, best first, with their
        cosine similarity as the score. Every memory named is checked against the query in the
        database. `vector` may be a function that returns it: it is called once, after the
        reads that do not need it (the query's embedding runs meanwhile: `Probes`), and what it
        raises goes through."""

    @abc.abstractmethod
    def on_queued(self, listener: Callable[[], object]) -> None:
        """Call `listener` after each commit of this process that queued memories for embedding
        (it must be quick: it runs in the writer's thread). Other processes' writes are not
        seen: a worker still looks at the queue now and then."""

    @abc.abstractmethod
    def off_queued(self, listener: Callable[[], object]) -> None:
        """Stop calling `listener` (given to `on_queued`; nothing if it is not there)."""

    @abc.abstractmethod
    def refuse_vectors(self, ids: Sequence[uuid.UUID]) -> int:
        """The embedder refused these claimed memories' texts: count it against each and free
        its claim; a memory refused `MAX_REFUSALS` times (`mnemos.storage.queue_claims`) is set
        aside, neither claimed nor in the backlog, until `queue_for_model`. How many this call
        set aside."""

    @abc.abstractmethod
    def vectors_set_aside(self) -> int:
        """How many queued memories are set aside, their texts refused by the embedder."""

    @abc.abstractmethod
    def adopt_vectors(self, former: str, model: str, size: int) -> int:
        """Record as `model` the vectors of `size` numbers (and the sealed chunks of them) that
        are recorded as `former`; how many vectors. For an endpoint's vectors saved under its
        bare name by code before migration 0026 (`Embedder.former_model`), as 0026 renamed
        those stored before it."""

    @abc.abstractmethod
    def vector_models(self) -> list[str]:
        """The models whose vectors the database holds (in name order; empty: none yet)."""

    @abc.abstractmethod
    def other_model_vectors(self, query: MemoryQuery, model: str) -> str | None:
        """A model other than `model` whose vectors the search layout holds for the memories
        `query`'s audiences read, when it holds none of `model` there (any one; None: none, or
        some of `model`: then an empty answer is its filters' or its floor's, review25 finding
        1). Asked when a search by meaning found nothing: whether the database was reindexed
        under another embedder."""

    @abc.abstractmethod
    def queue_for_model(self, model: str, batch: int) -> int:
        """Queue every memory with no vector of `model` (none yet, or another model's), `batch`
        memories per transaction, and drop the search layout of other models; how many
        were queued. Memories set aside (`refuse_vectors`) are given their tries again."""

    @abc.abstractmethod
    def compact_vectors(
        self, after: tuple[uuid.UUID, str, int] | None, chunks: int
    ) -> tuple[uuid.UUID, str, int] | None:
        """Drop the vectors of deleted memories from the next `chunks` pieces of the search
        layout after position `after` (None: from the start; a position is a tenant, an owner
        key and a chunk number); the position reached, or None once past the end. Repeated
        from None, it sweeps the whole layout."""

    @abc.abstractmethod
    def vector_backlog(self) -> int:
        """How many memories wait to be embedded (those set aside not counted)."""


class Embedder(Protocol):
    """Turns texts into vectors for recall by meaning (`mnemos.embedding` implements it).

    Vectors are float32, L2-normalised (cosine similarity is a dot product), one row per text.
    `model` names the model and its version: every stored vector records it, so a change of
    model is detected and `mnemos reindex` re-embeds.
    """

    model: str
    dimensions: int
    former_model: str | None
    """The name code before migration 0026 recorded this embedder's vectors under, when it
    differs from `model` (an endpoint's bare model name, without the size): a process of an
    earlier release still running during a rolling upgrade saves them so, and the embedding
    worker adopts them (`recall.adopt_former_vectors`). Optional: an embedder without it has
    none."""
    remote: bool
    """True when a model run waits on another machine (an embeddings endpoint: seconds at
    worst): a search then has its query embedded before it takes a request thread or a
    database connection (`Recall.embedded_first`). Optional: an embedder without it is local."""

    @abc.abstractmethod
    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """An array of shape (len(texts), dimensions), one L2-normalised row per text, in order.

        >>> embedder.embed(["aisle seats", "window seats"]).shape
        (2, 384)
        """
