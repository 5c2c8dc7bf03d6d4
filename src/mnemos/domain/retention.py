"""Retention: an organization may keep its `working` and `sensory` memories for a number of days
(`mnemos admin set-retention`); the server archives the expired ones in small batches.

Expired memories are archived, not deleted (docs/decisions.md, "Retention archives"): they leave
every default list at once, `status=all` and the person's export still show them, the person can
erase them, and the history records `expired` by the server.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

from mnemos.domain.history import SERVER
from mnemos.domain.ids import utcnow
from mnemos.domain.memories import IDEMPOTENCY_TTL
from mnemos.domain.models import (
    Batch,
    ChangedBy,
    Organization,
    RetentionPolicy,
    System,
    parse_enum,
)
from mnemos.domain.ports import RightsStore
from mnemos.errors import NotFound, invalid_field

RETAINED_SYSTEMS = (System.WORKING, System.SENSORY)
MAX_DAYS = 36_500


class RetentionStore(RightsStore, Protocol):
    """Retention policies and the archiving of expired memories."""

    def get_organization(self, org_id: uuid.UUID) -> Organization | None: ...

    def forget_idempotency_keys(self, before: datetime, batch: int) -> int: ...


class RetentionService:
    def __init__(self, store: RetentionStore, batch: int = 500, pause_seconds: float = 0.01):
        self.store = store
        self.batch = batch
        self.pause_seconds = pause_seconds

    def set(self, organization_id: uuid.UUID, system: str, days: int) -> RetentionPolicy:
        """Keep the organization's `system` memories `days` days (0: keep them for good)."""
        kind = parse_enum(System, system, "system")
        if kind not in RETAINED_SYSTEMS:
            raise invalid_field("system", "retention applies to working and sensory memories")
        if not 0 <= days <= MAX_DAYS:
            raise invalid_field("days", f"must be 0 (no retention) to {MAX_DAYS}")
        policy = RetentionPolicy(organization_id, kind, days)
        if not self.store.set_retention(policy):
            raise NotFound("No such organization", {"org": str(organization_id)})
        return policy

    def restore(self, organization_id: uuid.UUID, system: str, by: ChangedBy) -> int:
        """Undo a wrong policy: make every memory of the organization's `system` that retention
        archived, and nobody changed since, active again (`mnemos admin restore-expired`); how
        many. Lift or correct the policy first, or the next pass archives them again once the
        period has passed since this restore."""
        kind = parse_enum(System, system, "system")
        if kind not in RETAINED_SYSTEMS:
            raise invalid_field("system", "retention applies to working and sensory memories")
        if self.store.get_organization(organization_id) is None:  # as `set` answers it
            raise NotFound("No such organization", {"org": str(organization_id)})
        return self._in_batches(
            lambda: self.store.restore_expired(organization_id, kind, self.batch, by)
        )

    def expire(self, now: datetime | None = None) -> int:
        """One pass: archive every expired memory of every policy, `batch` per transaction,
        pausing between batches so other writers take their turn; how many."""
        now = now or utcnow()
        total = 0
        for policy in self.store.retention_policies():
            before = now - timedelta(days=policy.days)
            total += self._in_batches(
                partial(self.store.expire_memories, policy, before, self.batch, SERVER)
            )
        return total

    def forget_keys(self, now: datetime | None = None) -> int:
        """Forget every idempotency key past its day (`IDEMPOTENCY_TTL`: it can no longer answer
        a retry), `batch` per transaction; how many. Without it the keys of requests never
        retried would be kept for good."""
        before = (now or utcnow()) - IDEMPOTENCY_TTL

        def step() -> Batch:
            forgotten = self.store.forget_idempotency_keys(before, self.batch)
            return Batch(forgotten, forgotten)

        return self._in_batches(step)

    def sweep(self) -> tuple[int, int]:
        """The server's periodic pass: expired memories archived, expired keys forgotten."""
        return self.expire(), self.forget_keys()

    def _in_batches(self, step: Callable[[], Batch]) -> int:
        """Run `step` (one transaction of a change made in batches) until a batch chooses fewer
        than it may, pausing between batches so other writers take their turn; how many it
        changed."""
        total = 0
        while True:
            done = step()
            total += done.changed
            if done.chosen < self.batch:
                return total
            time.sleep(self.pause_seconds)
