"""The hot routes' connections: produce and read requests served without aiohttp's per-request machinery, by the
same handlers under the same front-door rules; every other request is aiohttp's.

Why: for a 1,000-record request aiohttp's request cycle (its connection task, the application's dispatch and
router, the middleware frames, the request's payload stream, the response writer) took about half of the event
loop's time on the binary path and a third on REST produce: more than the handlers (docs/performance.md).

Which requests: ``POST /topics/{topic}`` and ``POST /topics/{topic}/partitions/{partition}`` (REST produce, v1 and
v2 as the route table negotiates them), ``POST .../partitions/{partition}/batches`` and ``GET`` of the same (the
binary path: its fetches, a follower's over the http replica transport among them, are sent from the segment files
with ``sendfile``, or through TLS) and ``GET .../partitions/{partition}/records`` (REST reads), when the request is
HTTP/1.1, framed by Content-Length (no Transfer-Encoding or Upgrade; ``Expect: 100-continue`` is answered as aiohttp
answers it, by a 100 Continue before the body is read, any other expectation is aiohttp's to refuse), with a plain
path and query (no percent-encoding), a head within aiohttp's line limit, and a body within the body cap and the
read budget (queued.max.request.bytes). Each is handled by the very handler aiohttp's route table holds for it,
through :class:`HotRequest`, the part of aiohttp's request those handlers read.

The rules kept, as the front middleware keeps them (broker/api/app.py): the path's topic and partition are checked
before the handler; the body arrives within request_body_timeout_ms (else 408, and the connection is closed) and
holds its share of the read budget until answered; a request head arrives within request_header_timeout_ms;
authentication, authorization and client quotas are applied by the front middleware's own guard (``guard``:
broker/security/middleware.py's ``guarded``, broker/quotas.py's ``metered``, each only when on), after the body
was read and before the handler, as the middleware orders them; errors are mapped by ``error_answer``; every
request is counted in /metrics under its route. Idle connections close after aiohttp's keep-alive timeout.

Hand-off: anything else (another route or method, a chunked body, HTTP/1.0, a head the parser refuses, the
budget spent...) hands the connection to aiohttp's connection handler, with every byte received
from the first byte of that request on; aiohttp then owns the connection to its end and answers as it always did.

Invariants: one request at a time per connection, so answers leave in request order (pipelined requests wait in
the buffer); nothing is handed off while a request is being handled here; the bytes aiohttp gets begin exactly at
a request's first byte, because requests are framed here by their head's end and Content-Length alone, and a head
is only ever parsed whole (llhttp, through httptools, as strict as aiohttp's own parser).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

import httptools
from aiohttp import web
from aiohttp.helpers import HeadersMixin
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from broker.api.errors import error_answer
from broker.api.fetch import SegmentResponse
from broker.api.params import check_path_params
from odradek.protocol.errors import RequestReadTimeoutError

if TYPE_CHECKING:
    from broker.api.app import ReadBudget

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HEAD_LIMIT = 8190  # a longer head is aiohttp's to parse (and refuse, by its line and field limits: 8190 each)
SMALL_BODY = 64 * 1024  # answers up to this go out in one write with their head
PAUSE_AT = 1 << 20  # buffered bytes past a request being handled before reading pauses

_TOPIC, _PARTITION = "/topics/{topic}", "/topics/{topic}/partitions/{partition}"
CANONICAL = {  # (method, path segments after /topics, last segment or None): the route's path in the table
    ("POST", 1, None): _TOPIC,
    ("POST", 3, None): _PARTITION,
    ("POST", 4, "batches"): f"{_PARTITION}/batches",
    ("GET", 4, "batches"): f"{_PARTITION}/batches",
    ("GET", 4, "records"): f"{_PARTITION}/records",
}
_UNSAFE = frozenset("%{}")  # percent-encoding, and characters aiohttp's path parameters do not match


class _Resource:
    """The part of an aiohttp resource the guards read: its path in the route table."""

    __slots__ = ("canonical",)

    def __init__(self, canonical: str) -> None:
        self.canonical = canonical


class _Route:
    __slots__ = ("resource",)

    def __init__(self, canonical: str) -> None:
        self.resource = _Resource(canonical)


class HotMatchInfo(dict[str, str]):
    """The path parameters, and (as aiohttp's ``UrlMappingMatchInfo``) the route they matched: security's rule
    and the client quotas' kind are looked up by ``match_info.route.resource.canonical``."""

    route: _Route


class HotRequest(HeadersMixin):
    """What the hot routes' handlers, the guards (security, client quotas), the path checks and ``error_answer``
    read of aiohttp's ``web.Request``: ``app``, ``method``, ``path``, ``match_info`` (with its route),
    ``query``, ``headers`` (with aiohttp's own ``content_type`` and ``content_length`` parsing), the body through
    ``read()``, ``transport`` and ``remote`` (the listener, a TLS peer's certificate, the caller's address), and
    the per-request mapping."""

    def __init__(self, app: web.Application, method: str, path: str, match_info: HotMatchInfo, query: str,
                 headers: CIMultiDict[str], body: bytes, transport: asyncio.BaseTransport | None = None) -> None:
        self.app = app
        self.method = method
        self.path = path
        self.match_info = match_info
        self.transport = transport
        self._query = query
        self._parsed_query: MultiDictProxy[str] | None = None
        self._headers = CIMultiDictProxy(headers)
        self._body = body
        self._state: dict[Any, Any] = {}

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._headers  # type: ignore[return-value]

    @property
    def query(self) -> MultiDictProxy[str]:
        if self._parsed_query is None:
            # A plain query (no percent-encoding, no '+': see HotConnection), split as parse_qsl would split it.
            self._parsed_query = MultiDictProxy(MultiDict(
                part.partition("=")[::2] for part in self._query.split("&") if part))
        return self._parsed_query

    @property
    def remote(self) -> str | None:
        """The peer's address, as aiohttp's ``request.remote`` (None when the transport does not know it)."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, (list, tuple)) and peer else None

    @property
    def body_exists(self) -> bool:
        return bool(self._body)

    async def read(self) -> bytes:
        return self._body

    def __getitem__(self, key: Any) -> Any:
        return self._state[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._state[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self._state.get(key, default)


@dataclass(frozen=True, slots=True)
class HotRoute:
    method: str
    canonical: str  # the route's path in the table: its /metrics label
    handler: Handler
    route: _Route  # what ``HotMatchInfo.route`` names


Guard = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


class HotRoutes:
    """The hot routes' handlers, taken from the application's route table, and what a connection needs of the
    front door: the limits, the read budget, the guards (``guard``: security and client quotas, as the front
    middleware applies them), the request metrics."""

    def __init__(self, app: web.Application, *, max_body: int, budget: ReadBudget, body_timeout_s: float,
                 head_timeout_s: float, keepalive_timeout_s: float, guard: Guard,
                 observe: Callable[[web.Application, str, int, float], None]) -> None:
        table = {(r.method, r.resource.canonical): r.handler for r in app.router.routes() if r.resource is not None}
        self.routes = {key: HotRoute(key[0], path, table[(key[0], path)], _Route(path))
                       for key, path in CANONICAL.items()}
        self.app = app
        self.max_body = max_body
        self.budget = budget
        self.body_timeout_s = body_timeout_s
        self.head_timeout_s = head_timeout_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self.guard = guard
        self.observe = observe
        self.tick_s = min(head_timeout_s, body_timeout_s)
        self.connections: set[HotConnection] = set()

    def route(self, method: str, path: str) -> tuple[HotRoute, HotMatchInfo] | None:
        """The hot route ``path`` names for ``method``, and its path parameters; None for any other request."""
        parts = path.split("/")
        n = len(parts) - 2
        if n < 1 or parts[0] or parts[1] != "topics" or not all(parts[2:]) or not _UNSAFE.isdisjoint(path):
            return None
        if n == 1:
            key: tuple[str, int, str | None] = (method, 1, None)
        elif parts[3] != "partitions":
            return None
        else:
            key = (method, n, parts[5] if n == 4 else None)
        route = self.routes.get(key)
        if route is None:
            return None
        info = HotMatchInfo(topic=parts[2]) if n == 1 else HotMatchInfo(topic=parts[2], partition=parts[4])
        info.route = route.route
        return route, info


class _Head:
    """One request's head, as httptools parsed it."""

    __slots__ = ("complete", "headers", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.add(name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))

    def on_headers_complete(self) -> None:
        self.complete = True


@dataclass(slots=True)
class _Pending:
    """A request taken here whose body is still arriving (or whose turn has not come)."""

    route: HotRoute
    request_args: tuple[str, str, HotMatchInfo, str, CIMultiDict[str]]
    body_start: int
    end: int
    reserved: int
    keep_alive: bool
    expects_continue: bool = False  # ``Expect: 100-continue``: the client may wait for a 100 before the body


class HotConnection(asyncio.Protocol):
    """One HTTP connection, served here until a request is not a hot one (see the module docstring)."""

    def __init__(self, routes: HotRoutes, aiohttp_handler: Callable[[], asyncio.Protocol]) -> None:
        self._routes = routes
        self._aiohttp_handler = aiohttp_handler
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._pending: _Pending | None = None
        self._task: asyncio.Task[None] | None = None
        self._since = self._loop.time()  # when the current phase (idle, head, body) began
        self._timer: asyncio.TimerHandle | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._closing = False  # shutting down: close once the request being handled is answered
        self._done = False  # closed or handed off: nothing more happens here

    # ------------------------------------------------------------------------------------------- the transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as aiohttp's connections
        self._routes.connections.add(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._done:
            return
        if not self._buf and self._task is None and self._pending is None:
            self._since = self._loop.time()  # a request head begins
        self._buf += data
        if self._task is None:
            self._advance()
        elif len(self._buf) > PAUSE_AT and not self._reading_paused:
            self._transport.pause_reading()  # type: ignore[union-attr]
            self._reading_paused = True

    def eof_received(self) -> bool:
        self._eof = True
        return self._task is not None  # keep the transport for the answer being made; else close it

    def connection_lost(self, exc: BaseException | None) -> None:
        self._finish_connection()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._task is None and not self._done:
            self._advance()

    # -------------------------------------------------------------------------------------------- the requests

    def _advance(self) -> None:
        """Take the next request in the buffer: frame it, and serve it here once whole, or hand off."""
        if self._done or self._writing_paused:
            return
        if self._closing or (self._eof and self._pending is None and not self._buf):
            self._close()
            return
        if self._pending is None:
            if not self._buf:
                return
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > HEAD_LIMIT or b"\n\n" in self._buf:
                    self._hand_off()
                return
            pending = self._take_head(end + 4) if end + 4 <= HEAD_LIMIT else None
            if pending is None:
                self._hand_off()
                return
            self._pending = pending
            self._since = self._loop.time()  # the body's time begins
            if pending.expects_continue and len(self._buf) < pending.end:
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
        pending = self._pending
        if len(self._buf) < pending.end:
            if self._eof:
                self._close()
            return
        with memoryview(self._buf) as view:
            body = bytes(view[pending.body_start:pending.end])
        del self._buf[:pending.end]
        method, path, info, query, headers = pending.request_args
        request = HotRequest(self._routes.app, method, path, info, query, headers, body, self._transport)
        self._task = self._loop.create_task(self._serve(pending, request))

    def _take_head(self, head_end: int) -> _Pending | None:
        """The head ending at ``head_end`` as a request to serve here, with its budget reserved; None to hand off."""
        routes = self._routes
        head = _Head()
        parser = httptools.HttpRequestParser(head)
        try:
            parser.feed_data(bytes(self._buf[:head_end]))
        except httptools.HttpParserError:
            return None
        if not head.complete or parser.get_http_version() != "1.1" or parser.should_upgrade():
            return None
        headers = head.headers
        expect = headers.getall("Expect", [])
        if "Transfer-Encoding" in headers or len(expect) > 1 or \
                (expect and expect[0].strip().lower() != "100-continue"):
            return None
        if not head.url.isascii():
            return None  # raw non-ASCII bytes in the target: aiohttp's (yarl's) reading of them
        url = head.url.decode("ascii")
        path, _, query = url.partition("?")
        if "%" in query or "+" in query or "#" in url:
            return None
        found = routes.route(parser.get_method().decode("ascii"), path)
        if found is None:
            return None
        lengths = headers.getall("Content-Length", [])
        if len(lengths) > 1 or (lengths and not (lengths[0].isascii() and lengths[0].isdigit())):
            return None  # aiohttp's to refuse
        size = int(lengths[0]) if lengths else 0
        if size > routes.max_body or not routes.budget.try_reserve(size):
            return None
        route, info = found
        return _Pending(route, (route.method, path, info, query, headers), head_end, head_end + size, size,
                        parser.should_keep_alive(), bool(expect))

    async def _serve(self, pending: _Pending, request: HotRequest) -> None:
        started = time.perf_counter()
        try:
            try:
                check_path_params(request)  # type: ignore[arg-type]
                response = await self._routes.guard(request, pending.route.handler)  # type: ignore[arg-type]
            except Exception as e:
                response = error_answer(request, e)  # type: ignore[arg-type]
            self._routes.observe(self._routes.app, pending.route.canonical, response.status, started)
            keep_alive = pending.keep_alive and not self._closing and not self._eof
            if isinstance(response, SegmentResponse):
                await self._send_ranges(response, keep_alive)
            else:
                self._write(response, keep_alive)
        except BaseException:
            self._close()
            raise
        finally:
            self._routes.budget.release_now(pending.reserved)
            self._pending = None
            self._task = None
        if self._done:
            return
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()  # type: ignore[union-attr]
        if not keep_alive:
            self._close()
            return
        self._since = self._loop.time()
        self._advance()

    def _write(self, response: web.StreamResponse, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._done or transport.is_closing():
            return
        body = getattr(response, "body", None)
        if not isinstance(body, bytes | bytearray):
            log.error("a hot route answered with %s, which is not written here", type(response).__name__)
            body, keep_alive = b"", False
            response = web.Response(status=500)
        head = _head(response, len(body), keep_alive)
        if len(body) <= SMALL_BODY:
            transport.write(head + body)
        else:
            transport.write(head)
            transport.write(memoryview(body))  # whatever the socket does not take is copied once, not sliced first

    async def _send_ranges(self, response: SegmentResponse, keep_alive: bool) -> None:
        """A binary fetch's answer: the head, then its file ranges with ``sendfile``; the ranges released."""
        try:
            transport = self._transport
            if transport is None or self._done or transport.is_closing():
                return
            transport.write(_head(response, response.content_length or 0, keep_alive))
            await response.send_ranges(transport)
        except (ConnectionError, OSError) as e:
            log.debug("a fetch answer was cut short: %s", e)
            self._close()
        finally:
            response.release()

    # ------------------------------------------------------------------------------------ timers and hand-off

    def _deadline(self) -> float:
        if self._task is not None:
            return math.inf  # the handler's own deadlines bound it
        if self._pending is not None:
            return self._since + self._routes.body_timeout_s
        if self._buf:
            return self._since + self._routes.head_timeout_s
        return self._since + self._routes.keepalive_timeout_s

    def _arm(self) -> None:
        """The connection's one timer, due at the current phase's deadline or sooner. It is never moved on the
        request path: it fires at most every ``tick_s`` (the shortest timeout), checks the phase's deadline, and
        re-arms itself; a phase begun after it was armed ends no sooner than one ``tick_s`` later, so no deadline
        is ever passed unseen."""
        now = self._loop.time()
        self._timer = self._loop.call_at(min(self._deadline(), now + self._routes.tick_s), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._done:
            return
        if self._loop.time() < self._deadline():
            self._arm()
            return
        if self._pending is not None:  # the body did not arrive in time: 408, as the front middleware answers
            pending, self._pending = self._pending, None
            self._routes.budget.release_now(pending.reserved)
            method, path, info, query, headers = pending.request_args
            request = HotRequest(self._routes.app, method, path, info, query, headers, b"", self._transport)
            limit_ms = round(self._routes.body_timeout_s * 1000)
            response = error_answer(request, RequestReadTimeoutError(  # type: ignore[arg-type]
                f"the request body did not arrive within {limit_ms} ms (--request-body-timeout-ms)"))
            self._routes.observe(self._routes.app, pending.route.canonical, response.status, time.perf_counter())
            self._write(response, keep_alive=False)
        self._close()  # an idle connection past the keep-alive timeout, or a head that did not arrive in time

    def _hand_off(self) -> None:
        """aiohttp's connection handler takes the connection from here, starting at this request's first byte."""
        transport = self._transport
        assert transport is not None and self._task is None and self._pending is None
        self._finish_connection()
        if transport.is_closing():
            return
        handler = self._aiohttp_handler()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._reading_paused:
            transport.resume_reading()
        data, self._buf = bytes(self._buf), bytearray()
        if data:
            handler.data_received(data)
        if self._eof and not handler.eof_received():
            transport.close()

    def _close(self) -> None:
        transport = self._transport
        self._finish_connection()
        if transport is not None:
            transport.close()

    def _finish_connection(self) -> None:
        if self._done:
            return
        self._done = True
        self._cancel_timer()
        self._routes.connections.discard(self)
        if self._pending is not None and self._task is None:  # a body that never came: its share back
            self._routes.budget.release_now(self._pending.reserved)
            self._pending = None

    # ---------------------------------------------------------------------------------------------- shutdown

    def close_when_idle(self) -> None:
        """Stop taking requests: close now if none is being handled, else once it is answered."""
        self._closing = True
        if self._task is None:
            self._close()

    async def wait_closed(self, timeout_s: float | None) -> None:
        task = self._task
        if task is not None:
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(task)
            except (TimeoutError, Exception):
                pass
        self._close()


def _head(response: web.StreamResponse, length: int, keep_alive: bool) -> bytes:
    """The status line and headers of ``response`` with a body of ``length`` bytes."""
    head = [f"HTTP/1.1 {response.status} {response.reason}\r\n"]
    for name, value in response.headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"the answer's {name!r} header holds a line break")  # as aiohttp refuses it
        if name.lower() != "content-length":
            head.append(f"{name}: {value}\r\n")
    head.append(f"Content-Length: {length}\r\nDate: {_date()}\r\n")
    if not keep_alive:
        head.append("Connection: close\r\n")
    head.append("\r\n")
    return "".join(head).encode("utf-8")


_date_cache: tuple[int, str] = (0, "")


def _date() -> str:
    """The Date header's value (RFC 9110 IMF-fixdate), formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]
