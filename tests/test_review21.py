"""Twelfth hostile review (review21): what an operator and a newcomer touch (the commands, the
settings, starting a server).

Each test states the behaviour the finding asks for and is a strict xfail: it fails today for the
finding's reason (docs/decisions.md, "A hostile review of operations and the newcomer's path").
The commands run as operators run them: `python -m mnemos ...` in a subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from mnemos.config import Settings
from mnemos.storage import open_store
from mnemos.storage.base import Store
from tests.world import World

STARTED_WITHIN = 120.0  # seconds a server gets to start on a busy shared machine (not a measure)
UNREACHABLE_PG = "postgresql://mnemos@127.0.0.1:1/mnemos"  # nothing listens on port 1


def mnemos(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemos", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MNEMOS_EMBEDDER": "none", **(env or {})},
    )


def refused_in_one_json_line(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The documented refusal: exit 1, nothing on stdout, `{"error": ...}` on stderr, no
    traceback (docs/operations.md)."""
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout)
    error: dict[str, object] = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    return error


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def served(db: Path, port: int, *extra: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`mnemos serve` on `db` at `port`, stopped (SIGTERM, as an operator) when the block ends."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "mnemos", "serve", "--port", str(port), *extra]
            + ["--database-url", f"sqlite:///{db}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MNEMOS_EMBEDDER": "none"},
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def answering(port: int, process: subprocess.Popen[bytes]) -> None:
    """Wait until the server at `port` answers /healthz (a condition, with a deadline)."""
    deadline = time.monotonic() + STARTED_WITHIN
    while True:
        assert process.poll() is None, "the server stopped"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


# --- 2. a second `serve --workers` joins the port of a running one --------------------------------


def test_a_second_server_with_workers_is_refused_the_port_of_a_running_one(
    tmp_path: Path,
) -> None:
    """`serve_many` probes the address with a socket that sets SO_REUSEPORT, and every worker
    binds with it: a second deployment started on the same port by mistake (a staging copy, an
    old version left running, another database) joins the first's group, and every client's
    connections are spread over both. Each answers with its own database: a key is refused
    every other request, and writes are acknowledged into the wrong database."""
    port = free_port()
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    for db in (ours, theirs):
        assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    with served(ours, port, "--workers", "2", log=tmp_path / "ours.log") as first:
        answering(port, first)
        log = tmp_path / "theirs.log"
        with served(theirs, port, "--workers", "2", log=log) as second:
            deadline = time.monotonic() + STARTED_WITHIN
            # Refused: it ends. Joined: both its workers start serving on the port.
            while second.poll() is None and log.read_text().count("startup complete") < 2:
                assert time.monotonic() < deadline, "the second server neither ended nor started"
                time.sleep(0.2)
            assert second.poll() is not None, "the second server serves the port too"
            assert second.returncode != 0
            said = log.read_text()
            assert "Traceback" not in said and f"cannot listen on 127.0.0.1:{port}" in said, said
        assert first.poll() is None


# --- 6. settings the server cannot run with: a traceback, not the variable ------------------------


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        ("serve", "MNEMOS_DB_POOL_SIZE", "eight"),
        ("serve", "MNEMOS_LOG_LEVEL", "verbose"),
        ("migrate", "MNEMOS_RATE_LIMIT_PER_MINUTE", "-1"),
        ("admin", "MNEMOS_JWT_SECRET", "short"),
        ("serve", "MNEMOS_JWKS_FILE", "/nonexistent/jwks.json"),
        ("serve", "MNEMOS_EMBEDDER", "http://127.0.0.1:1"),  # a URL needs MNEMOS_EMBEDDER_MODEL
    ],
)
def test_a_bad_setting_is_one_line_naming_its_variable(
    tmp_path: Path, command: str, variable: str, value: str
) -> None:
    """README: every setting is a `MNEMOS_*` variable; an operator who mistyped one is told by
    a pydantic traceback about `db_pool_size`, or (found only once the app starts, after the
    migrations ran) a `FileNotFoundError` traceback from uvicorn's lifespan, exit 3."""
    db = tmp_path / "mnemos.db"
    assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    args = {
        "serve": ("serve", "--port", str(free_port())),
        "migrate": ("migrate",),
        "admin": ("admin", "create-org", "--name", "Acme"),
    }[command]
    done = mnemos(*args, "--database-url", f"sqlite:///{db}", env={variable: value}, timeout=180)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert variable in done.stderr, done.stderr[-600:]


@pytest.mark.parametrize(
    "env",
    [
        {"MNEMOS_EMBEDDER": "http://127.0.0.1:1"},
        {"MNEMOS_JWKS_FILE": "/nonexistent/jwks.json"},
    ],
)
def test_doctor_finds_the_settings_serve_refuses(tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "mnemos.db"
    assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    done = mnemos("doctor", "--json", "--database-url", f"sqlite:///{db}", env=env)
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["configuration"]["level"] == "problem", found["configuration"]
    assert done.returncode == 1


# --- 8. a database URL that is wrong: tracebacks from every command but doctor ---------------


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("migrate", "--database-url", "mysql://mnemos@db/mnemos"), {}),
        (("admin", "create-org", "--name", "A", "--database-url", "postgress://h/mnemos"), {}),
        (("admin", "create-org", "--name", "A", "--database-url", "{tmp}/mnemos.db"), {}),
        (("admin", "create-org", "--name", "A", "--database-url", UNREACHABLE_PG), {}),
        (("migrate", "--database-url", UNREACHABLE_PG), {}),
        (("export", "--out", "{tmp}/all.ndjson", "--database-url", UNREACHABLE_PG), {}),
        (("admin", "create-org", "--name", "A"), {"MNEMOS_DATA_DIR": "{tmp}/a-file"}),
    ],
)
def test_a_wrong_database_is_refused_in_the_json_shape(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    """docs/operations.md: every command prints one JSON object, and a refusal is
    `{"error": ...}` on stderr with exit 1. `doctor` names each of these (review14's finding 5
    fixed it there), but `migrate`, `admin` and `export` end in `ValueError`,
    `sqlalchemy.exc.OperationalError` or `FileExistsError` tracebacks."""
    (tmp_path / "a-file").write_text("not a directory")
    done = mnemos(
        *(arg.replace("{tmp}", str(tmp_path)) for arg in args),
        env={key: value.replace("{tmp}", str(tmp_path)) for key, value in env.items()},
    )
    refused_in_one_json_line(done)


@pytest.mark.parametrize("case", ["unreachable", "busy_port_workers", "log_level"])
def test_serve_refuses_what_it_cannot_start_with_in_one_line(tmp_path: Path, case: str) -> None:
    """One worker on a busy port says so in one line (uvicorn's "address already in use", exit
    3); `--workers 2` on the same port, a PostgreSQL that does not answer, and
    `--log-level verbose` (after the migrations ran) print Python tracebacks."""
    db = f"sqlite:///{tmp_path / 'mnemos.db'}"
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        args = {
            "unreachable": ("--port", str(free_port()), "--database-url", UNREACHABLE_PG),
            "busy_port_workers": ("--port", str(busy), "--workers", "2", "--database-url", db),
            "log_level": (
                "--port",
                str(free_port()),
                "--log-level",
                "verbose",
                "--database-url",
                db,
            ),
        }[case]
        done = mnemos("serve", *args, timeout=180)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-600:]


def test_mcp_refuses_an_unknown_log_level_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "mnemos.db"
    assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    done = mnemos(
        "mcp",
        "--api-key",
        "mn_agent_x",
        "--log-level",
        "verbose",
        "--database-url",
        f"sqlite:///{db}",
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-600:]


# --- 5. PostgreSQL: what docs/deploying.md says transaction pooling may rely on ---------------


def test_a_process_holds_at_most_four_times_the_pool_size_on_the_primary(
    settings: Settings,
) -> None:
    """docs/deploying.md, "Connection pooling" (review21 finding 5, corrected there): size
    `max_connections` for `processes x 4 x pool size`: two pools on the primary (reads and
    writes; searches), each of `MNEMOS_DB_POOL_SIZE` with as many again in overflow. A pool
    added to the store must come with the arithmetic corrected."""
    if settings.database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's connections only")
    three = settings.model_copy(update={"db_pool_size": 3})
    store: Store = open_store(three)
    try:
        engines = [
            getattr(store, name)
            for name in vars(store)
            if name.endswith("_engine") and getattr(store, name) is not None
        ]
        pools = {id(engine.pool): engine.pool for engine in engines}
        assert sum(pool.size() + pool._max_overflow for pool in pools.values()) == 4 * 3
    finally:
        store.close()


# --- 1. `export --out` / `admin export-subject --out` the database itself -------------------------


@pytest.mark.parametrize("suffix", ["", "-wal"])
@pytest.mark.parametrize("command", ["export", "export-subject"])
def test_an_export_into_the_database_file_is_refused(
    tmp_path: Path, command: str, suffix: str
) -> None:
    """review10 made `mnemos backup --out` refuse the database's own files (by path or inode);
    the two exports write `FILE.partial` and rename it over `--out` just the same
    (`cli_ops.whole_file`), so `--out ~/.local/share/mnemos/mnemos.db` (a tab completion, a
    script's variable) replaces the database with a file of NDJSON (the whole export) or an
    empty one (the person's, with nothing about them): the organization and the person are
    gone, and a server running on it goes on with the unlinked file until its restart."""
    db = tmp_path / "mnemos.db"
    url = f"sqlite:///{db}"
    org = json.loads(mnemos("admin", "create-org", "--name", "Acme", "--database-url", url).stdout)
    person = mnemos(
        *("admin", "create-user", "--name", "Ann", "--email", "ann@acme.test"),
        *("--org", org["id"], "--database-url", url),
    )
    user = json.loads(person.stdout)["id"]
    out = str(db) + suffix
    args = {
        "export": ("export", "--out", out),
        "export-subject": ("admin", "export-subject", "--user", user, "--out", out),
    }[command]
    done = mnemos(*args, "--database-url", url)
    error = refused_in_one_json_line(done)
    assert error["code"] == "cannot_write" and "database" in str(error["message"])
    assert not Path(out + ".partial").exists()  # refused before anything was written
    store = open_store(Settings(database_url=url))
    try:
        assert store.get_organization(uuid.UUID(org["id"])) is not None
    finally:
        store.close()


def test_reindex_with_an_endpoint_that_does_not_answer_is_the_json_refusal(tmp_path: Path) -> None:
    db = tmp_path / "mnemos.db"
    assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    done = mnemos(
        "reindex",
        "--database-url",
        f"sqlite:///{db}",
        env={"MNEMOS_EMBEDDER": "http://127.0.0.1:1", "MNEMOS_EMBEDDER_MODEL": "m"},
    )
    assert refused_in_one_json_line(done)["code"] == "embedder_unavailable"


# --- 3. `mnemos reindex` from a shell without the server's embedder settings ----------------------


def test_a_reindex_under_another_model_leaves_the_servers_search_by_meaning(
    settings: Settings, store: Store, world: World, database_url: str
) -> None:
    """README: the admin commands "must name the same [database] as the server"; nothing says
    the same of `MNEMOS_EMBEDDER*`, and `reindex` reads them from its own shell. Run there
    without the server's endpoint settings (the README's `. .venv/bin/activate`, then
    `mnemos reindex`), `queue_for_model` deletes every chunk of any other model at its start,
    the server's included, and embeds everything with the local model, which the server never
    reads. The server's worker only drains the queue, so its semantic search stays empty (and
    hybrid ranks by words alone) until someone reindexes with the server's settings."""
    from mnemos.api.app import create_app
    from mnemos.embedding import load_embedder
    from mnemos.indexer import drain
    from tests.test_recall import AISLE, QUESTION, Renamed, put, search

    local = load_embedder("local")
    assert local is not None
    served_model = Renamed(local, "the-servers-endpoint-model")
    ann = world.user("Ann", "acme")
    bot = world.agent(ann)
    with TestClient(create_app(settings, store, served_model)) as client:
        stored = put(client, bot, AISLE)
        drain(store, served_model, 64, lambda _n: None)
        assert [row["id"] for row in search(client, bot, mode="semantic")["data"]] == [stored]
    # The server stopped meanwhile, so that its worker does not race the command for the queue
    # (running, it would take some of the queued memories back under its model: a mix).
    done = mnemos("reindex", "--database-url", database_url, env={"MNEMOS_EMBEDDER": "local"})
    error = refused_in_one_json_line(done)  # the fix: refused, naming the models and the setting
    assert error["code"] == "other_model_indexed" and "MNEMOS_EMBEDDER" in str(error["message"])
    assert error["details"] == {"model": local.model, "indexed": [served_model.model]}
    drain(store, served_model, 64, lambda _n: None)  # whatever the server's worker would do
    with TestClient(create_app(settings, store, served_model)) as client:
        found = search(client, bot, QUESTION, mode="semantic")["data"]
        assert [row["id"] for row in found] == [stored]
    # Told to switch, it replaces the server's vectors with its model's (the documented switch).
    switched = mnemos(
        *("reindex", "--switch-model", "--database-url", database_url),
        env={"MNEMOS_EMBEDDER": "local"},
    )
    assert switched.returncode == 0, switched.stderr[-600:]
    assert json.loads(switched.stdout)["embedded"] == 1
    assert store.vector_models() == [local.model]


# --- 4. an older Mnemos against a schema a newer one migrated (the documented rolling upgrade) ----

NEWER = "9999_from_a_newer_mnemos"


def _migrated_by_a_newer_mnemos(db: Path) -> None:
    """A database a newer Mnemos migrated, as this (older) one sees it: at a revision it does
    not know (the schema itself is this one's: the newer one's migrations are additive)."""
    import sqlite3

    assert mnemos("migrate", "--database-url", f"sqlite:///{db}").returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (NEWER,))


@pytest.mark.parametrize("case", ["serve", "admin", "migrate", "mcp", "doctor"])
def test_an_older_mnemos_on_a_newer_schema(tmp_path: Path, case: str) -> None:
    """docs/deploying.md, "Upgrades": run `mnemos migrate` once with the new version, "then
    restart the processes one by one ... old processes keep working against the new schema
    during a rolling restart". But `serve` migrates at start, and alembic's upgrade from a
    revision it cannot locate raises: an old process that restarts meanwhile (systemd after a
    crash, a machine not yet upgraded, autoscaling from the old image) does not come back,
    every operator command of the old install is a traceback, and `doctor` says "run `mnemos
    migrate`", which fails the same way."""
    db = tmp_path / "mnemos.db"
    _migrated_by_a_newer_mnemos(db)
    url = f"sqlite:///{db}"
    newer = f"migrated by a newer Mnemos (revision {NEWER}): upgrade Mnemos"
    # The fix (docs/deploying.md, "Upgrades"): refused in one line naming the revision, exit 1;
    # serving a schema whose changes this Mnemos cannot know is not safe.
    if case == "serve":
        done = mnemos("serve", "--port", str(free_port()), "--database-url", url, timeout=180)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-600:]
        assert newer in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        return
    if case in ("admin", "migrate", "mcp"):
        if case == "mcp":
            from mnemos.mcp import sdk_installed

            if not sdk_installed():
                pytest.skip("the MCP SDK is not installed")
        args = {
            "admin": ("admin", "create-org", "--name", "Acme"),
            "migrate": ("migrate",),
            "mcp": ("mcp", "--api-key", "mn_agent_x"),
        }[case]
        error = refused_in_one_json_line(mnemos(*args, "--database-url", url))
        assert error["code"] == "schema_newer" and newer in str(error["message"])
        return
    done = mnemos("doctor", "--json", "--database-url", url)
    assert done.returncode == 1
    found = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["migrations"]["level"] == "problem" and newer in found["migrations"]["detail"]
    assert "mnemos migrate" not in found["migrations"]["detail"], found["migrations"]
