"""Logging: `MNEMOS_LOG_FORMAT=json|text` and `MNEMOS_LOG_LEVEL`, for Mnemos and uvicorn.

In JSON every line is one object: `time` (UTC, ISO 8601), `level`, `logger`, `message`, and the
record's extra fields (the access line's request id, route, status, ...). uvicorn's own access
log is off: it writes the raw path and query string, where search words and ids would land;
Mnemos writes one access line per request instead (`mnemos.api.observe`), with the route
template and never a key, a token or content.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from mnemos.config import Settings
from mnemos.ndjson import line_safe

ACCESS_LOGGER = "mnemos.access"
# Attributes every LogRecord has: anything else on a record came as `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn adds a colored copy
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line for any line reader (`ndjson.line_safe`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return line_safe(orjson.dumps(entry, default=str)).decode()  # one record, one line


def log_config(settings: Settings, level: str | None = None) -> dict[str, Any]:
    """A `logging.config.dictConfig` for one server process (uvicorn applies it)."""
    chosen = (level or settings.log_level).upper()
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if settings.log_format == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "mnemos",
        "stream": "ext://sys.stderr",
    }
    logger = {"handlers": ["stderr"], "level": chosen, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"mnemos": formatter},
        "handlers": {"stderr": handler},
        "loggers": {
            "mnemos": logger,
            "uvicorn": logger,
            "uvicorn.error": {"level": chosen},
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
        },
    }
