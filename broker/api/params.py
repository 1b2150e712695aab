"""Query and path parameter parsing with clear 400s."""

from __future__ import annotations

from aiohttp import web

from odradek.protocol.errors import InvalidRequestError


def int_param(request: web.Request, name: str, default: int | None = None, *, minimum: int = 0) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidRequestError(f"query parameter {name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequestError(f"query parameter {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise InvalidRequestError(f"query parameter {name} must be at least {minimum}")
    return value


def partition_param(request: web.Request) -> int:
    raw = request.match_info["partition"]
    if not raw.isdigit():
        raise InvalidRequestError(f"partition must be a non-negative integer, not {raw!r}")
    return int(raw)
