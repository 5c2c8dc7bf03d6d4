"""Alembic environment: runs on the connection Mnemos hands it, or on `sqlalchemy.url`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from mnemos.storage.schema import metadata

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
    with engine.connect() as conn:
        _run(conn)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("Mnemos migrations run online only: use `mnemos migrate`.")
run_migrations_online()
