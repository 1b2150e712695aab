"""The route table and the application factory: every path the broker serves, in one place."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from broker.api import (
    acls_v3,
    admin_v3,
    console,
    consumers_v2,
    controller_ops,
    entity_configs,
    fetch,
    groups,
    groups_v3,
    metadata,
    ops,
    produce,
    producer_ids,
    reassignment,
    reassignments_v3,
    records_v3,
    schema_registry,
    transactions,
    v1,
)
from broker.api.context import BROKER, OPENAPI
from broker.api.errors import error_answer, install_request_log_filter, is_v3
from broker.api.hot_routes import HotConnection, HotRoutes
from broker.api.openapi import spec
from broker.api.params import LIMITS, check_path_params, is_json_type
from broker.config import BrokerConfig
from broker.quotas import BODY_BYTES, ClientQuotaManager, metered
from broker.security.middleware import BODY_STREAMED, SECURITY, SecurityService, guarded, issue_token
from odradek.protocol import media
from odradek.protocol.errors import BrokerBusyError, RequestReadTimeoutError, UnsupportedMediaTypeError

MAX_BODY = web.AppKey("max_body", int)
CLIENT_QUOTAS: web.AppKey[ClientQuotaManager | None] = web.AppKey("client_quotas", object)  # type: ignore[arg-type]
READ_BUDGET: web.AppKey[ReadBudget] = web.AppKey("read_budget")

if TYPE_CHECKING:
    from broker.server import Broker


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def front_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request's one step before its handler. In order: the request is counted and timed by route and status
    (/metrics); errors become answers (broker/api/errors.py); the limits (``_admitted``: path parameters, the body
    read within its timeout and the read budget); authentication and authorization (broker/security/); client
    quotas (broker/quotas.py). Why one middleware and not five: each middleware is a coroutine frame and a call
    per request on every route, the hot ones included; here a part that is off (an open cluster, no quota
    configured) costs one check, and the handler is awaited from the fewest frames. The order is the rule:
    nothing reaches security before its body was read within the limits, nor a handler before it was allowed. The
    hot routes' connections (broker/api/hot_routes.py) keep these rules for the requests they serve themselves."""
    started = time.perf_counter()
    try:
        response = await _admitted(request, handler)
    except Exception as e:
        response = error_answer(request, e)  # re-raises what is not an error (a redirect); cancellation passes
    _observe(request, response, started)
    return response


def _observe(request: web.Request, response: web.StreamResponse, started: float) -> None:
    resource = request.match_info.route.resource
    observe(request.app, resource.canonical if resource else None, response.status, started)


def observe(app: web.Application, canonical: str | None, status: int, started: float) -> None:
    """One answered request in /metrics: its count and latency under its route (``canonical``: the route's path in
    the table; None: no route matched)."""
    metrics = app[BROKER].metrics
    children = metrics.route_children.get((canonical, status))
    if children is None:  # once per route and status: labels() takes a lock and builds its key on every call
        route = documented_path(canonical) if canonical is not None else "unmatched"
        children = metrics.route_children[canonical, status] = (
            metrics.requests.labels(route, str(status)), metrics.latency.labels(route))
    children[0].inc()
    children[1].observe(time.perf_counter() - started)


def routes() -> list[web.RouteDef]:
    t, p = "/topics/{topic}", "/topics/{topic}/partitions/{partition}"
    c = "/v3/clusters/{cluster_id}"
    # REST Proxy v1 (broker/api/v1.py): its own paths added, and the paths it shares with v2 negotiated (a v1
    # Content-Type or Accept gets v1's answer, anything else the v2 handler's).
    return v1.sharing_paths([
        # The hot routes first: aiohttp tries every resource under a static prefix ("/topics") in registration
        # order, one regular expression each, so fetches and produces should not wait behind admin routes.
        web.get(f"{p}/batches", fetch.fetch_batches),
        web.post(f"{p}/batches", produce.produce_batches),
        web.get(f"{p}/records", fetch.read_records),
        web.get(t, metadata.topic),
        web.post(t, produce.produce_json),
        web.get(p, metadata.partition),
        web.post(p, produce.produce_json),
        web.get("/health", ops.health),
        web.get("/metrics", ops.metrics),
        web.get("/openapi.json", ops.openapi),
        web.post("/auth/token", issue_token),  # bearer tokens (docs/security.md)
        web.get("/metadata", metadata.metadata),
        web.get("/brokers", metadata.brokers),
        web.get("/topics", metadata.topics),
        web.get(f"{t}/partitions", metadata.partitions),
        web.get(f"{p}/offsets", metadata.partition_offsets),
        web.get(f"{p}/epoch_end_offset", fetch.epoch_end_offset),
        web.post("/controller/controlled_shutdown", controller_ops.controlled_shutdown),
        web.post("/admin/preferred_leader_election", controller_ops.preferred_election),
        web.post("/admin/unclean_leader_election", controller_ops.unclean_election),
        web.get("/v3/clusters", admin_v3.list_clusters),
        web.get(c, admin_v3.get_cluster),
        web.get(f"{c}/brokers", admin_v3.list_brokers),
        web.get(f"{c}/brokers/{{broker_id}}", admin_v3.get_broker),
        web.get(f"{c}/topics", admin_v3.list_topics),
        web.post(f"{c}/topics", admin_v3.create_topic),
        web.get(f"{c}/topics/{{topic}}", admin_v3.get_topic),
        web.delete(f"{c}/topics/{{topic}}", admin_v3.delete_topic),
        web.patch(f"{c}/topics/{{topic}}", admin_v3.update_topic),
        web.get(f"{c}/topics/{{topic}}/partitions", admin_v3.list_partitions),
        web.get(f"{c}/topics/{{topic}}/partitions/{{partition}}", admin_v3.get_partition),
        web.get(f"{c}/topics/{{topic}}/partitions/{{partition}}/replicas", admin_v3.list_replicas),
        web.get(f"{c}/topics/{{topic}}/partitions/{{partition}}/replicas/{{broker_id}}", admin_v3.get_replica),
        web.get(f"{c}/topics/{{topic}}/configs", admin_v3.list_configs),
        web.post(f"{c}/topics/{{topic}}/configs:alter", admin_v3.alter_configs),
        web.get(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.get_config),
        web.put(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.put_config),
        web.delete(f"{c}/topics/{{topic}}/configs/{{name}}", admin_v3.delete_config),
        *group_routes(),
        *consumers_v2.routes(),
        *entity_configs.routes(),
        *reassignment.routes(),
        *producer_ids.routes(),
        *transactions.routes(),
        # Confluent v3 consumer groups, produce, ACLs and reassignments (issue 24 point 7)
        *groups_v3.routes(),
        *records_v3.routes(),
        *acls_v3.routes(),
        *reassignments_v3.routes(),
        *schema_registry.routes(),  # Confluent Schema Registry (issue 26, docs/schema-registry.md)
        *console.routes(),  # the web console at /ui (issue 29, docs/console.md)
    ])


def group_routes() -> list[web.RouteDef]:
    """Consumer groups (docs/consumer-groups.md)."""
    g = "/groups/{group}"
    return [
        web.get("/groups", groups.list_groups),
        web.get(g, groups.describe),
        web.delete(g, groups.delete),
        web.post(f"{g}/members", groups.join),
        web.post(f"{g}/members/{{member}}/heartbeat", groups.heartbeat),
        web.delete(f"{g}/members/{{member}}", groups.leave),
        web.get(f"{g}/offsets", groups.offsets),
        web.post(f"{g}/offsets", groups.commit),
        web.post(f"{g}/offsets/reset", groups.reset_offsets),
        web.delete(f"{g}/offsets", groups.delete_offsets),
    ]


class ReadBudget:
    """Kafka's queued.max.request.bytes: request body bytes being read (and held) at once, over all connections.
    A request reserves its Content-Length (or the body cap, when it does not say) before reading, waits a while
    when the budget is spent, and is refused with a retriable 503 when it stays spent."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0
        self._waiting = 0
        self._released = asyncio.Condition()
        self._wakers: set[asyncio.Task[None]] = set()

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` now if nobody waits ahead and it fits (the hot routes' way: they wait for nothing)."""
        size = min(size, self.limit)
        if self._waiting == 0 and self.in_use + size <= self.limit:
            self.in_use += size
            return True
        return False

    async def reserve(self, size: int, timeout_s: float) -> None:
        if self.try_reserve(size):
            return  # the common case: no lock, no timer (nobody queued ahead, the budget fits)
        size = min(size, self.limit)
        self._waiting += 1
        try:
            async with self._released:
                try:
                    async with asyncio.timeout(timeout_s):
                        await self._released.wait_for(lambda: self.in_use + size <= self.limit)
                except TimeoutError:
                    raise BrokerBusyError(f"{self.in_use} request bytes are being read, the limit is {self.limit} "
                                          "(queued.max.request.bytes); retry shortly") from None
                self.in_use += size
        finally:
            self._waiting -= 1

    async def release(self, size: int) -> None:
        if self._give_back(size):
            await self._wake()

    def release_now(self, size: int) -> None:
        """``release`` from code that cannot await: the waiters, if any, are woken by a task."""
        if self._give_back(size):
            task = asyncio.get_running_loop().create_task(self._wake())
            self._wakers.add(task)
            task.add_done_callback(self._wakers.discard)

    def _give_back(self, size: int) -> bool:
        """Return ``size`` to the budget; whether anyone waits for it."""
        self.in_use -= min(size, self.limit)
        return self._waiting > 0

    async def _wake(self) -> None:
        async with self._released:
            self._released.notify_all()


# Handlers that read their own body as it arrives (the limits and security checks leave it to them); their
# routes' authorization rules name resources from the path only.
STREAMED_BODIES = frozenset({records_v3.produce_records})


async def _admitted(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The limits, before anything else: the path's topic and partition are checked (broker/api/params.py), and
    the body is read here, within the body timeout and the read budget, so no handler waits on a slow client or
    holds more request bytes than the broker allows. The one exception is a handler in ``STREAMED_BODIES``: it
    reads its body itself, chunk by chunk, each within the body timeout, holding one bounded group of it at a
    time (v3's streaming produce answers each record while the client is still sending the next)."""
    check_path_params(request)
    if not request.body_exists:
        return await _allowed(request, handler)
    if is_v3(request) and not is_json_type(request.content_type):
        # v3 resources consume application/json only (Confluent's @Consumes): a text/plain or form POST is what
        # any web page can send cross-origin without a preflight, so it must not change anything.
        raise UnsupportedMediaTypeError(
            f"v3 requests take {media.PLAIN_JSON}, not {request.content_type or '(no Content-Type)'}")
    if request.match_info.handler in STREAMED_BODIES:
        request[BODY_STREAMED] = True  # security then reads nothing of it either
        request[BODY_BYTES] = 0  # counted by the handler as it reads, for the produce quota
        return await _allowed(request, handler)
    config = request.app[LIMITS]
    size = request.content_length if request.content_length is not None else request.app[MAX_BODY]
    budget = request.app[READ_BUDGET]
    timeout_s = config.request_body_timeout_ms / 1000
    await budget.reserve(size, timeout_s)
    try:
        try:
            async with asyncio.timeout(timeout_s):  # a timer, not wait_for's task per request
                body = await request.read()  # cached: handlers' read() returns these bytes
        except TimeoutError:
            raise RequestReadTimeoutError(
                f"the request body did not arrive within {config.request_body_timeout_ms} ms "
                "(--request-body-timeout-ms)") from None
        request[BODY_BYTES] = len(body)
        return await _allowed(request, handler)
    finally:
        await budget.release(size)


def unguarded(app: web.Application) -> bool:
    """Security off and no client quota active: a request needs neither check (the hot routes serve only then)."""
    quotas = app[CLIENT_QUOTAS]
    return app[SECURITY] is None and (quotas is None or not quotas.active())


def _allowed(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
    """The handler's answer behind security and client quotas, each only when on (an awaitable, not a coroutine
    of its own: no frame when both are off)."""
    app = request.app
    if unguarded(app):
        return handler(request)
    service, quotas = app[SECURITY], app[CLIENT_QUOTAS]
    if quotas is not None and quotas.active():
        handler = functools.partial(metered, quotas, handler=handler)
    if service is None:
        return handler(request)
    return guarded(service, request, handler)


class _GuardedRequestHandler(RequestHandler):  # type: ignore[type-arg]
    """aiohttp's connection handler plus a header read timeout: a connection that has sent part of a request
    head and not the rest within the timeout is closed (aiohttp itself only times out idle keep-alives)."""

    head_timeout_s = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        count = self._request_count
        super().data_received(data)
        if self._request_count != count:
            self._cancel_head_timer()
        elif data and self._current_request is None and self._head_timer is None and not self._messages:
            loop = asyncio.get_running_loop()
            self._head_timer = loop.call_later(self.head_timeout_s, self._head_timed_out, self._request_count)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self, count: int) -> None:
        self._head_timer = None
        if self._request_count == count and self._current_request is None and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)


class GuardedAppRunner(web.AppRunner):
    """The broker's AppRunner: connections get the header read timeout of ``_GuardedRequestHandler``, and, with
    ``hot_routes``, start as broker/api/hot_routes.py's connections (which hand other requests to aiohttp's)."""

    def __init__(self, app: web.Application, *, head_timeout_ms: int, hot_routes: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._head_timeout_s = head_timeout_ms / 1000
        self._hot_routes = hot_routes

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _GuardedServer
        assert isinstance(server, _GuardedServer)
        server.head_timeout_s = self._head_timeout_s
        if self._hot_routes:
            server.hot = hot_routes_of(self.app, head_timeout_s=self._head_timeout_s,
                                       keepalive_timeout_s=server.keepalive_timeout_s)
        return server


def hot_routes_of(app: web.Application, *, head_timeout_s: float, keepalive_timeout_s: float) -> HotRoutes:
    """The hot routes over ``app``, under its limits, budget, security and quotas."""
    return HotRoutes(app, max_body=app[MAX_BODY], budget=app[READ_BUDGET],
                     body_timeout_s=app[LIMITS].request_body_timeout_ms / 1000, head_timeout_s=head_timeout_s,
                     keepalive_timeout_s=keepalive_timeout_s, guard=_allowed,
                     observe=observe)


class _GuardedServer(Server):  # type: ignore[type-arg]
    """aiohttp's Server, making ``_GuardedRequestHandler`` connections (its ``__call__`` names the class), or
    hot-route connections that hand off to them."""

    head_timeout_s = 10.0
    hot: HotRoutes | None = None

    @property
    def keepalive_timeout_s(self) -> float:
        return float(self._kwargs.get("keepalive_timeout", 3630))  # aiohttp's default

    def __call__(self) -> asyncio.Protocol:  # type: ignore[override]
        if self.hot is not None:
            return HotConnection(self.hot, self.guarded_handler)
        return self.guarded_handler()

    def guarded_handler(self) -> RequestHandler:  # type: ignore[type-arg]
        handler = _GuardedRequestHandler(self, loop=self._loop, **self._kwargs)
        handler.head_timeout_s = self.head_timeout_s
        return handler

    def pre_shutdown(self) -> None:
        super().pre_shutdown()
        for conn in list(self.hot.connections if self.hot is not None else ()):
            conn.close_when_idle()

    async def shutdown(self, timeout: float | None = None) -> None:
        hot = list(self.hot.connections if self.hot is not None else ())
        await asyncio.gather(super().shutdown(timeout), *(conn.wait_closed(timeout) for conn in hot))


def make_runner(broker: Broker) -> web.AppRunner:
    """The runner server.py starts: the app with its body cap, the header read timeout, the hot routes."""
    app = create_app(broker, config=broker.config, security=broker.security, quotas=broker.quotas,
                     client_max_size=broker.config.max_request_bytes)
    return GuardedAppRunner(app, head_timeout_ms=broker.config.request_header_timeout_ms,
                            hot_routes=broker.config.http_hot_routes, access_log=None, handle_signals=False)


def create_app(broker: Broker, *, config: BrokerConfig, security: SecurityService | None,
               quotas: ClientQuotaManager | None, client_max_size: int = 64 * 1024 * 1024) -> web.Application:
    """The application over ``broker`` (what handlers reach as ``request.app[BROKER]``). What the front middleware
    needs is given explicitly: ``config`` (the request limits), ``security`` (None: an open cluster) and
    ``quotas`` (None: no client quotas), so a test's broker double needs only what its handlers use."""
    app = web.Application(middlewares=[front_middleware], client_max_size=client_max_size)
    install_request_log_filter()  # aiohttp's own errors for malformed requests: one line each, rate-limited
    app[MAX_BODY] = client_max_size
    app[LIMITS] = config
    app[READ_BUDGET] = ReadBudget(config.queued_max_request_bytes)
    app[BROKER] = broker
    app[SECURITY] = security
    app[CLIENT_QUOTAS] = quotas
    app[OPENAPI] = spec(route_table())
    app.add_routes(routes())
    app.add_routes(slash_routes(routes()))
    return app


def slash_routes(defs: list[web.RouteDef]) -> list[web.RouteDef]:
    """Each route again with a trailing slash (``POST /consumers/g/``, ``.../records/?timeout=``): Confluent's
    REST Proxy (JAX-RS) matches a path with or without one, and clients written for it send both. Served in
    place, not redirected: a 308 would make every client follow it (curl without -L does not). Registered after
    every canonical route, so the hot routes are still tried first; metrics and the route list name the
    canonical form (:func:`documented_path`)."""
    out: list[web.RouteDef] = []
    for d in defs:
        if d.path != "/" and not d.path.endswith("/"):
            out.append(web.route(d.method, d.path + "/", d.handler, **{k: v for k, v in d.kwargs.items()
                                                                      if k != "allow_head"}))
    return out


def documented_path(canonical: str) -> str:
    """A route's documented path: the form without the trailing slash that :func:`slash_routes` also serves."""
    return canonical.rstrip("/") or "/"


def route_table() -> list[tuple[str, str]]:
    """(method, path) of every route, for the OpenAPI document and its test."""
    out: list[tuple[str, str]] = []
    for r in routes():
        info: Any = r
        out.append((info.method, info.path))
    return out
