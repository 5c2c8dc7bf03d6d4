"""Runtime settings, built by a function and passed in (nothing reads the environment at import)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mnemos.errors import ValidationFailed

ENV_PREFIX = "MNEMOS_"
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
KIB = 1024
MIB = 1024 * KIB
MIN_SECRET_BYTES = 32
DEFAULT_MAX_AGENTS_PER_USER = 50


def default_data_dir() -> Path:
    """Where the embedded SQLite database lives unless told otherwise."""
    return Path.home() / ".local" / "share" / "mnemos"


class Settings(BaseSettings):
    """Everything the server needs to run; each field can be set as `MNEMOS_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = ""
    # Read replicas of a PostgreSQL `database_url` (streaming standbys), comma-separated: lists,
    # gets and searches go to one that is in rotation, everything else to the primary (see
    # docs/deploying.md, "Read replicas"). SQLite refuses them.
    database_replica_urls: str = Field(default="", repr=False)
    # A replica more than this many seconds behind the primary, or not answering, is taken out
    # of rotation until it catches up (checked in the background, 4 times per bound).
    replica_max_lag_seconds: float = Field(default=1.0, gt=0, le=3600)
    data_dir: Path = Field(default_factory=default_data_dir)
    max_body_bytes: int = Field(default=MIB, ge=1024)
    max_content_chars: int = Field(default=10_000, ge=1)
    max_query_chars: int = Field(default=500, ge=1)
    # The HTTP server (see `mnemos.http_guard`): seconds a client has to send a request's head,
    # from connecting (or from the first byte of a next request), and then its body; seconds an
    # idle kept-alive connection stays open; requests one process handles at once before it
    # answers 503; and the largest request head (431 past either size, 414 for a long target).
    header_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    body_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    keep_alive_seconds: int = Field(default=5, ge=1, le=3600)
    max_in_flight: int = Field(default=1000, ge=1)
    # Requests one tenant (an organization, a person without one, an anonymous client address)
    # has in flight in one process before its next is refused with 429 `tenant_busy`; 0 = off.
    # docs/decisions.md, "A tenant's share of a process's requests".
    max_in_flight_per_tenant: int = Field(default=16, ge=0)
    max_header_bytes: int = Field(default=32 * KIB, ge=KIB)
    max_header_line_bytes: int = Field(default=8 * KIB, ge=256)
    # Wall-clock time one search statement may take before it is stopped with 422
    # `search_too_expensive` (SQLite: interrupted by a watchdog; PostgreSQL: statement_timeout).
    search_budget_ms: int = Field(default=1000, ge=1, le=60_000)
    # What Band's `content_query` does to a memory list: `filter` (the documented meaning: the
    # matches, newest first, every page) or `hybrid` (the best matches by keyword and meaning,
    # best first, one ranked page of at most 100: docs/search.md, "content_query").
    content_query_mode: Literal["filter", "hybrid"] = "filter"
    sqlite_synchronous: str = "FULL"
    db_pool_size: int = Field(default=8, ge=1, le=200)
    # Threads that run blocking work (routes, database calls) per process; 0 = by backend (see
    # `resolved_worker_threads`). Scale with processes (`--workers`), not threads.
    worker_threads: int = Field(default=0, ge=0, le=200)
    # Requests per minute per caller: the agent, person or Tuya project authentication resolved
    # (a request without credentials: its client address); 0 = off.
    rate_limit_per_minute: int = Field(default=3000, ge=0)
    # Failed authentications per minute per client address; past it, 429 before any lookup.
    auth_failures_per_minute: int = Field(default=30, ge=0)
    # Agents one person may own: each agent's key has its own request allowance.
    max_agents_per_user: int = Field(default=DEFAULT_MAX_AGENTS_PER_USER, ge=1)
    redis_url: str = ""
    redis_prefix: str = "mnemos:rl:"
    # HS256 secret for Mnemos-issued JWTs; empty = a random one kept in the database.
    jwt_secret: str = Field(default="", repr=False)
    # An external identity provider whose JWTs people may present (RS256/ES256 only).
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwks_url: str = ""
    jwks_file: Path | None = None
    # Recall by meaning (docs/search.md): `local` (the bundled all-MiniLM-L6-v2, offline), `none`
    # (keyword search only), or the http(s) URL of an OpenAI-compatible embeddings endpoint
    # (Ollama, vLLM, TEI; `/v1/embeddings` is appended unless the path already names it).
    embedder: str = "local"
    # The model name sent to an embeddings endpoint (required with a URL; the local model is fixed).
    embedder_model: str = Field(default="", validate_default=True)
    # Bearer token for the embeddings endpoint, if it needs one.
    embedder_api_key: str = Field(default="", repr=False)
    # The endpoint's vector size; 0 = ask it once at startup.
    embedder_dimensions: int = Field(default=0, ge=0, le=8192)
    # Seconds one call to the embeddings endpoint may take.
    embedder_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    # CPU threads one run of the local embedder may use (a search's query is one run). One: a
    # short text is faster on its request's own thread than split over onnxruntime's pool, and
    # the embedding worker then shares the requests' session (docs/decisions.md, "One thread").
    embedder_threads: int = Field(default=1, ge=1, le=64)
    # Where the local embedder keeps the model it derives from the packaged weights at its first
    # start (mnemos.embedding.integer); unset: $XDG_CACHE_HOME/mnemos or ~/.cache/mnemos.
    embedder_cache_dir: Path | None = None
    # The most a server's embedding worker waits before each step of its work (a claim, one
    # text, a save) for a moment without requests in flight (mnemos.indexer.InFlight), and at
    # most this share of the time its last step took. 0 (the default): it does not wait; 50
    # lowers store p95 while a backlog drains but delays new memories under steady stores
    # (docs/decisions.md, "The embedding worker gives way to requests: off by default").
    embed_give_way_ms: int = Field(default=0, ge=0, le=60_000)
    embed_give_way_share: float = Field(default=1.0, ge=0)
    # The people's web page (`/ui/`): how long a signed-in browser session lasts, and whether
    # its cookie is always marked Secure (it is whenever the request came over HTTPS; set this
    # behind a TLS-terminating proxy that forwards plain HTTP without proxy headers).
    ui_session_seconds: int = Field(default=1800, ge=60, le=24 * 3600)
    ui_secure_cookie: bool = False
    # Retention (`mnemos admin set-retention`): seconds between the server's passes that archive
    # expired `working`/`sensory` memories (0 = the server never expires them), and memories
    # archived per transaction (each batch is short, so requests never wait on a long one).
    retention_interval_seconds: float = Field(default=300.0, ge=0)
    retention_batch: int = Field(default=500, ge=1, le=10_000)
    # Operations (docs/operations.md). `GET /metrics` in the Prometheus text format, off unless
    # "on"; with a token, only `Authorization: Bearer <token>` may read it.
    metrics: bool = False
    metrics_token: str = Field(default="", repr=False)
    # One access line per request and every other log line: "json" (one object a line) or "text".
    log_format: Literal["json", "text"] = "text"
    log_level: LogLevel = "info"

    @field_validator("jwt_secret")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value and len(value.encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"must be at least {MIN_SECRET_BYTES} bytes")
        return value

    @field_validator("embedder")
    @classmethod
    def _known_embedder(cls, value: str) -> str:
        value = value.strip()
        if value.lower() in {"local", "none"}:
            return value.lower()
        if value.lower().startswith(("http://", "https://")):
            return value
        raise ValueError("must be 'local', 'none' or the http(s) URL of an embeddings endpoint")

    @field_validator("embedder_model")
    @classmethod
    def _model_for_an_endpoint(cls, value: str, info: ValidationInfo) -> str:
        if not value and str(info.data.get("embedder", "")).startswith(("http://", "https://")):
            raise ValueError("required when MNEMOS_EMBEDDER is the URL of an embeddings endpoint")
        return value

    @field_validator("jwks_file")
    @classmethod
    def _readable_jwks(cls, value: Path | None) -> Path | None:
        """Read at the app's start (`TokenVerifier`): refused here, before anything runs."""
        if value is not None:
            try:
                json.loads(value.read_text())
            except OSError as exc:
                raise ValueError(f"cannot read {value}: {exc.strerror or exc}") from None
            except ValueError:
                raise ValueError(f"{value} is not JSON (a JWKS document)") from None
        return value

    @field_validator("data_dir")
    @classmethod
    def _a_directory(cls, value: Path) -> Path:
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} is not a directory")
        return value

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("sqlite_synchronous")
    @classmethod
    def _known_synchronous(cls, value: str) -> str:
        value = value.upper()
        if value not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError("must be OFF, NORMAL, FULL or EXTRA")
        return value

    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file under `data_dir`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'mnemos.db'}"

    def replica_urls(self) -> list[str]:
        """`database_replica_urls` as a list (blank entries dropped)."""
        return [url.strip() for url in self.database_replica_urls.split(",") if url.strip()]

    def resolved_worker_threads(self) -> int:
        """Measured on this project's benchmark (BENCHMARKS.md, docs/decisions.md):

        - SQLite: 2. Concurrent stores in one process then share a durable COMMIT (group commit):
          8-client stores 1,019/s with 2 threads, 662/s with 1 (a run also slower at the
          floor); reads did as well either way.
        - PostgreSQL: 1. With 2, a few requests in every few thousand waited 0.1-1.5 s inside
          psycopg for the interpreter lock (PostgreSQL logged no statement over 100 ms).
        More threads only contend for the interpreter lock.
        """
        if self.worker_threads:
            return self.worker_threads
        from mnemos.storage import backend  # storage reads Settings: import when asked

        return backend(self.resolved_database_url()).worker_threads


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, with explicit overrides winning, and check them as
    a server's start would (`storage.check_settings`: the URL's scheme, read replicas), so that
    every command refuses what `serve` could not run with before it touches anything.

    Raises `ValidationFailed` naming each `MNEMOS_*` variable at fault (a command's option
    overriding one, such as `--database-url`, is named with it)."""
    from mnemos.storage import check_settings  # storage reads Settings: import when asked

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = {_variable(error["loc"]): _problem(error["msg"]) for error in exc.errors()}
        raise _invalid(problems) from None
    try:
        check_settings(settings)
    except ValueError as exc:
        said = str(exc)
        if ENV_PREFIX not in said:
            said += ": check --database-url or MNEMOS_DATABASE_URL"
        raise ValidationFailed(f"Invalid settings: {said}") from None
    return settings


def _variable(loc: tuple[int | str, ...]) -> str:
    return ENV_PREFIX + str(loc[0]).upper() if loc else "settings"


def _problem(message: str) -> str:
    return message.removeprefix("Value error, ")


def _invalid(problems: dict[str, str]) -> ValidationFailed:
    """One line naming every variable at fault (never its value: it may be a secret)."""
    listed = "; ".join(f"{variable}: {problem}" for variable, problem in problems.items())
    return ValidationFailed(f"Invalid settings: {listed}", details=problems)
