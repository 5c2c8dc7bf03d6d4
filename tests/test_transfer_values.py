"""`mnemos import`'s batch conversions (`storage/transfer_values.py`): a whole column's UUIDs or
times are checked at once (`Spelling`) and must decide as the check of each value does; a column
null in every row of a batch may be left out, only where the target then stores null."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from mnemos.storage.schema import memories
from mnemos.storage.transfer_bulk import Loader
from mnemos.storage.transfer_values import (
    UTC_SPELLING,
    UTC_TEXT,
    UUID_SPELLING,
    UUID_TEXT,
    Spelling,
    column_shortcut,
    converter,
    tuples,
)

IDS = [str(uuid.UUID(int=n * 0x0123456789ABCDEF0123456789ABCDEF % (1 << 128))) for n in range(9)]
TIMES = [
    (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=7777 * n, microseconds=1 + n)).isoformat()
    for n in range(9)
]
NEAR_IDS = [
    IDS[0].upper(),  # the general path takes it (and normalizes it)
    IDS[0].replace("-", "", 1) + "0",  # a dash moved: same length
    IDS[0][:-1],
    IDS[0] + "0",
    IDS[0][:-1] + ",",
    IDS[0][:-1] + "g",
    IDS[0][:-1] + "\u0661",  # a digit beyond ASCII
    "-" + IDS[0][:-1],
    IDS[0].replace("-", ":"),
    IDS[0][:9] + "," + IDS[0][10:],
    "",
]
NEAR_TIMES = [
    TIMES[0].replace("+00:00", "+01:00"),
    TIMES[0].replace("+00:00", "Z00000"),
    TIMES[0].replace("T", " "),
    TIMES[0][:-6],
    TIMES[0].replace("2", "\u0662"),  # digits beyond ASCII
    TIMES[0].replace(".", ","),
    TIMES[0][:5] + "1" + TIMES[0][6:],  # a month digit where the dash was? no: same shape
    "2026-13-01T00:00:00.000000+00:00",  # the shape of a time, not a day: fromisoformat refuses
    TIMES[0] + "0",
]


@pytest.mark.parametrize(
    "spelling, one, good, near",
    [
        (UUID_SPELLING, UUID_TEXT, IDS, NEAR_IDS),
        (UTC_SPELLING, UTC_TEXT, TIMES, NEAR_TIMES),
    ],
)
def test_a_column_is_spelled_as_each_of_its_values(
    spelling: Spelling, one: Callable[[str], Any], good: list[str], near: list[str]
) -> None:
    """The whole-column check takes a batch exactly when each value matches the one-value
    expression in ASCII: one value spelled otherwise anywhere in a batch sends the batch to the
    per-value path (which decides on digits beyond ASCII)."""
    assert spelling.joined(good) == ",".join(good)
    for value in near:
        for at in (0, 4, len(good)):
            batch = [*good[:at], value, *good[at:]]
            expected = all(one(item) and item.isascii() for item in batch)
            assert (spelling.joined(batch) is not None) == expected, (value, at)


@pytest.mark.parametrize("dialect", [sqlite.dialect(), postgresql.psycopg.dialect()])
@pytest.mark.parametrize("column", ["id", "inserted_at"])
def test_a_column_converts_at_once_as_value_by_value(dialect: sa.Dialect, column: str) -> None:
    """What the whole-column shortcut gives, or refuses to take, is what the per-value converter
    gives or refuses."""
    values = IDS if column == "id" else TIMES
    nears = NEAR_IDS if column == "id" else NEAR_TIMES
    shortcut = column_shortcut(memories.c[column], dialect.name)
    step = converter(memories.c[column], dialect)
    assert shortcut is not None and step is not None
    assert shortcut((*values, None)) == tuple(map(step, (*values, None)))
    for near in nears:
        batch = (*values[:3], near, *values[3:])
        taken = _outcome(shortcut, batch)
        if taken is not None:  # (None: the per-value path decides)
            assert taken == _outcome(lambda values: tuple(map(step, values)), batch), near


def _outcome(convert: Any, values: tuple[Any, ...]) -> Any:
    try:
        return convert(values)
    except ValueError:
        return "refused"


def test_a_column_null_in_every_row_is_left_out_only_where_allowed() -> None:
    """`tuples` leaves out a column null in every row of the batch when the target stores null
    without it (`omittable`); a column holding a value in one row stays, as does one not
    omittable."""
    rows = [
        {"id": IDS[n], "chat_room_id": None, "tuya_slot": None, "thought": None if n else "t"}
        for n in range(4)
    ]
    keys, values = tuples(
        memories, rows, 2, sqlite.dialect(), frozenset({"chat_room_id", "thought"})
    )
    assert keys == ["id", "tuya_slot", "thought"]
    assert values[0] == (IDS[0].replace("-", ""), None, "t")
    keys, _ = tuples(memories, rows, 2, sqlite.dialect())
    assert keys == ["id", "chat_room_id", "tuya_slot", "thought"]


def test_only_nullable_columns_without_a_default_may_be_left_out(tmp_path: Path) -> None:
    """SQLite: the columns an INSERT may leave out are read from the target's own schema: a
    column with a default, NOT NULL, or the key must be given (or refused) as the file says."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'defaults.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE t (k INTEGER PRIMARY KEY, free TEXT, given TEXT DEFAULT 'x', "
            "needed TEXT NOT NULL, both TEXT NOT NULL DEFAULT 'y')"
        )
        assert Loader(conn)._nulls_by_default("t") == frozenset({"free"})
    engine.dispose()
