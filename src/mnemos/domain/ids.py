"""Identifiers and clocks."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

from mnemos.errors import invalid_field


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): 48 bits of milliseconds, then randomness."""
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return uuid.UUID(int=value)


def utcnow() -> datetime:
    """Now, in UTC, with microseconds."""
    return datetime.now(UTC)


def parse_uuid(value: str, field: str) -> uuid.UUID:
    """Parse a caller-supplied UUID, or fail with `validation_failed` naming the field."""
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise invalid_field(field, "must be a UUID") from None


def try_uuid(value: str) -> uuid.UUID | None:
    """A UUID, or None when the text is not one (a path id that cannot name anything)."""
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return None


def iso(moment: datetime) -> str:
    """UTC ISO 8601 with microseconds and a `Z`, the wire form of every timestamp."""
    # isoformat (C) instead of strftime: this runs for every timestamp of every answer.
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
