"""The inter-broker client's one decoding of answers, against a real aiohttp server on 127.0.0.1: a remote's
typed error comes back as the same typed error (details kept), an answer without the envelope as the closest
class for its status, an unreachable broker as BROKER_NOT_AVAILABLE (``sent=False`` only when nothing left)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from broker.interbroker import INTER_BROKER, REPLICATION, InterBrokerClient, Request
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    ConsumerInstanceNotFoundError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RouteNotFoundError,
    UnknownServerError,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(routes: list[web.RouteDef]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def _run(routes: list[web.RouteDef], test: Callable[[InterBrokerClient], Awaitable[None]],
         max_connections: int = 100) -> None:
    async def main() -> None:
        runner, url = await _serve(routes)
        client = InterBrokerClient(7, {1: url}.get, headers={"Authorization": "Basic eA=="},
                                   max_connections=max_connections)
        await client.start()
        try:
            await test(client)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())


async def _json(body: Any, status: int) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def test_a_typed_error_comes_back_typed_with_its_details() -> None:
    async def handler(_: web.Request) -> web.Response:
        return await _json(NotLeaderOrFollowerError("not me", leader=2, leader_url="http://b2").to_json(), 409)

    async def test(client: InterBrokerClient) -> None:
        with pytest.raises(NotLeaderOrFollowerError) as e:
            await client.send(1, Request("GET", "/x"))
        assert e.value.message == "not me" and e.value.details == {"leader": 2, "leader_url": "http://b2"}
        assert e.value.retriable

    _run([web.get("/x", handler)], test)


def test_errors_declared_outside_errors_py_and_bare_codes_decode() -> None:
    async def consumer(_: web.Request) -> web.Response:
        return await _json(ConsumerInstanceNotFoundError("gone").to_json(), 404)

    async def code_only(_: web.Request) -> web.Response:
        return await _json({"error_code": 41601, "message": "out", "log_start_offset": 3}, 416)

    async def test(client: InterBrokerClient) -> None:
        with pytest.raises(ConsumerInstanceNotFoundError):
            await client.send(1, Request("GET", "/c"))
        with pytest.raises(OffsetOutOfRangeError) as e:
            await client.send(1, Request("GET", "/o", lane=REPLICATION))
        assert e.value.details == {"log_start_offset": 3}

    _run([web.get("/c", consumer), web.get("/o", code_only)], test)


def test_an_answer_without_the_envelope_maps_by_status() -> None:
    async def text(_: web.Request) -> web.Response:
        return web.Response(status=500, text="<html>boom</html>")

    async def test(client: InterBrokerClient) -> None:
        with pytest.raises(RouteNotFoundError):  # aiohttp's own 404 for a route the remote lacks
            await client.send(1, Request("GET", "/nowhere"))
        with pytest.raises(UnknownServerError) as e:
            await client.send(1, Request("GET", "/text"))
        assert "boom" in e.value.message

    _run([web.get("/text", text)], test)


def test_success_carries_body_headers_and_the_brokers_identity() -> None:
    seen: dict[str, str] = {}

    async def echo(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.Response(body=await request.read(), headers={"X-Answer": "1"})

    async def test(client: InterBrokerClient) -> None:
        reply = await client.send(1, Request("POST", "/e?a=1", body=b'{"k": 1}', headers={"X-Mine": "m"}))
        assert (reply.status, reply.json(), reply.headers["X-Answer"], reply.node_id) == (200, {"k": 1}, "1", 1)
        assert seen[INTER_BROKER] == "7" and seen["Authorization"] == "Basic eA==" and seen["X-Mine"] == "m"

    _run([web.post("/e", echo)], test)


def test_unreachable_and_unregistered_brokers_were_not_sent_to() -> None:
    async def main() -> None:
        dead = f"http://127.0.0.1:{_free_port()}"
        client = InterBrokerClient(7, {1: dead}.get)
        await client.start()
        try:
            for node in (1, 2):  # nobody listens; not registered
                with pytest.raises(BrokerNotAvailableError) as e:
                    await client.send(node, Request("GET", "/x"))
                assert e.value.details == {"sent": False}
        finally:
            await client.close()

    asyncio.run(main())


def test_a_timeout_after_sending_is_ambiguous() -> None:
    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response()

    async def test(client: InterBrokerClient) -> None:
        with pytest.raises(BrokerNotAvailableError) as e:
            await client.send(1, Request("GET", "/slow", timeout_s=0.3))
        assert "sent" not in e.value.details  # the remote may have acted on it

    _run([web.get("/slow", slow)], test)


def test_forwarded_requests_share_a_bounded_pool_replication_does_not_queue() -> None:
    active, peak = 0, 0
    release = asyncio.Event()

    async def hold(_: web.Request) -> web.Response:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await release.wait()
        active -= 1
        return web.Response(text="{}")

    async def quick(_: web.Request) -> web.Response:
        return web.Response(text='{"ok": true}')

    async def test(client: InterBrokerClient) -> None:
        forwards = [asyncio.create_task(client.send(1, Request("GET", "/hold"))) for _ in range(6)]
        await asyncio.sleep(0.3)
        assert peak == 2  # the rest wait for a slot
        reply = await asyncio.wait_for(client.send(1, Request("GET", "/quick", lane=REPLICATION)), 2)
        assert reply.json() == {"ok": True}
        release.set()
        await asyncio.gather(*forwards)

    _run([web.get("/hold", hold), web.get("/quick", quick)], test, max_connections=2)


