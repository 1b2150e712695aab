"""A large answer sent in pieces (broker/api/large_body.py) is byte for byte the body, with its Content-Length
and the headers a middleware adds after the handler; small ones stay plain responses."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from broker.api.large_body import LARGE, LargeBodyResponse, body_response

BODIES = {"small": os.urandom(1000), "edge": os.urandom(LARGE), "large": os.urandom(3 * 1024 * 1024 + 17)}


@web.middleware
async def tagging(request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    response = await handler(request)
    response.headers["X-Added-After"] = str(len(getattr(response, "body", b"") or b""))
    return response


async def answer(request: web.Request) -> web.StreamResponse:
    return body_response(BODIES[request.match_info["name"]], "application/json", {"X-From-Handler": "yes"})


def test_every_size_arrives_whole_with_its_headers() -> None:
    async def run() -> None:
        app = web.Application(middlewares=[tagging])
        app.router.add_get("/{name}", answer)
        async with TestServer(app, host="127.0.0.1") as server, ClientSession() as session:
            for name, body in BODIES.items():
                async with session.get(server.make_url(f"/{name}")) as resp:
                    got = await resp.read()
                    assert resp.status == 200
                    assert got == body, name
                    assert resp.headers["Content-Length"] == str(len(body))
                    assert "Transfer-Encoding" not in resp.headers
                    assert resp.headers["Content-Type"] == "application/json"
                    assert resp.headers["X-From-Handler"] == "yes"
                    assert resp.headers["X-Added-After"] == str(len(body))  # the quota middleware's count
            # several large answers in flight on one connection each, concurrently
            async def one(name: str) -> bytes:
                async with session.get(server.make_url(f"/{name}")) as resp:
                    return await resp.read()
            got_all = await asyncio.gather(*(one("large") for _ in range(6)))
            assert all(g == BODIES["large"] for g in got_all)
            async with session.head(server.make_url("/large")) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Length"] == str(len(BODIES["large"]))
                assert await resp.read() == b""

    asyncio.run(run())


def test_only_bodies_from_the_threshold_up_are_sent_in_pieces() -> None:
    assert type(body_response(BODIES["small"], "application/json")) is web.Response
    assert type(body_response(BODIES["edge"], "application/json")) is LargeBodyResponse
