"""The route table and the application factory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from broker.api.errors import error_middleware

if TYPE_CHECKING:
    from broker.server import Broker

BROKER = web.AppKey("broker", "Broker")


def json_response(obj: object, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=content_type)


async def health(request: web.Request) -> web.Response:
    return json_response(request.app[BROKER].health())


def create_app(broker: Broker) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=64 * 1024 * 1024)
    app[BROKER] = broker
    app.router.add_get("/health", health)
    return app
