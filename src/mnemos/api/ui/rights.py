"""The page's calls for a person's rights over what is about them: count, download, erase.

The same domain service as `GET /api/v1/me/memories/count`, `GET /api/v1/me/memories/export`
and `POST /api/v1/me/memories/erase` (`domain/rights.py`), and the same export line writer
(`api/rights.py`), so the page's download holds exactly what the API's export does.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from mnemos.api.deps import Services
from mnemos.api.responses import encodable
from mnemos.api.rights import exported_json
from mnemos.domain.history import by_user
from mnemos.domain.models import UserContext


def count_about(svc: Services, ctx: UserContext) -> int:
    """How many memories are about the person, every status."""
    return svc.rights.count(ctx)


def export_document(svc: Services, ctx: UserContext) -> Iterator[bytes]:
    """Every memory about the person (every status, with display names and history) as one
    JSON document, `{"user_id": ..., "memories": [...]}`, streamed one batch at a time."""
    yield b'{"user_id": ' + orjson.dumps(str(ctx.user.id)) + b', "memories": ['
    first = True
    for batch in svc.rights.export(ctx):
        chunk = []
        for item in batch:
            value = exported_json(item)
            try:
                line = orjson.dumps(value)
            except orjson.JSONEncodeError:
                line = orjson.dumps(encodable(value))
            chunk.append((b"\n" if first else b",\n") + line)
            first = False
        yield b"".join(chunk)
    yield b"\n]}\n"


def erase_about(svc: Services, ctx: UserContext) -> int:
    """Erase every memory about the person, every status; how many were erased."""
    return svc.rights.erase(ctx, by_user(ctx)).erased
