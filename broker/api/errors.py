"""The one place where errors become HTTP responses.

Handlers never build error responses: they raise ``OdradekError`` subclasses, and this middleware answers
with the error's status and the REST-proxy envelope ``{"error_code", "message"}`` (plus ``error`` and
``retriable``). Anything else is a bug: it is logged and answered as a 500 UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from odradek.protocol.errors import InvalidRequestError, OdradekError, RequestTooLargeError, UnknownServerError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ERROR_CONTENT_TYPE = "application/vnd.kafka.v2+json"


def error_response(error: OdradekError) -> web.Response:
    return web.Response(
        status=error.http_status, body=orjson.dumps(error.to_json()), content_type=ERROR_CONTENT_TYPE
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except OdradekError as e:
        return error_response(e)
    except web.HTTPRequestEntityTooLarge as e:
        return error_response(RequestTooLargeError(f"the request body is larger than the limit: {e.text}"))
    except web.HTTPException as e:
        if e.status >= 400 and e.status != 404 and e.status != 405:
            return error_response(InvalidRequestError(e.reason))
        body = {"error_code": e.status, "message": f"HTTP {e.status} {e.reason}", "error": "HTTP_" + str(e.status),
                "retriable": False}
        return web.Response(status=e.status, body=orjson.dumps(body), content_type=ERROR_CONTENT_TYPE)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(UnknownServerError("internal error; see the broker's log"))
