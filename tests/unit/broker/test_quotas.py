"""Client and user quotas (broker/quotas.py): KIP-55's precedence and budgets, the empty client id, who is exempt,
and the hot path when nothing is configured. Pure logic, plus the middleware on a small in-process app."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker import quotas as q
from broker.metadata.cache import MetadataCache
from broker.quotas import DEFAULT, FETCH, PRODUCE, REQUEST, ClientQuotaManager, user_client_entity
from broker.security.authorizer import ANONYMOUS, Acl
from broker.security.middleware import PRINCIPAL_KEY, SECURITY, SecurityService
from broker.security.settings import SecuritySettings, parse_listeners

# The eight levels, most specific first, with a distinct rate each so the match tells which one won.
LEVELS: list[tuple[tuple[str, str], str]] = [
    (user_client_entity("alice", "app"), "user+client"),
    (user_client_entity("alice", DEFAULT), "user+default-client"),
    (("users", "alice"), "user"),
    (user_client_entity(DEFAULT, "app"), "default-user+client"),
    (user_client_entity(DEFAULT, DEFAULT), "default-user+default-client"),
    (("users", DEFAULT), "default-user"),
    (("clients", "app"), "client"),
    (("clients", DEFAULT), "default-client"),
]
# Whose budget each level spends (Kafka's metric tags): user-level quotas are shared by the user's clients,
# client-level ones by every user of the client id, the others are per (user, client id).
BUDGETS = [("alice", "app"), ("alice", "app"), ("alice", None), ("alice", "app"), ("alice", "app"),
           ("alice", None), (None, "app"), (None, "app")]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _manager(dynamic: dict[tuple[str, str], dict[str, str]], clock: Clock | None = None) -> ClientQuotaManager:
    cache = MetadataCache()
    cache.dynamic = dynamic
    return ClientQuotaManager(cache, now=clock or Clock())


def test_kip55_precedence_most_specific_first_and_its_budget() -> None:
    for i, (_, name) in enumerate(LEVELS):
        dynamic = {key: {PRODUCE: str(1000 * (j + 1))} for j, (key, _) in enumerate(LEVELS) if j >= i}
        found = _manager(dynamic).match(PRODUCE, "alice", "app")
        assert found is not None, name
        assert found == (1000.0 * (i + 1), (PRODUCE, *BUDGETS[i])), name


def test_no_user_means_client_quotas_only() -> None:
    dynamic = {key: {PRODUCE: str(1000 * (j + 1))} for j, (key, _) in enumerate(LEVELS)}
    m = _manager(dynamic)
    assert m.match(PRODUCE, None, "app") == (7000.0, (PRODUCE, None, "app"))
    assert m.match(PRODUCE, None, "other") == (8000.0, (PRODUCE, None, "other"))
    assert m.match(PRODUCE, "bob", "other") == (5000.0, (PRODUCE, "bob", "other"))  # <default> user + client


def test_each_kind_has_its_own_precedence() -> None:
    m = _manager({("users", "alice"): {FETCH: "100"}, ("clients", DEFAULT): {PRODUCE: "200"}})
    assert m.match(PRODUCE, "alice", "x") == (200.0, (PRODUCE, None, "x"))
    assert m.match(FETCH, "alice", "x") == (100.0, (FETCH, "alice", None))
    assert m.match(REQUEST, "alice", "x") is None


def test_a_user_quota_is_shared_by_the_users_clients_a_default_user_one_is_per_user() -> None:
    clock = Clock()
    m = _manager({("users", "alice"): {PRODUCE: "1000"}, ("users", DEFAULT): {PRODUCE: "1000"}}, clock)
    assert m.record(PRODUCE, "c1", 1000, user="alice") == 1000
    assert m.record(PRODUCE, "c2", 1000, user="alice") == 2000  # same budget: c2 pays c1's debt too
    assert m.record(PRODUCE, "c1", 1000, user="bob") == 1000  # <default> user: bob has his own
    assert m.record(PRODUCE, "c1", 1000, user="carol") == 1000
    assert m.record(PRODUCE, "c1", 1000) == 0  # no user: no client quota configured


def test_the_empty_client_id_falls_under_the_default_client_quota() -> None:
    m = _manager({("clients", DEFAULT): {PRODUCE: "1000"}, ("clients", "named"): {PRODUCE: "5000"}})
    assert m.match(PRODUCE, None, "") == (1000.0, (PRODUCE, None, ""))
    assert m.record(PRODUCE, "", 3000) == 3000
    assert m.record(PRODUCE, "other", 3000) == 3000  # its own budget under the same <default> quota
    assert _manager({("clients", "named"): {PRODUCE: "5000"}}).match(PRODUCE, None, "") is None


def test_the_index_is_built_once_per_config_change(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = q.quota_index
    monkeypatch.setattr(q, "quota_index", lambda d: built.append(1) or real(d))
    cache = MetadataCache()
    m = ClientQuotaManager(cache)
    cache.dynamic = {("brokers", "1"): {"leader.replication.throttled.rate": "10"},
                     ("users", "alice"): {"SCRAM-SHA-256": "salted"}}  # entity configs, but no quota
    assert not any(m.active() for _ in range(100))
    assert len(built) == 1
    cache.dynamic = {("clients", DEFAULT): {PRODUCE: "1"}}  # the watcher replaces the map on a change
    assert m.active() and m.active()
    assert len(built) == 2


def test_the_body_field_is_spliced_not_re_encoded() -> None:
    def add(body: bytes, ms: int = 7) -> bytes:
        response = web.Response(body=body)
        q._add_body_field(response, ms)
        assert isinstance(response.body, bytes)
        return response.body

    big = orjson.dumps({"offsets": [{"partition": 0, "offset": i} for i in range(1000)]})
    assert orjson.loads(add(big)) == {"throttle_time_ms": 7, **orjson.loads(big)}
    assert orjson.loads(add(b"{}")) == {"throttle_time_ms": 7}
    assert orjson.loads(add(b'{"throttle_time_ms": 1, "a": 2}')) == {"throttle_time_ms": 7, "a": 2}
    assert add(b"[1]") == b"[1]"


# ------------------------------------------------------------------------------------- the middleware


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ANSWER = orjson.dumps({"offsets": [{"partition": 0, "offset": 0}]})


def _app(manager: ClientQuotaManager, service: SecurityService | None = None) -> web.Application:
    @web.middleware
    async def principal(request: web.Request, handler: Handler) -> web.StreamResponse:  # what security sets
        if "X-Test-Principal" in request.headers:
            request[PRINCIPAL_KEY] = request.headers["X-Test-Principal"]
        return await handler(request)

    async def produce(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    async def fetch(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 500, content_type="application/octet-stream")

    @web.middleware
    async def quotas(request: web.Request, handler: Handler) -> web.StreamResponse:  # as the front middleware
        return await (q.metered(manager, request, handler) if manager.active() else handler(request))

    app = web.Application(middlewares=[principal, quotas])
    app[SECURITY] = service
    app.add_routes([web.post("/topics/{topic}", produce),
                    web.get("/topics/{topic}/partitions/{partition}/batches", fetch)])
    return app


def _calls(app: web.Application, *calls: tuple[str, str, dict[str, str]]) -> list[tuple[dict[str, str], bytes]]:
    async def go() -> list[tuple[dict[str, str], bytes]]:
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, path, headers in calls:
                resp = await client.request(method, path, data=b"y" * 2000 if method == "POST" else None,
                                            headers=headers)
                assert resp.status == 200
                out.append((dict(resp.headers), await resp.read()))
            return out

    return asyncio.run(go())


def _throttle(headers: dict[str, str]) -> int | None:
    value = headers.get(q.THROTTLE_TIME_MS)
    return None if value is None else int(value)


def test_a_request_without_a_client_id_is_held_by_the_default_client_quota() -> None:
    app = _app(_manager({("clients", DEFAULT): {PRODUCE: "1000", FETCH: "100"}}))
    (produced, body), (fetched, _) = _calls(app, ("POST", "/topics/t", {}),
                                            ("GET", "/topics/t/partitions/0/batches", {}))
    assert _throttle(produced) == 2000  # 2,000 bytes at 1,000 B/s
    assert orjson.loads(body) == {"throttle_time_ms": 2000, **orjson.loads(ANSWER)}
    assert _throttle(fetched) == 5000


def test_with_no_quota_that_applies_nothing_changes() -> None:
    for dynamic in ({}, {("clients", "someone-else"): {PRODUCE: "1"}}):
        app = _app(_manager(dynamic))
        for headers, body in _calls(app, ("POST", "/topics/t", {}), ("POST", "/topics/t", {q.CLIENT_ID: "c"})):
            assert q.THROTTLE_TIME_MS not in headers
            assert body == ANSWER  # the very bytes the handler made


def test_replica_fetches_and_brokers_forwarding_on_an_open_cluster_are_exempt() -> None:
    app = _app(_manager({("clients", DEFAULT): {PRODUCE: "1000", FETCH: "100"}}))
    got = _calls(app, ("POST", "/topics/t", {q.INTER_BROKER: "2"}),
                 ("GET", "/topics/t/partitions/0/batches?replica_id=2", {}),
                 ("GET", "/topics/t/partitions/0/batches", {q.INTER_BROKER: "2"}))
    assert [_throttle(h) for h, _ in got] == [None, None, None]
    assert got[0][1] == ANSWER


def _secured() -> SecurityService:
    settings = SecuritySettings(listeners=tuple(parse_listeners("SASL_SSL://127.0.0.1:9094")),
                                super_users=frozenset({"User:CN=broker-1"}))
    service = SecurityService(settings, None)
    service.authorizer.replace({("Cluster", "LITERAL"): {"kafka-cluster": [
        Acl("User:CN=broker-2", "Allow", "ClusterAction")]}})
    return service


def test_on_a_secured_cluster_only_a_brokers_principal_is_exempt_and_users_have_quotas() -> None:
    clock = Clock()
    dynamic = {("users", "alice"): {PRODUCE: "1000"}, ("clients", DEFAULT): {PRODUCE: "500"}}
    app = _app(_manager(dynamic, clock), _secured())
    got = _calls(app,
                 ("POST", "/topics/t", {"X-Test-Principal": "User:CN=broker-1", q.CLIENT_ID: "c"}),  # super user
                 ("POST", "/topics/t", {"X-Test-Principal": "User:CN=broker-2"}),  # ClusterAction
                 ("POST", "/topics/t", {"X-Test-Principal": "User:mallory", q.INTER_BROKER: "1"}),  # a claim
                 ("POST", "/topics/t", {"X-Test-Principal": "User:alice", q.CLIENT_ID: "a1"}),
                 ("POST", "/topics/t", {"X-Test-Principal": ANONYMOUS, q.CLIENT_ID: "anon"}))
    # mallory's claim is ignored and ANONYMOUS has no user: both under <default> client (500 B/s, each its own)
    assert [_throttle(h) for h, _ in got] == [None, None, 4000, 2000, 4000]


def test_allow_everyone_if_no_acl_found_makes_no_one_a_broker() -> None:
    settings = SecuritySettings(listeners=tuple(parse_listeners("SASL_SSL://127.0.0.1:9094")),
                                super_users=frozenset({"User:CN=broker-1"}), allow_everyone_if_no_acl_found=True)
    service = SecurityService(settings, None)
    assert service.is_broker("User:CN=broker-1", "h")
    assert not service.is_broker("User:alice", "h")  # the authorizer alone would allow ClusterAction
    assert service.authorizer.authorize("User:alice", "h", "ClusterAction", "Cluster", "kafka-cluster")
    assert _secured().is_broker("User:CN=broker-2", "h") and not _secured().is_broker("User:alice", "h")


def test_a_muted_client_waits_before_its_next_request(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    m = _manager({("clients", DEFAULT): {PRODUCE: "1000"}}, clock)
    assert m.record(PRODUCE, "", 1050) == 1050  # muted until t + 1.05 s
    clock.t += 1.0
    # The waits it asks the loop for, not how long the loop took (which a loaded machine stretches at will).
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(q.asyncio, "sleep", sleep)

    def waited(client_id: str, user: str | None = None) -> float:
        slept.clear()
        asyncio.run(m.wait_unmuted(client_id, user))
        return sum(slept)

    assert waited("other") == 0 and waited("", "alice") == 0  # others are not muted
    assert waited("") == pytest.approx(0.05)  # the rest of its throttle time
    assert waited("") == 0  # once
