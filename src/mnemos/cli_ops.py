"""`mnemos export | import | backup | doctor`: operating a Mnemos database (docs/operations.md).

Each prints one JSON object on stdout when it is done (doctor: its findings), and refusals as
`{"error": {...}}` on stderr with exit code 1. Progress bars go to stderr, on a terminal only
unless `--progress` asks for them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import click
import sqlalchemy as sa

from mnemos.config import load_settings
from mnemos.errors import CannotWrite, MnemosError, StorageUnavailable, SystemRefused
from mnemos.storage import known_revision, require_database
from mnemos.storage import migrate as run_migrations

progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar on stderr (default: when stderr is a terminal).",
)


def _emit(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload))


@contextmanager
def refusals() -> Iterator[None]:
    """A refusal as one `{"error": ...}` line on stderr, exit 1 (docs/operations.md). Wraps
    every command (`cli.main`); besides Mnemos's own errors, what the host refuses: a database
    that does not answer or refuses the role, a directory, file or address the system denies."""
    try:
        yield
    except MnemosError as exc:
        _refuse(exc)
    except sa.exc.OperationalError as exc:
        reason = " ".join(str(exc.orig or exc).split())[:300]
        _refuse(StorageUnavailable(f"The database cannot be reached: {reason}", {"reason": reason}))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = {"path": str(exc.filename)} if exc.filename is not None else {}
        _refuse(SystemRefused(f"{reason}: {exc.filename}" if where else reason, where or None))


def _refuse(exc: MnemosError) -> None:
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.details is not None:
        error["details"] = exc.details
    click.echo(json.dumps({"error": error}), err=True)
    sys.exit(1)


@contextmanager
def whole_file(out: Path, database_url: str) -> Iterator[BinaryIO]:
    """`out`, written as `out.partial` and renamed once the block ends without an error, so the
    file appears whole or not at all; one that cannot be opened, or that is the database at
    `database_url` or one of its files (the rename would replace it), is `CannotWrite`, before
    anything is written."""
    from mnemos.storage.backup import is_a_file_of

    if is_a_file_of(out, database_url):
        raise CannotWrite(
            "The output would replace the database (or one of its own files): choose another --out",
            {"out": str(out)},
        )
    partial = out.with_name(out.name + ".partial")
    try:
        file = partial.open("wb")
    except OSError as exc:
        raise CannotWrite(details={"out": str(out), "reason": exc.strerror or str(exc)}) from None
    try:
        with file:
            yield file
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)


@contextmanager
def _bar(show: bool | None, unit: str, total: int | None) -> Iterator[Any]:
    from tqdm import tqdm  # type: ignore[import-untyped]

    visible = sys.stderr.isatty() if show is None else show
    bar = tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        disable=not visible,
        file=sys.stderr,
        mininterval=0.5,
        dynamic_ncols=True,
    )
    try:
        yield bar
    finally:
        bar.close()


def _url(database_url: str | None) -> str:
    return load_settings(database_url=database_url).resolved_database_url()


def _check_revision(url: str, revision: str | None) -> None:
    """Refuse a file written by a Mnemos whose schema this one does not know."""
    from mnemos.storage.transfer import TransferError

    if revision is None or not known_revision(url, revision):
        raise TransferError(
            f"The file comes from schema revision {revision!r}, unknown to this Mnemos: "
            "upgrade Mnemos to import it",
            {"revision": revision},
        )


def register(main: click.Group, database_option: Callable[[Any], Any]) -> None:
    """Add the operations commands to the `mnemos` group."""
    for command in (export, import_, backup, doctor):
        main.add_command(database_option(command))


@click.command()
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@progress_option
def export(out: Path, progress: bool | None, database_url: str | None) -> None:
    """Write the whole database as versioned NDJSON (one consistent snapshot)."""
    from mnemos.storage.transfer import export_database

    settings = load_settings(database_url=database_url)
    url = settings.resolved_database_url()
    started = time.perf_counter()
    totals: dict[str, int] = {}
    with refusals():
        require_database(settings)
    with refusals(), whole_file(out, url) as file, _bar(progress, "rows", None) as bar:

        def step(rows: int) -> None:
            if bar.total is None:  # the tables were counted before the first rows came
                bar.total = sum(totals.values())
            bar.update(rows)

        summary = export_database(url, file, step, totals)
    seconds = time.perf_counter() - started
    _emit({"ok": True, "out": str(out), **summary.as_json(), "seconds": round(seconds, 3)})


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--merge",
    is_flag=True,
    help="Import into a database that holds data: rows whose id exists are skipped (and counted).",
)
@progress_option
def import_(file: Path, merge: bool, progress: bool | None, database_url: str | None) -> None:
    """Load an export into this database (created or migrated first) in one transaction."""
    from mnemos.storage.transfer import check_header
    from mnemos.storage.transfer_import import import_database

    settings = load_settings(database_url=database_url)
    url = settings.resolved_database_url()
    started = time.perf_counter()
    with refusals():
        with file.open("rb") as handle:
            found = check_header(handle.readline())
        _check_revision(url, found.get("revision"))
        run_migrations(settings)
        with file.open("rb") as handle, _bar(progress, "B", file.stat().st_size) as bar:
            summary = import_database(url, handle, merge=merge, progress=bar.update)
    seconds = time.perf_counter() - started
    rows = summary.as_json()
    rate = rows["rows"] / seconds if seconds else 0.0
    _emit({"ok": True, **rows, "seconds": round(seconds, 3), "rows_per_second": round(rate)})


@click.command()
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def backup(out: Path, database_url: str | None) -> None:
    """Copy a SQLite database while it serves (online backup API), then check the copy.

    For PostgreSQL use pg_dump (docs/operations.md)."""
    from mnemos.storage.backup import BackupFailed, backup_sqlite, sqlite_path

    with refusals():
        path = sqlite_path(_url(database_url))
        if path is None:
            raise BackupFailed(
                "mnemos backup copies SQLite databases; for PostgreSQL use pg_dump "
                "(docs/operations.md)"
            )
        _emit(backup_sqlite(path, out))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of lines.")
def doctor(as_json: bool, database_url: str | None) -> None:
    """Check configuration, database, migrations, search index and clock; exit 1 on a problem."""
    from mnemos.doctor import examine

    findings = examine(database_url=database_url)
    failed = any(finding.level == "problem" for finding in findings)
    if as_json:
        _emit({"ok": not failed, "findings": [finding.as_json() for finding in findings]})
    else:
        for finding in findings:
            click.echo(f"{finding.level:<8} {finding.check:<14} {finding.detail}")
    sys.exit(1 if failed else 0)
