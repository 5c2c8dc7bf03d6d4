"""`mnemos serve | migrate | admin ...`: every admin command prints one JSON object."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from mnemos.cli_ops import refusals, register
from mnemos.config import LOG_LEVELS, Settings, load_settings
from mnemos.domain import accounts
from mnemos.domain.ids import iso
from mnemos.domain.tuya import ROLE_ID
from mnemos.domain.tuya_auth import new_project_credentials
from mnemos.errors import MCP_INSTALL, NotFound, OtherModelIndexed, SchemaNewer, invalid_field
from mnemos.storage import migrate as run_migrations
from mnemos.storage import open_store, require_database
from mnemos.storage.base import Store

if TYPE_CHECKING:
    from mnemos.api.deps import Services

database_option = click.option(
    "--database-url",
    envvar="MNEMOS_DATABASE_URL",
    default=None,
    help="SQLAlchemy-style URL: sqlite:///path/file.db or postgresql://user@host/db "
    "(default: SQLite under ~/.local/share/mnemos, or MNEMOS_DATA_DIR).",
)


def _emit(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload))


@contextmanager
def _admin_store(database_url: str | None, *, create: bool = False) -> Iterator[Store]:
    """The store an operator's command works on, migrated; a database that is not there is
    refused unless the command `create`s one (bootstrapping: `admin create-org`)."""
    settings = load_settings(database_url=database_url)
    with refusals():
        if not create:
            require_database(settings)
        run_migrations(settings)
        store = open_store(settings)
        try:
            yield store
        finally:
            store.close()


def _uuid(_ctx: click.Context, param: click.Parameter, value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.BadParameter("must be a UUID", param=param) from None


class _Refusing(click.Group):
    """Every command, run inside `refusals()`: what it refuses (a setting, a database that is
    not there or does not answer, ...) is one JSON line on stderr and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        with refusals():
            return super().invoke(ctx)


log_level_choice = click.Choice(LOG_LEVELS, case_sensitive=False)


@click.group(cls=_Refusing)
@click.version_option(package_name="mnemos")
def main() -> None:
    """Mnemos: a memory server for AI agents."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--log-level", type=log_level_choice, help="(default: MNEMOS_LOG_LEVEL)")
@database_option
def serve(
    host: str, port: int, workers: int, log_level: str | None, database_url: str | None
) -> None:
    """Create or migrate the database, then serve HTTP (several processes with --workers)."""
    from mnemos import serving

    if workers > 1 and port == 0:
        raise click.BadParameter(
            "each worker would get another port: give a port", param_hint="--port"
        )
    settings = load_settings(database_url=database_url)
    log_level = log_level or settings.log_level
    _address_free(host, port)
    try:
        run_migrations(settings)
    except SchemaNewer as exc:  # an old install restarted after a newer one migrated
        click.echo(f"mnemos: {exc.message}", err=True)
        sys.exit(1)
    # Worker processes build their own settings from the environment: hand them the URL.
    os.environ["MNEMOS_DATABASE_URL"] = settings.resolved_database_url()
    click.echo(f"mnemos: serving on http://{host}:{port} ({_redacted(settings)})", err=True)
    if workers > 1:
        with serving.shared_metrics(settings, workers):
            serving.serve_many(host, port, workers, log_level)
        return
    # uvicorn drains in-flight requests on SIGTERM, then re-raises the signal: exit 0 on it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serving.serve_one(settings, host, port, log_level)


@main.command(name="mcp")
@click.option(
    "--api-key",
    envvar="MNEMOS_API_KEY",
    required=True,
    help="The caller: an agent's API key (mn_agent_...), or a person's key or token "
    "(default: MNEMOS_API_KEY).",
)
@click.option("--log-level", type=log_level_choice, default="warning", show_default=True)
@database_option
def mcp_stdio(api_key: str, log_level: str, database_url: str | None) -> None:
    """Serve the MCP memory tools over stdio (for Claude Desktop, Claude Code, ...): protocol
    messages on stdout, logs on stderr."""
    import contextlib
    import logging

    from mnemos.mcp import sdk_installed

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr)
    if not sdk_installed():
        click.echo(f"mnemos mcp needs the MCP SDK: {MCP_INSTALL}", err=True)
        sys.exit(1)
    from mnemos.mcp.stdio import serve_stdio

    settings = load_settings(database_url=database_url)
    with refusals():
        require_database(settings)
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries protocol messages only
            run_migrations(settings)
        serve_stdio(settings, api_key)


def _address_free(host: str, port: int) -> None:
    """Refuse, in one line, an address another server listens on, before anything starts.

    Probed without `SO_REUSEPORT`: workers bind with it (`mnemos.serving`), so a second
    `serve --workers N` would otherwise join a running group on the port, and the kernel would
    split the clients between two servers (two databases, perhaps). `SO_REUSEADDR` lets a port
    left in TIME_WAIT by a server that just stopped be taken again, as uvicorn does."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            click.echo(f"mnemos: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
            sys.exit(1)


def _redacted(settings: Settings) -> str:
    from sqlalchemy.engine import make_url

    return make_url(settings.resolved_database_url()).render_as_string(hide_password=True)


@main.command()
@database_option
def migrate(database_url: str | None) -> None:
    """Apply every pending migration."""
    settings = load_settings(database_url=database_url)
    with refusals():
        run_migrations(settings)
    _emit({"ok": True, "database": _redacted(settings)})


@main.command()
@database_option
@click.option("--batch", default=64, show_default=True, type=click.IntRange(1, 1024))
@click.option(
    "--switch-model",
    is_flag=True,
    help="The database holds vectors of another model: replace them with this one's "
    "(the servers must then run with the same MNEMOS_EMBEDDER settings).",
)
def reindex(database_url: str | None, batch: int, switch_model: bool) -> None:
    """Embed every memory with no vector of the current model (MNEMOS_EMBEDDER): memories
    stored before recall by meaning, or under another model (with --switch-model). Resumable:
    the work is a queue in the database, so running it again (or any server) carries on where
    it stopped."""
    from mnemos.domain.recall import adopt_former_vectors
    from mnemos.embedding import embedder_from_settings
    from mnemos.indexer import drain

    settings = load_settings(database_url=database_url)
    embedder = embedder_from_settings(settings)
    if embedder is None:
        raise click.UsageError("MNEMOS_EMBEDDER is 'none': there is nothing to embed with")
    with _admin_store(database_url) as store:
        adopt_former_vectors(store, embedder)  # this model's, saved by an older release
        _same_model_or_switch(store, embedder.model, switch_model)
        queued = store.queue_for_model(embedder.model, batch=10_000)
        total = store.vector_backlog()
        with click.progressbar(length=total, label="embedding", file=sys.stderr) as bar:
            embedded = drain(store, embedder, batch, bar.update)
        set_aside = store.vectors_set_aside()  # refused by the endpoint: keyword search only
    done = {"ok": True, "model": embedder.model, "queued": queued, "embedded": embedded}
    _emit({**done, "set_aside": set_aside})


def _same_model_or_switch(store: Store, model: str, switch_model: bool) -> None:
    """Refuse to replace the vectors of another model (the server's, when this shell lacks its
    MNEMOS_EMBEDDER settings) unless told to: the server would find nothing by meaning, and
    nothing would queue the memories for its model again."""
    others = [held for held in store.vector_models() if held != model]
    if others and not switch_model:
        raise OtherModelIndexed(
            f"The database holds vectors of {', '.join(others)}, not of {model} "
            "(MNEMOS_EMBEDDER here): run reindex with the server's MNEMOS_EMBEDDER settings, "
            "or pass --switch-model to replace them with this model's",
            {"model": model, "indexed": others},
        )


@main.group()
def admin() -> None:
    """Operator commands; each prints one JSON object."""


def _admin_command(fn: Callable[..., None]) -> Callable[..., None]:
    return admin.command()(database_option(fn))


@_admin_command
@click.option("--name", required=True)
def create_org(name: str, database_url: str | None) -> None:
    """Create an organization (in a new database, too: the first command of a deployment)."""
    with _admin_store(database_url, create=True) as store:
        org = accounts.create_organization(store, name)
        _emit({"id": str(org.id)})


@_admin_command
@click.option("--name", required=True)
@click.option("--email", required=True)
@click.option("--org", "org_id", callback=_uuid, default=None)
def create_user(name: str, email: str, org_id: uuid.UUID | None, database_url: str | None) -> None:
    """Create a person (optionally in an organization; in a new database, too, for a
    deployment of people without one); prints their API key once."""
    with _admin_store(database_url, create=True) as store:
        issued = accounts.create_user(store, name, email, org_id)
        _emit({"id": str(issued.user.id), "api_key": issued.api_key})


@_admin_command
@click.option("--owner", "owner_id", callback=_uuid, required=True)
@click.option("--name", required=True)
@click.option("--description", default=None)
def create_agent(
    owner_id: uuid.UUID, name: str, description: str | None, database_url: str | None
) -> None:
    """Create an agent owned by a person; prints its API key once."""
    with _admin_store(database_url) as store:
        cap = load_settings(database_url=database_url).max_agents_per_user
        issued = accounts.create_agent(store, owner_id, name, description, max_agents=cap)
        _emit({"id": str(issued.agent.id), "api_key": issued.api_key})


@_admin_command
@click.option("--org", "org_id", callback=_uuid, default=None)
@click.option("--user", "user_id", callback=_uuid, default=None)
@click.option("--memory", type=click.Choice(["on", "off"]), required=True)
def set_plan(
    org_id: uuid.UUID | None, user_id: uuid.UUID | None, memory: str, database_url: str | None
) -> None:
    """Turn memory access on or off for an organization or a person."""
    if (org_id is None) == (user_id is None):
        raise click.UsageError("give exactly one of --org and --user")
    with _admin_store(database_url) as store:
        kind: Literal["organization", "user"] = "organization" if org_id else "user"
        target = org_id or user_id
        assert target is not None
        if not store.set_memory_enabled(kind, target, memory == "on"):
            raise NotFound(f"No such {kind}", {kind: str(target)})
        _emit({"ok": True})


@_admin_command
@click.option("--user", "user_id", callback=_uuid, required=True)
@click.option("--ttl", default=3600, show_default=True, type=int, help="Lifetime in seconds")
def create_token(user_id: uuid.UUID, ttl: int, database_url: str | None) -> None:
    """Issue a JWT for a person, accepted as `Authorization: Bearer`."""
    with _admin_store(database_url) as store:
        secret = load_settings(database_url=database_url).jwt_secret
        _emit({"token": accounts.issue_token(store, user_id, ttl, secret)})


@_admin_command
@click.option("--agent", "agent_id", callback=_uuid, default=None)
@click.option("--user", "user_id", callback=_uuid, default=None)
def rotate_key(
    agent_id: uuid.UUID | None, user_id: uuid.UUID | None, database_url: str | None
) -> None:
    """Give an agent or a person a new API key (printed once); the old one is refused at once."""
    if (agent_id is None) == (user_id is None):
        raise click.UsageError("give exactly one of --agent and --user")
    with _admin_store(database_url) as store:
        if agent_id is not None:
            key = accounts.rotate_agent_key(store, agent_id)
        else:
            assert user_id is not None
            key = accounts.rotate_user_key(store, user_id)
        _emit({"api_key": key})


@_admin_command
@click.option("--user", "user_id", callback=_uuid, required=True)
def revoke_tokens(user_id: uuid.UUID, database_url: str | None) -> None:
    """Refuse every bearer token issued to a person until now (their API key keeps working)."""
    with _admin_store(database_url) as store:
        revoked_at = accounts.revoke_tokens(store, user_id)
        _emit({"ok": True, "tokens_valid_after": iso(revoked_at)})


@_admin_command
@click.option("--org", "org_id", callback=_uuid, required=True)
def create_tuya_project(org_id: uuid.UUID, database_url: str | None) -> None:
    """Create Tuya cloud credentials for an organization (the secret is shown once)."""
    with _admin_store(database_url) as store:
        if store.get_organization(org_id) is None:
            raise NotFound("No such organization", {"org": str(org_id)})
        client_id, secret = new_project_credentials()
        store.create_tuya_project(client_id, secret, org_id)
        _emit({"client_id": client_id, "client_secret": secret})


@_admin_command
@click.option("--org", "org_id", callback=_uuid, required=True)
@click.option("--role-id", required=True, help="Tuya role id, as devices send it")
@click.option("--agent", "agent_id", callback=_uuid, required=True)
def bind_tuya_role(
    org_id: uuid.UUID, role_id: str, agent_id: uuid.UUID, database_url: str | None
) -> None:
    """Bind a Tuya role id to an agent of the organization."""
    with _admin_store(database_url) as store:
        found = store.agents_by_ids([agent_id])
        if not found or found[0][1] != org_id:
            raise NotFound("No such agent in this organization", {"agent": str(agent_id)})
        if not ROLE_ID.fullmatch(role_id):  # the API's rule, or no device could name it
            raise invalid_field("role-id", "must be 1-64 characters, none of them a control")
        store.bind_tuya_role(org_id, role_id, agent_id)
        _emit({"ok": True})


# --- people's rights (docs/privacy.md) ----------------------------------------------------------


def _services(store: Store, database_url: str | None) -> Services:
    from mnemos.api.app import build_services

    return build_services(load_settings(database_url=database_url), store)


@_admin_command
@click.option("--user", "user_id", callback=_uuid, required=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def export_subject(user_id: uuid.UUID, out: Path, database_url: str | None) -> None:
    """Write every memory about a person (every status, with history) to FILE as NDJSON, the
    same lines as their own export; a progress bar on a terminal. The file appears whole or not
    at all."""
    from mnemos.api.rights import encoded_lines
    from mnemos.cli_ops import whole_file

    with _admin_store(database_url) as store:
        rights = _services(store, database_url).rights
        ctx = rights.person(user_id)
        total = rights.count(ctx)
        exported = 0
        bar = click.progressbar(length=total, label="exporting", file=sys.stderr)
        shown = bar if sys.stderr.isatty() else nullcontext(bar)
        url = load_settings(database_url=database_url).resolved_database_url()
        with shown, whole_file(out, url) as file:
            for found, names in rights.export_encoded(ctx):
                file.writelines(encoded_lines([(found, names)]))
                exported += len(found.lines)
                if shown is bar:
                    bar.update(len(found.lines))
        _emit(
            {
                "user": str(user_id),
                "exported": exported,
                "out": str(out),
                "bytes": out.stat().st_size,
            }
        )


@_admin_command
@click.option("--user", "user_id", callback=_uuid, required=True)
@click.option("--yes", is_flag=True, help="Do not ask on a terminal")
def erase_subject(user_id: uuid.UUID, yes: bool, database_url: str | None) -> None:
    """Erase every memory about a person (every status, with history) at once; an erasure
    event without content remains. Running it again erases 0."""
    from mnemos.domain.history import by_operator

    with _admin_store(database_url) as store:
        rights = _services(store, database_url).rights
        ctx = rights.person(user_id)
        if sys.stdin.isatty() and not yes:
            click.confirm(f"Erase {rights.count(ctx)} memories about {user_id}?", abort=True)
        erasure = rights.erase(ctx, by_operator())
        _emit(
            {
                "user": str(user_id),
                "erased": erasure.erased,
                "erasure_id": str(erasure.id),
                "at": iso(erasure.at),
            }
        )


@_admin_command
@click.option("--org", "org_id", callback=_uuid, required=True)
@click.option("--system", type=click.Choice(["working", "sensory"]), required=True)
@click.option("--days", type=click.IntRange(0), required=True, help="0 keeps them for good")
def set_retention(org_id: uuid.UUID, system: str, days: int, database_url: str | None) -> None:
    """Keep an organization's working or sensory memories N days: the server then archives the
    expired ones (MNEMOS_RETENTION_INTERVAL_SECONDS)."""
    with _admin_store(database_url) as store:
        policy = _services(store, database_url).retention.set(org_id, system, days)
        _emit({"org": str(org_id), "system": policy.system.value, "days": policy.days})


@_admin_command
@click.option("--org", "org_id", callback=_uuid, required=True)
@click.option("--system", type=click.Choice(["working", "sensory"]), required=True)
def restore_expired(org_id: uuid.UUID, system: str, database_url: str | None) -> None:
    """Undo a wrong retention policy: make the organization's working or sensory memories that
    retention archived (and nobody changed since) active again. Correct the policy first."""
    from mnemos.domain.history import by_operator

    with _admin_store(database_url) as store:
        restored = _services(store, database_url).retention.restore(org_id, system, by_operator())
        _emit({"org": str(org_id), "system": system, "restored": restored})


register(main, database_option)  # export, import, backup, doctor (docs/operations.md)
