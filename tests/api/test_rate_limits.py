"""Per-caller rate limits: 429 with Retry-After, per key, shared across processes via Redis."""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
import redis
from fastapi.testclient import TestClient

from mnemos.api.app import create_app
from mnemos.config import Settings
from mnemos.domain.accounts import issue_token
from mnemos.ratelimit import WINDOW_SECONDS
from mnemos.storage.base import Store
from tests.api.asgi_calls import cut_body_request
from tests.api.test_band_agent import BASE, error
from tests.world import World

REDIS_URL = "redis://127.0.0.1:6379/0"


def in_one_window() -> None:
    """The limits count in fixed one-minute windows: a test that counts its requests starts in
    a fresh window when the current one ends within seconds (else the count restarts midway)."""
    left = WINDOW_SECONDS - time.time() % WINDOW_SECONDS
    if left < 5:
        time.sleep(left + 0.05)


def limited(settings: Settings, **extra: object) -> Settings:
    in_one_window()
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


ME = "/api/v1/me/profile"
SUPERAGENT = "/api/agents/{}/memory"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (BASE, "X-API-Key"),
        (BASE, "Authorization"),
        (BASE, "api_key"),
        (ME, "x-api-key"),
        (SUPERAGENT.format(uuid.uuid4()), "api_key"),
    ],
)
def test_repeated_credential_headers_are_refused(
    client: TestClient, world: World, path: str, name: str
) -> None:
    """One reader could take the first value and another the last: neither gets the chance."""
    agent = world.agent(world.user("Rae", "rl"))
    value = agent.api_key if name.lower() != "authorization" else f"Bearer {agent.api_key}"
    headers = [("X-API-Key", agent.api_key), (name, value), (name, value + "x")]
    if name.lower() == "x-api-key":
        headers = headers[1:]
    body = error(client.get(path, headers=headers), 400, "duplicate_header")
    assert body["details"] == {name.lower(): "repeated"}


def test_repeated_tuya_credential_header_gets_the_tuya_envelope(client: TestClient) -> None:
    headers = [("client_id", "a"), ("client_id", "b"), ("sign", "x"), ("t", "1")]
    answer = client.get("/v1.0/token", params={"grant_type": 1}, headers=headers)
    assert answer.status_code == 200
    assert answer.json()["success"] is False and answer.json()["code"] == 1109


def test_limit_follows_the_identity_not_the_headers(
    settings: Settings, store: Store, world: World
) -> None:
    """A header authentication ignores (`api_key` on Band), changed on every request, or a
    second credential form of the same person (key, then token) does not open a new bucket."""
    owner = world.user("Ria", "rl")
    agent = world.agent(owner)
    token = issue_token(store, uuid.UUID(owner.id), 60)
    with TestClient(create_app(limited(settings), store)) as client:
        for i in range(5):
            junk = {**agent.headers, "api_key": f"junk-{i}"}
            assert client.get(BASE, headers=junk).status_code == 200
        error(client.get(BASE, headers={**agent.headers, "api_key": "fresh"}), 429, "rate_limited")
        person = [
            client.get(ME, headers=owner.headers if i % 2 else {"Authorization": f"Bearer {token}"})
            for i in range(5)
        ]
        assert [r.status_code for r in person] == [200] * 5
        error(client.get(ME, headers=owner.headers), 429, "rate_limited")
        error(client.get(ME, headers={"Authorization": f"Bearer {token}"}), 429, "rate_limited")


def failures_limited(settings: Settings, **extra: object) -> Settings:
    in_one_window()
    return settings.model_copy(
        update={"rate_limit_per_minute": 1000, "auth_failures_per_minute": 3, **extra}
    )


def test_a_flood_of_invalid_keys_from_one_address_is_refused(
    settings: Settings, store: Store, world: World
) -> None:
    agent = world.agent(world.user("Rio", "rl"))
    app = create_app(failures_limited(settings), store)
    with TestClient(app) as client, TestClient(app, client=("10.0.0.2", 1)) as other:
        for i in range(3):
            error(client.get(BASE, headers={"X-API-Key": f"mn_agent_bad{i}"}), 401, "unauthorized")
        refused = error(
            client.get(BASE, headers={"X-API-Key": "mn_agent_bad9"}), 429, "rate_limited"
        )
        assert "failed authentications" in refused["message"]
        assert 1 <= int(client.get(ME, headers=agent.headers).headers["retry-after"]) <= 60
        # Refused before any lookup, whatever the credential: even a valid key from there ...
        error(client.get(BASE, headers=agent.headers), 429, "rate_limited")
        # ... while another address is unaffected.
        assert other.get(BASE, headers=agent.headers).status_code == 200


def test_an_ipv6_client_is_counted_by_its_64(settings: Settings, store: Store) -> None:
    """Every address of an IPv6 /64 is one client's for requests without a key (one per-minute
    limit). Failed keys count against the address and, at `IPV6_SITE_FAILURES` times the limit,
    against its /64: a flood spread over the /64's addresses meets that limit, while one
    address's failures do not lock out its neighbours (hosts that give customers single
    addresses of a shared /64)."""
    from mnemos.api.access import IPV6_SITE_FAILURES

    limit = 3  # failures_limited's
    app = create_app(failures_limited(settings), store)
    site = [TestClient(app, client=(f"2001:db8:7:7::{n:x}", 1)) for n in range(1, 41)]
    elsewhere = TestClient(app, client=("2001:db8:7:8::1", 1))
    bad = {"X-API-Key": "mn_agent_bad"}
    with contextlib.ExitStack() as stack:
        for client in [*site, elsewhere]:
            stack.enter_context(client)
        for _ in range(limit):
            error(site[0].get(BASE, headers=bad), 401, "unauthorized")
        refused = error(site[0].get(BASE, headers=bad), 429, "rate_limited")
        assert "failed authentications" in refused["message"]
        error(site[1].get(BASE, headers=bad), 401, "unauthorized")  # a neighbour is not refused
        # The rest of the /64's allowance, spread two failures an address.
        spread = iter(site[2:])
        for _ in range((limit * IPV6_SITE_FAILURES - limit - 1) // 2):
            client = next(spread)
            for _ in range(2):
                error(client.get(BASE, headers=bad), 401, "unauthorized")
        fresh = next(spread)
        if (limit * IPV6_SITE_FAILURES - limit - 1) % 2:
            error(fresh.get(BASE, headers=bad), 401, "unauthorized")
            fresh = next(spread)
        refused = error(fresh.get(BASE, headers=bad), 429, "rate_limited")  # the /64 is full
        assert "failed authentications" in refused["message"]
        error(elsewhere.get(BASE, headers=bad), 401, "unauthorized")  # another /64 is not
    app = create_app(limited(settings), store)
    site = [TestClient(app, client=(f"2001:db8:9:9::{n:x}", 1)) for n in range(1, 7)]
    with site[0], site[1], site[2], site[3], site[4], site[5]:
        answers = [client.get("/openapi.json").status_code for client in site]
    assert answers == [200] * 5 + [429]


def test_failed_tuya_signatures_count_too(settings: Settings, store: Store, world: World) -> None:
    org = world.org("rl-tuya")
    store.create_tuya_project("rl-client", "s" * 32, uuid.UUID(org))
    with TestClient(create_app(failures_limited(settings), store)) as client:
        bad = {"client_id": "rl-client", "sign": "BAD", "t": str(int(time.time() * 1000))}
        codes = [
            client.get("/v1.0/token", params={"grant_type": 1}, headers=bad).json()["code"]
            for _ in range(4)
        ]
        assert codes == [1004, 1004, 1004, 1110]


@pytest.mark.skipif(not redis_up(), reason="no Redis on 127.0.0.1:6379")
def test_failures_are_shared_through_redis(settings: Settings, store: Store) -> None:
    shared = failures_limited(
        settings, redis_url=REDIS_URL, redis_prefix=f"mnemos-test:{uuid.uuid4().hex}:"
    )
    bad = {"X-API-Key": "mn_agent_bad"}
    with TestClient(create_app(shared, store)) as one, TestClient(create_app(shared, store)) as two:
        assert [c.get(BASE, headers=bad).status_code for c in (one, one, two)] == [401] * 3
        error(two.get(BASE, headers=bad), 429, "rate_limited")  # two saw the third failure
        error(one.get(BASE, headers=bad), 401, "unauthorized")  # one learns at its next failure
        error(one.get(BASE, headers=bad), 429, "rate_limited")


def test_an_anonymous_request_past_the_limit_is_refused_before_its_body_is_read(
    settings: Settings, store: Store
) -> None:
    """An address past its limit is refused at once: the server does not first wait for, and
    hold, up to a mebibyte of the body of a request it is going to refuse."""
    with TestClient(create_app(limited(settings), store)) as client:
        for _ in range(5):
            client.get(BASE)  # anonymous: counted against the address
        assert client.get(BASE).status_code == 429
        sent = cut_body_request(client, BASE, [(b"content-length", b"1000000")])
        assert sent[0]["status"] == 429


def test_requests_no_route_takes_count_against_their_address(
    settings: Settings, store: Store
) -> None:
    """A credential header under `/api/` leaves the count to authentication, which a path no
    route serves (404) or a method it does not (405) never reaches: such requests, with a
    made-up key, met no per-minute limit at all. They count against their address."""
    app = create_app(limited(settings), store)
    with TestClient(app) as client, TestClient(app, client=("10.0.0.3", 1)) as other:
        made_up = {"X-API-Key": "mn_agent_made_up"}
        answers = [client.get("/api/v1/nowhere", headers=made_up) for _ in range(3)]
        answers += [client.put(BASE, headers=made_up) for _ in range(2)]
        assert [r.status_code for r in answers] == [404] * 3 + [405] * 2
        assert answers[-1].headers["x-ratelimit-remaining"] == "0"
        refused = client.get("/api/v1/nowhere", headers=made_up)
        error(refused, 429, "rate_limited")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert other.get("/api/v1/nowhere", headers=made_up).status_code == 404


TUYA_DEVICE = "/v1.0/cloud/agent/ai/chat/b/devices/dev1/memories"


@pytest.mark.parametrize("path", [TUYA_DEVICE, "/ui/memories", "/ui/nowhere"])
def test_an_address_past_its_limit_is_refused_in_the_paths_shape(
    settings: Settings, store: Store, path: str
) -> None:
    """The address's per-minute refusal is Tuya's envelope on Tuya's paths (HTTP 200, 1110:
    the official connector reads nothing else) and the error page on the page's paths, as the
    address's in-flight refusal is; it was the API's JSON everywhere."""
    with TestClient(create_app(limited(settings), store)) as client:
        for _ in range(5):
            client.get(path)  # no credential: counted against the address
        refused = client.get(path)
    if path.startswith("/v1.0/"):
        assert refused.status_code == 200
        assert (refused.json()["success"], refused.json()["code"]) == (False, 1110)
    else:
        assert refused.status_code == 429
        assert refused.headers["content-type"].startswith("text/html")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
