"""The one place where errors become HTTP responses.

Handlers never build error responses: they raise ``OdradekError`` subclasses, and ``error_answer`` (called by the
front door's one middleware, broker/api/app.py) answers with the error's status and Confluent REST Proxy's
envelope ``{"error_code", "message"}`` (plus Odradek's ``error`` name and ``retriable``, which REST-proxy clients
ignore and Odradek's client reads). Anything else is a bug: it is logged and answered as a 500
UNKNOWN_SERVER_ERROR.

Why v2 and v3 differ here: Confluent answers v2 errors as ``application/vnd.kafka.v2+json`` and v3 errors as
``application/json`` (kafka-rest ``exceptions/v3/ErrorResponse.java``, api/v3/openapi.yaml), and v3 maps Kafka's
UnknownTopicOrPartition to 40403 and an unknown cluster to 404 where v2 says 40401 (its ``Errors.java``). That
is the whole difference, kept in ``_V3`` so that every status and code is decided in this module.
Framework errors (no route, wrong method, body too large) get the codes Jersey gives them in Confluent: the
status itself as ``error_code`` (rest-utils ``WebApplicationExceptionMapper``).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

import orjson
from aiohttp import web

from odradek.protocol import media
from odradek.protocol.errors import (
    BrokerNotFoundError,
    ClusterNotFoundError,
    GroupIdNotFoundError,
    InvalidRequestError,
    MethodNotAllowedError,
    OdradekError,
    RequestTooLargeError,
    RouteNotFoundError,
    UnknownPartitionError,
    UnknownServerError,
    UnknownTopicError,
)

log = logging.getLogger(__name__)

ERROR_CONTENT_TYPE = media.KAFKA_V2
V3_ERROR_CONTENT_TYPE = media.PLAIN_JSON

# (http status, error_code) where v3 answers differently from the error's own (v2) codes.
_V3: dict[type[OdradekError], tuple[int, int]] = {
    UnknownTopicError: (404, 40403),
    UnknownPartitionError: (404, 40403),
    ClusterNotFoundError: (404, 404),
    BrokerNotFoundError: (404, 404),
    GroupIdNotFoundError: (404, 404),  # v3 consumer groups: Confluent's NotFoundException ("could not be found")
}


def is_v3(request: web.Request) -> bool:
    return request.path == "/v3" or request.path.startswith("/v3/")


def error_response(error: OdradekError, *, v3: bool = False) -> web.Response:
    body = error.to_json()
    status = error.http_status
    if v3 and type(error) in _V3:
        status, body["error_code"] = _V3[type(error)]
    return web.Response(status=status, body=orjson.dumps(body),
                        content_type=V3_ERROR_CONTENT_TYPE if v3 else ERROR_CONTENT_TYPE)


def _documented_paths(request: web.Request) -> list[str]:
    seen: list[str] = []
    for resource in request.app.router.resources():
        path = resource.canonical.rstrip("/") or "/"  # a route's slash twin (app.slash_routes) is the same path
        if path not in seen:
            seen.append(path)
    return seen


def route_not_found(request: web.Request) -> RouteNotFoundError:
    """A 404 whose message names the documented paths, so a client written for another REST proxy sees what
    this one serves (and, under /consumers, where consumer instances and the stateless read are)."""
    paths = _documented_paths(request)
    hint = ""
    if request.path.startswith("/consumers"):
        if any(p.startswith("/consumers/") for p in paths):
            hint = (" Consumer instances are created with POST /consumers/{group} and used under "
                    "/consumers/{group}/instances/{instance}/...;")
        else:
            hint = " Consumer instances are not supported yet;"
        hint += (" the stateless read GET /topics/{topic}/partitions/{partition}/records?offset=N needs no "
                 "consumer instance.")
    return RouteNotFoundError(
        f"HTTP 404 Not Found: no route for {request.method} {request.path}.{hint} Documented paths: "
        f"{', '.join(paths)} (the full contract is GET /openapi.json)"
    )


def error_answer(request: web.Request, e: Exception) -> web.StreamResponse:
    """The answer to a request whose handling raised ``e`` (re-raised when it is not an error: a redirect)."""
    v3 = is_v3(request)
    if isinstance(e, OdradekError):
        return error_response(e, v3=v3)
    if isinstance(e, web.HTTPRequestEntityTooLarge):
        return error_response(RequestTooLargeError(f"the request body is larger than the limit: {e.text}"), v3=v3)
    if isinstance(e, web.HTTPNotFound):
        return error_response(route_not_found(request), v3=v3)
    if isinstance(e, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(e.allowed_methods))
        response = error_response(MethodNotAllowedError(
            f"HTTP 405 Method Not Allowed: {request.method} {request.path}; allowed: {allowed}"), v3=v3)
        response.headers["Allow"] = allowed  # RFC 9110 15.5.6: a 405 MUST list the allowed methods
        return response
    if isinstance(e, web.HTTPException):
        if e.status < 400:
            raise e
        if e.status >= 500:
            return error_response(UnknownServerError(f"HTTP {e.status} {e.reason}"), v3=v3)
        return error_response(InvalidRequestError(f"HTTP {e.status} {e.reason}"), v3=v3)
    _ERROR_LOG.log(request, e)
    return error_response(UnknownServerError("internal error; see the broker's log"), v3=v3)


class RateLimitedErrorLog:
    """Unexpected request errors as one line each (type, message, where it was raised), at most ``burst`` per
    ``window_s``; the rest are counted and reported in the next line that gets through. A client that can make
    the broker fail a request must not be able to fill its disk with tracebacks."""

    def __init__(self, burst: int = 10, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.window_s, self._clock = burst, window_s, clock
        self._window_start = -1e18
        self._in_window = 0
        self.suppressed = 0

    def log(self, request: web.Request, error: BaseException) -> bool:
        now = self._clock()
        if now - self._window_start >= self.window_s:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.burst:
            self.suppressed += 1
            return False
        self._in_window += 1
        tb = traceback.extract_tb(error.__traceback__)
        where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
        note = f" ({self.suppressed} similar lines suppressed)" if self.suppressed else ""
        self.suppressed = 0
        message = str(error).replace("\n", " ")[:300]
        log.error("unhandled error in %s %s: %s: %s at %s%s", request.method, request.path[:200],
                  type(error).__name__, message, where, note)
        return True


_ERROR_LOG = RateLimitedErrorLog()


class OneLineFilter(logging.Filter):
    """For aiohttp's own request-error logging (a malformed request line or header logs a traceback at ERROR):
    the exception becomes part of one line, and at most ``burst`` such lines per ``window_s`` pass."""

    def __init__(self, burst: int = 10, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.window_s, self._clock = burst, window_s, clock
        self._window_start = -1e18
        self._in_window = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._clock()
        if now - self._window_start >= self.window_s:
            self._window_start, self._in_window = now, 0
        if self._in_window >= self.burst:
            return False
        self._in_window += 1
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            summary = " ".join(str(error).split())[:300]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {summary}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def install_request_log_filter() -> None:
    """Put the one-line filter on aiohttp's request loggers (once per process)."""
    for name in ("aiohttp.server", "aiohttp.web"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineFilter) for f in logger.filters):
            logger.addFilter(OneLineFilter())
