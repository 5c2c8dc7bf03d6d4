"""schemathesis's own object-level authorization check, run by its CLI against a live server.

Two tenants per API family are listed as Web Fuzzing Commons users and as `peers`: schemathesis
replays every successful read of one tenant's object as the other and fails on any leak. Each
family runs separately because each takes its own kind of credential.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live.conftest import LiveServer, start_server, stop_server
from tests.world import memory_body

FAMILIES = {
    "agent": ("^/api/v1/agent/", "X-API-Key", "agent"),
    "human": ("^/api/v1/me/", "X-API-Key", "person"),
    "superagent": ("^/api/agents/", "api_key", "person"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("ola")
    # Schemathesis sends many requests without credentials (its missing-header checks): the
    # per-address limit on failed authentications would answer them 429 instead of 401.
    live = start_server(
        f"sqlite:///{tmp / 'ola.db'}", tmp, settings={"MNEMOS_AUTH_FAILURES_PER_MINUTE": "100000"}
    )
    yield live
    stop_server(live)


def test_no_tenant_reads_another_tenants_objects(server: LiveServer, tmp_path: Path) -> None:
    import httpx

    tenants = {}
    for name in ("alice", "bob"):
        org = server.admin("create-org", "--name", name)["id"]
        person = server.admin(
            "create-user", "--name", name, "--email", f"{name}@ola.test", "--org", org
        )
        agent = server.admin("create-agent", "--owner", person["id"], "--name", f"{name} bot")
        for fields in ({}, {"scope": "organization"}, {"subject_id": person["id"]}):
            stored = httpx.post(
                f"{server.base_url}/api/v1/agent/memories",
                json=memory_body(f"{name} secret", **fields),
                headers={"X-API-Key": agent["api_key"]},
            )
            assert stored.status_code == 201
        tenants[name] = {"agent": agent["api_key"], "person": person["api_key"]}
    tool = Path(sys.executable).parent / "schemathesis"
    for family, (paths, header, kind) in FAMILIES.items():
        users = [
            {"name": name, "fixedHeaders": [{"name": header, "value": keys[kind]}]}
            for name, keys in tenants.items()
        ]
        (tmp_path / f"{family}.json").write_text(json.dumps({"auth": users}))
        config = tmp_path / f"{family}.toml"
        config.write_text(
            f'[auth.wfc]\npath = "{tmp_path / f"{family}.json"}"\npeers = ["alice", "bob"]\n'
        )
        done = subprocess.run(
            [
                str(tool),
                "--config-file",
                str(config),
                "run",
                f"{server.base_url}/openapi.json",
                "--include-path-regex",
                paths,
                "-n",
                "10",
                # cross-field rules and ignored extras: see tests/test_openapi_fuzz.py
                "--exclude-checks",
                "positive_data_acceptance,negative_data_rejection",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,  # schemathesis keeps its cache in ./.schemathesis
        )
        assert done.returncode == 0, (family, done.stdout[-4000:])
        assert "passed" in done.stdout
