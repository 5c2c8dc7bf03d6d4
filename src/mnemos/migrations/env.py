"""Alembic environment: runs on the connection Mnemos hands it, or on `sqlalchemy.url`.

A whole upgrade is one transaction on both backends: stopped anywhere (a kill, a full disk, a
statement refused), it leaves the schema and `alembic_version` as they were, and the next
`mnemos migrate` runs it again. PostgreSQL's DDL is transactional and Alembic says so; SQLite's is
too, but pysqlite commits a schema change on its own (it opens a transaction only before an
INSERT, UPDATE or DELETE), so on SQLite the transaction is ours: `BEGIN IMMEDIATE`, as the
store's. Hence no migration may change what SQLite cannot change inside a transaction
(`PRAGMA foreign_keys` and `journal_mode` are ignored there, `VACUUM` refused): none does.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

from mnemos.storage.schema import metadata
from mnemos.storage.sqlite_engine import begin_explicitly

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    if engine.dialect.name == "sqlite":
        begin_explicitly(engine, "BEGIN IMMEDIATE")
    with engine.connect() as conn:
        _run(conn)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
        transactional_ddl=True,  # SQLite's too (above); Alembic assumes not
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("Mnemos migrations run online only: use `mnemos migrate`.")
run_migrations_online()
