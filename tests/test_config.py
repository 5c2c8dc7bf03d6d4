"""Settings refuse what would be unsafe or meaningless."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mnemos.config import Settings, load_settings


def test_short_jwt_secret_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 32 bytes"):
        Settings(jwt_secret="too-short")
    assert Settings(jwt_secret="x" * 32).jwt_secret == "x" * 32


def test_unknown_synchronous_mode_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(sqlite_synchronous="SOMETIMES")


def test_environment_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOS_DATABASE_URL", "sqlite:////tmp/from-env.db")
    monkeypatch.setenv("MNEMOS_RATE_LIMIT_PER_MINUTE", "7")
    assert load_settings().resolved_database_url() == "sqlite:////tmp/from-env.db"
    assert load_settings(database_url="sqlite:////tmp/x.db").database_url == "sqlite:////tmp/x.db"
    assert load_settings().rate_limit_per_minute == 7
    monkeypatch.delenv("MNEMOS_DATABASE_URL")
    monkeypatch.setenv("MNEMOS_DATA_DIR", "/tmp/mnemos-data")
    assert load_settings().resolved_database_url() == "sqlite:////tmp/mnemos-data/mnemos.db"


def test_worker_threads_follow_the_backend_unless_set() -> None:
    assert Settings(database_url="sqlite:///x.db").resolved_worker_threads() == 2
    assert Settings(database_url="postgresql://h/db").resolved_worker_threads() == 1
    assert Settings(database_url="").resolved_worker_threads() == 2  # the embedded default
    assert (
        Settings(database_url="postgresql://h/db", worker_threads=4).resolved_worker_threads() == 4
    )
    with pytest.raises(ValidationError):
        Settings(worker_threads=-1)
