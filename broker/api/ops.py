"""GET /health, /metrics (Prometheus text) and /openapi.json."""

from __future__ import annotations

from aiohttp import web

from broker.api.context import BROKER, OPENAPI, json_response


async def health(request: web.Request) -> web.Response:
    return json_response(request.app[BROKER].health())


async def metrics(request: web.Request) -> web.Response:
    body = request.app[BROKER].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def openapi(request: web.Request) -> web.Response:
    return json_response(request.app[OPENAPI])
