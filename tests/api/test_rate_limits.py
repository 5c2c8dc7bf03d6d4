"""Per-caller rate limits: 429 with Retry-After, per key, shared across processes via Redis."""

from __future__ import annotations

import uuid

import pytest
import redis
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.storage.base import Store
from tests.api.test_band_agent import BASE, error
from tests.world import World

REDIS_URL = "redis://127.0.0.1:6379/0"


def limited(settings: Settings, **extra: object) -> Settings:
    return settings.model_copy(update={"rate_limit_per_minute": 5, **extra})


def test_in_process_limit(settings: Settings, store: Store, world: World) -> None:
    a, b = world.agent(world.user("Ray", "rl")), world.agent(world.user("Roy", "rl"))
    with TestClient(create_app(limited(settings), store)) as client:
        answers = [client.get(BASE, headers=a.headers) for _ in range(5)]
        assert [r.status_code for r in answers] == [200] * 5
        assert answers[-1].headers["x-ratelimit-remaining"] == "0"
        refused = client.get(BASE, headers=a.headers)
        error(refused, 429, "rate_limited")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert client.get(BASE, headers=b.headers).status_code == 200  # another key is unaffected
        assert all(client.get("/healthz").status_code == 200 for _ in range(10))


def redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@pytest.mark.skipif(not redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_limit_is_shared_through_redis(settings: Settings, store: Store, world: World) -> None:
    agent = world.agent(world.user("Rex", "rl"))
    shared = limited(settings, redis_url=REDIS_URL, redis_prefix=f"mnemos-test:{uuid.uuid4().hex}:")
    with TestClient(create_app(shared, store)) as one, TestClient(create_app(shared, store)) as two:
        codes = [c.get(BASE, headers=agent.headers).status_code for c in (one, two, one, two, one)]
        assert codes == [200] * 5
        error(two.get(BASE, headers=agent.headers), 429, "rate_limited")
        error(one.get(BASE, headers=agent.headers), 429, "rate_limited")


def test_redis_outage_fails_open(settings: Settings, store: Store, world: World) -> None:
    agent = world.agent(world.user("Rob", "rl"))
    broken = limited(settings, redis_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(broken, store)) as client:
        assert all(client.get(BASE, headers=agent.headers).status_code == 200 for _ in range(7))
