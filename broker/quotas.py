"""Client quotas (Kafka's ClientQuotaManager, KIP-13/KIP-124/KIP-219) and the token bucket shared with the
replication throttle (broker/replication/throttle.py).

Quotas: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second, per broker) and
``request_percentage`` (percent of one thread's time per second), per client id, with ``<default>`` for client
ids without their own entry, stored in ``/config/clients/<id>`` (zk/configs.py) and read from the metadata
cache, which the broker keeps current from ``/config/changes`` (broker/metadata/watcher.py): a change applies
without a restart. Each client id has its own budget on each broker, as in Kafka.

Enforcement as KIP-219 (Kafka 2.0+): the response goes out at once and says how long the client is throttled
(the ``Odradek-Throttle-Time-Ms`` header, and ``throttle_time_ms`` in a produce answer's body); the broker then
"mutes" the client: its next produce or fetch waits here until the throttle time has passed, so a client that
ignores the hint is held to its quota anyway. The throttle time is the budget's deficit over the rate (a token
bucket that may go into debt), which is Kafka's ``(O - T) / T * window`` over a sliding window.

The client id comes from the ``Odradek-Client-Id`` request header (the Python client sends its ``client_id``).
Requests without it (brokers forwarding to each other, replica fetches) are not subject to client quotas;
replication has its own throttle.

Concurrency: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from broker.metadata.cache import MetadataCache

CLIENT_ID = "Odradek-Client-Id"
THROTTLE_TIME_MS = "Odradek-Throttle-Time-Ms"
DEFAULT = "<default>"
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
MAX_THROTTLE_MS = 30_000  # Kafka caps the throttle at the quota window span; a client must never hang forever


class TokenBucket:
    """A rate limiter that may go into debt: ``record(n)`` spends ``n`` and returns how long to wait until the
    balance is back to zero. Starts empty (no initial burst) and saves at most ``burst_s`` of unused rate, so
    the long-run rate is the configured one whatever the request sizes."""

    def __init__(self, rate: float, burst_s: float = 1.0, now: Callable[[], float] = time.monotonic) -> None:
        self.rate = float(rate)
        self.burst_s = burst_s
        self._now = now
        self._tokens = 0.0
        self._last = now()

    def _refill(self) -> None:
        now = self._now()
        self._tokens = min(self.rate * self.burst_s, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def set_rate(self, rate: float) -> None:
        self._refill()
        self.rate = float(rate)

    def record(self, amount: float) -> float:
        """Spend ``amount``; the seconds until the debt is paid (0 when within the budget)."""
        self._refill()
        self._tokens -= amount
        return max(0.0, -self._tokens / self.rate) if self.rate > 0 else 0.0

    async def spend(self, amount: float) -> None:
        """``record`` and wait off the debt (the replication throttle's way: it delays the data itself)."""
        wait = self.record(amount)
        if wait > 0:
            await asyncio.sleep(wait)

    def delay(self) -> float:
        self._refill()
        return max(0.0, -self._tokens / self.rate) if self.rate > 0 else 0.0

    def cap(self, max_bytes: int, floor: int = 16384) -> int:
        """A read size that keeps each step short: at most half a second of the rate."""
        return max(1, min(max_bytes, max(floor, int(self.rate / 2))))


class ClientQuotaManager:
    """Budgets per (quota, client id); the quota values are looked up in the metadata cache on every use."""

    def __init__(self, cache: MetadataCache, now: Callable[[], float] = time.monotonic) -> None:
        self._cache = cache
        self._now = now
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._muted_until: dict[str, float] = {}

    def quota(self, kind: str, client_id: str) -> float | None:
        """The client's own entry, else ``<default>`` (Kafka's precedence for client-id quotas)."""
        for name in (client_id, DEFAULT):
            value = self._cache.dynamic.get(("clients", name), {}).get(kind)
            if value is not None:
                try:
                    return float(value)
                except ValueError:
                    return None
        return None

    async def wait_unmuted(self, client_id: str) -> None:
        """KIP-219's muted channel: hold the client's next request until its throttle time is over."""
        until = self._muted_until.get(client_id, 0.0)
        wait = until - self._now()
        if wait > 0:
            await asyncio.sleep(wait)

    def record(self, kind: str, client_id: str, amount: float) -> int:
        """Count ``amount`` against the client's quota of ``kind``; returns the throttle time in ms (0 if none)."""
        quota = self.quota(kind, client_id)
        key = (kind, client_id)
        if quota is None or quota <= 0:
            self._buckets.pop(key, None)
            return 0
        rate = quota / 100.0 if kind == REQUEST else quota  # request_percentage: seconds of work per second
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(rate, now=self._now)
        elif bucket.rate != rate:
            bucket.set_rate(rate)
        throttle_ms = min(MAX_THROTTLE_MS, int(bucket.record(amount) * 1000))
        if throttle_ms > 0:
            until = self._now() + throttle_ms / 1000
            self._muted_until[client_id] = max(self._muted_until.get(client_id, 0.0), until)
        return throttle_ms


def _kind(request: web.Request) -> str | None:
    """PRODUCE, FETCH or None for the routes client quotas cover (replica fetches are not a client's)."""
    resource = request.match_info.route.resource
    path = resource.canonical if resource is not None else ""
    if not path.startswith("/topics/"):
        return None
    if request.method == "POST":
        return PRODUCE
    if request.method == "GET" and (path.endswith("/records") or path.endswith("/batches")):
        return None if int(request.query.get("replica_id", "-1") or -1) >= 0 else FETCH
    return None


def quota_middleware(manager: Callable[[web.Request], ClientQuotaManager | None]) -> Callable[..., Awaitable[
        web.StreamResponse]]:
    """The one place client quotas touch request handling: mute, handle, count, report."""

    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        client_id = request.headers.get(CLIENT_ID)
        kind = _kind(request) if client_id is not None else None
        quotas = manager(request) if kind is not None else None
        if quotas is None or client_id is None or kind is None:
            return await handler(request)
        await quotas.wait_unmuted(client_id)
        started = time.perf_counter()
        response = await handler(request)
        if kind == PRODUCE:
            amount = request.content_length or 0
        else:
            body = getattr(response, "body", None)
            # a zero-copy fetch answer (broker/api/fetch.py) has no body in memory: its Content-Length counts
            amount = len(body) if isinstance(body, bytes | bytearray) else (response.content_length or 0)
        throttle_ms = quotas.record(kind, client_id, amount)
        throttle_ms = max(throttle_ms, quotas.record(REQUEST, client_id, time.perf_counter() - started))
        response.headers[THROTTLE_TIME_MS] = str(throttle_ms)
        if kind == PRODUCE and isinstance(response, web.Response):
            _add_body_field(response, throttle_ms)
        return response

    return middleware


def _add_body_field(response: web.Response, throttle_ms: int) -> None:
    """Produce answers are small JSON objects: give them Kafka's ``throttle_time_ms`` field too."""
    body = response.body
    if not isinstance(body, bytes) or not body.startswith(b"{"):
        return
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    obj["throttle_time_ms"] = throttle_ms
    response.body = orjson.dumps(obj)
