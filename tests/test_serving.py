"""The server is configured from settings: connection deadlines, head limits, no socket cap."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mnemos import serving
from mnemos.config import Settings, load_settings
from mnemos.http_guard import ConnectionLimits, GuardedHttpToolsProtocol


def test_connection_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOS_HEADER_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("MNEMOS_BODY_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("MNEMOS_KEEP_ALIVE_SECONDS", "3")
    monkeypatch.setenv("MNEMOS_MAX_HEADER_BYTES", "65536")
    monkeypatch.setenv("MNEMOS_MAX_HEADER_LINE_BYTES", "4096")
    config = serving.server_config(load_settings(), "warning")
    assert isinstance(config.http, type) and issubclass(config.http, GuardedHttpToolsProtocol)
    assert config.http.limits == ConnectionLimits(2.5, 7.0, 65536, 4096)
    assert config.timeout_keep_alive == 3
    assert config.limit_concurrency is None  # idle sockets must not count: see max_in_flight


def test_defaults_are_a_few_seconds_and_tens_of_kib() -> None:
    limits = ConnectionLimits.from_settings(Settings())
    assert limits == ConnectionLimits(5.0, 10.0, 32 * 1024, 8 * 1024)
    assert Settings().max_in_flight == 1000


@pytest.mark.parametrize(
    "field",
    ["header_timeout_seconds", "body_timeout_seconds", "keep_alive_seconds", "max_in_flight"],
)
def test_a_limit_cannot_be_switched_off_with_zero(field: str) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: 0})  # type: ignore[arg-type]
