"""What every HTTP handler needs from the application, in a module that imports no handler.

Why: ``app.py`` imports the handlers, so a handler taking the broker key from ``app.py`` would close an import
cycle, and a plain string key is untyped. ``BROKER`` is a typed ``web.AppKey[Broker]``: ``request.app[BROKER]`` is
a ``Broker`` to a type checker, with no runtime import of the broker (which imports this package).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

if TYPE_CHECKING:
    from broker.server import Broker

__all__ = ["BROKER", "OPENAPI", "json_response"]

BROKER: web.AppKey[Broker] = web.AppKey("broker")
OPENAPI: web.AppKey[dict[str, Any]] = web.AppKey("openapi")  # built once, from the route table


def json_response(obj: object, status: int = 200, content_type: str = "application/json") -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type=content_type)
