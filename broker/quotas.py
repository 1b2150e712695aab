"""Client and user quotas (Kafka's ClientQuotaManager, KIP-13/KIP-55/KIP-124/KIP-219) and the token bucket shared
with the replication throttle (broker/replication/throttle.py).

Quotas: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second, per broker) and
``request_percentage`` (percent of one thread's time per second), stored in ``/config/clients/<client id>`` and
``/config/users/<user>`` with ``<default>`` entities (zk/configs.py), read from the metadata cache, which the
broker keeps current from ``/config/changes`` (broker/metadata/watcher.py): a change applies without a restart.

Who a request is: its client id is the ``Odradek-Client-Id`` header, and a request without one has the client
id ``""`` (Kafka's empty client id), so ``<default>`` client quotas hold curl and REST-proxy clients too. Its user
is the name of the principal security authenticated (``User:alice`` -> ``alice``); on an open
cluster, or for ``User:ANONYMOUS``, there is no user and only client-id quotas apply.

Which quota (per kind, KIP-55's precedence, most specific first): user+client, user+<default> client, user,
<default> user+client, <default> user+<default> client, <default> user, client, <default> client. The budget
is that of the matched entity as Kafka shares it: a quota that names or defaults the client is counted per
(user, client id), a user-level one (user, <default> user) is shared by all that user's clients on the broker,
and a client-level one is shared by every user of that client id. Nested user+client entities are read from
the cache under ``("users/<user>/clients", <client id>)`` (Kafka's ``/config/users/<user>/clients/<client id>``
split at its last level), as zk/configs.py stores them and ``odradek configs`` writes them (two
``--entity-type``/``--entity-name`` pairs, as kafka-configs).

Exempt: replica fetches (``replica_id``; replication has its own throttle) and inter-broker requests (a broker
forwarding a produce or a read to the leader). On a secured cluster a request is inter-broker when its principal
is a broker's: a super user, or a principal an ACL allows ClusterAction on the cluster (not the
``allow.everyone.if.no.acl.found`` fallback); a client sending the marker header gains nothing. On an open
cluster everyone is ANONYMOUS and, as Kafka without an authorizer lets any caller claim ClusterAction (and as our
replica fetches' ``replica_id`` is believed), the ``Odradek-Inter-Broker`` header is believed: client ids are
self-declared there anyway (a fresh id is a fresh budget), so client quotas on an open cluster bind cooperating
clients only.

Enforcement as KIP-219 (Kafka 2.0+): the response goes out at once and says how long the client is throttled
(the ``Odradek-Throttle-Time-Ms`` header, and ``throttle_time_ms`` in a produce answer's body, both only when a
quota applies to the request); the broker then "mutes" the client (user, client id): its next produce or fetch
waits here until the throttle time has passed, so a client that ignores the hint is held to its quota anyway.
The throttle time is the budget's deficit over the rate (a token bucket that may go into debt), which is
Kafka's ``(O - T) / T * window`` over a sliding window.

The Kafka door (broker/kafka/quotas.py) spends the same budgets through ``match`` and ``record_match``, with the
connection's principal and the request header's client id, and mutes the connection itself (KIP-219).

Cost: with no quota configured, a request costs one identity check of the cache's config map (the watcher
replaces the map on every change; the quota index is rebuilt only then).

Concurrency: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

import orjson
from aiohttp import web

from broker.metadata.cache import MetadataCache
from broker.security.authorizer import ANONYMOUS
from broker.security.middleware import PRINCIPAL_KEY, SECURITY

CLIENT_ID = "Odradek-Client-Id"
INTER_BROKER = "Odradek-Inter-Broker"  # a broker's own request (value: its id); believed only as described above
THROTTLE_TIME_MS = "Odradek-Throttle-Time-Ms"
# A request's body size as read (a chunked body has no Content-Length).
BODY_BYTES: web.RequestKey[int] = web.RequestKey("body_bytes", int)
DEFAULT = "<default>"
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
KINDS = (PRODUCE, FETCH, REQUEST)
MAX_THROTTLE_MS = 30_000  # Kafka caps the throttle at the quota window span; a client must never hang forever

# (user entity, client entity): None = the level is absent (a user-only or client-only quota)
Entity = tuple[str | None, str | None]
# (kind, user tag, client tag): whose budget is spent; None = shared across that level
BudgetKey = tuple[str, str | None, str | None]
Match = tuple[float, BudgetKey]


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


def user_client_entity(user: str, client_id: str) -> tuple[str, str]:
    """The metadata cache key of the nested ``/config/users/<user>/clients/<client id>`` entity (desanitized
    names, as the cache holds the others; unambiguous, since the real entity types never contain a slash)."""
    return f"users/{user}/clients", client_id


def _entity_of(key: tuple[str, str]) -> Entity | None:
    entity_type, name = key
    if entity_type == "clients":
        return None, name
    if entity_type == "users":
        return name, None
    if entity_type.startswith("users/") and entity_type.endswith("/clients") and len(entity_type) > 14:
        return entity_type[6:-8], name
    return None  # brokers: not quotas


def quota_index(dynamic: Mapping[tuple[str, str], Mapping[str, str]]) -> dict[str, dict[Entity, float]]:
    """kind -> {entity: rate} for every positive, well-formed quota in the cache's entity configs."""
    index: dict[str, dict[Entity, float]] = {}
    for key, config in dynamic.items():
        entity = _entity_of(key)
        if entity is None:
            continue
        for kind in KINDS:
            raw = config.get(kind)
            if raw is None:
                continue
            try:
                value = float(raw)
            except ValueError:
                continue
            if value > 0:
                index.setdefault(kind, {})[entity] = value
    return index


def resolve(entries: Mapping[Entity, float], kind: str, user: str | None, client_id: str) -> Match | None:
    """The quota of ``kind`` that applies to (user, client id), and whose budget it spends (KIP-55's order)."""
    if user is not None:
        for u, c, budget in ((user, client_id, client_id), (user, DEFAULT, client_id), (user, None, None),
                             (DEFAULT, client_id, client_id), (DEFAULT, DEFAULT, client_id), (DEFAULT, None, None)):
            value = entries.get((u, c))
            if value is not None:
                return value, (kind, user, budget)
    for c in (client_id, DEFAULT):
        value = entries.get((None, c))
        if value is not None:
            return value, (kind, None, client_id)
    return None


class ClientQuotaManager:
    """Budgets per matched quota entity; the quota values come from the metadata cache, indexed once per change."""

    def __init__(self, cache: MetadataCache, now: Callable[[], float] = time.monotonic) -> None:
        self._cache = cache
        self._now = now
        self._buckets: dict[BudgetKey, TokenBucket] = {}
        self._muted_until: dict[tuple[str | None, str], float] = {}
        self._seen: object = None
        self._index: dict[str, dict[Entity, float]] = {}

    def active(self) -> bool:
        """Whether any quota is configured at all (the hot path's one check)."""
        dynamic = self._cache.dynamic
        if dynamic is not self._seen:
            self._index = quota_index(dynamic)
            self._seen = dynamic
            self._buckets = {k: b for k, b in self._buckets.items() if k[0] in self._index}
            if not self._index:
                self._muted_until.clear()
        return bool(self._index)

    def match(self, kind: str, user: str | None, client_id: str) -> Match | None:
        """The quota of ``kind`` that applies, with its budget key; None when none does."""
        self.active()
        entries = self._index.get(kind)
        return resolve(entries, kind, user, client_id) if entries else None

    def quota(self, kind: str, client_id: str, user: str | None = None) -> float | None:
        found = self.match(kind, user, client_id)
        return None if found is None else found[0]

    async def wait_unmuted(self, client_id: str, user: str | None = None) -> None:
        """KIP-219's muted channel: hold the client's next request until its throttle time is over."""
        key = (user, client_id)
        until = self._muted_until.get(key)
        if until is None:
            return
        wait = until - self._now()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._muted_until.get(key) == until:
            del self._muted_until[key]

    def record_match(self, found: Match, amount: float, client_id: str, user: str | None = None) -> int:
        """Count ``amount`` against the matched budget; the throttle time in ms (0 if none), muting the client."""
        quota, key = found
        rate = quota / 100.0 if key[0] == REQUEST else quota  # request_percentage: seconds of work per second
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(rate, now=self._now)
        elif bucket.rate != rate:
            bucket.set_rate(rate)
        throttle_ms = min(MAX_THROTTLE_MS, int(bucket.record(amount) * 1000))
        if throttle_ms > 0:
            mute = (user, client_id)
            self._muted_until[mute] = max(self._muted_until.get(mute, 0.0), self._now() + throttle_ms / 1000)
        return throttle_ms

    def record(self, kind: str, client_id: str, amount: float, user: str | None = None) -> int:
        """Count ``amount`` against the quota of ``kind`` that applies; the throttle time in ms (0 if none)."""
        found = self.match(kind, user, client_id)
        return 0 if found is None else self.record_match(found, amount, client_id, user)


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


def identity(request: web.Request) -> tuple[str | None, str] | None:
    """(user, client id) whose quotas the request spends; None for an inter-broker request (exempt)."""
    service = request.app.get(SECURITY)
    principal = request.get(PRINCIPAL_KEY)
    if service is None:
        if INTER_BROKER in request.headers:
            return None
        user = None
    else:
        if principal is not None and service.is_broker(principal, request.remote or "*"):
            return None
        user = None if principal is None or principal == ANONYMOUS else principal.removeprefix("User:")
    return user, request.headers.get(CLIENT_ID, "")


async def metered(quotas: ClientQuotaManager, request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """``handler``'s answer under the caller's client quotas (``quotas`` has some): muted first while throttled,
    then what it spent recorded and the throttle time reported."""
    kind = _kind(request)
    who = identity(request) if kind is not None else None
    if kind is None or who is None:
        return await handler(request)
    user, client_id = who
    data, work = quotas.match(kind, user, client_id), quotas.match(REQUEST, user, client_id)
    if data is None and work is None:
        return await handler(request)
    await quotas.wait_unmuted(client_id, user)
    started = time.perf_counter()
    response = await handler(request)
    throttle_ms = 0
    if data is not None:
        if kind == PRODUCE:
            # Content-Length, or what was read of a chunked body (set by the front middleware's limits or a
            # handler that streams its body)
            amount = request.content_length if request.content_length is not None else \
                int(request.get(BODY_BYTES, 0))
        else:
            body = getattr(response, "body", None)
            # a zero-copy fetch answer (broker/api/fetch.py) has no body in memory: its Content-Length counts
            amount = len(body) if isinstance(body, bytes | bytearray) else (response.content_length or 0)
        throttle_ms = quotas.record_match(data, amount, client_id, user)
    if work is not None:
        throttle_ms = max(throttle_ms, quotas.record_match(work, time.perf_counter() - started, client_id, user))
    response.headers[THROTTLE_TIME_MS] = str(throttle_ms)
    if kind == PRODUCE and isinstance(response, web.Response):
        _add_body_field(response, throttle_ms)
    return response


def _add_body_field(response: web.Response, throttle_ms: int) -> None:
    """Give a JSON produce answer Kafka's ``throttle_time_ms`` field, spliced in after its opening brace: no
    parse and re-encode of a large answer (a REST v2 answer of 1,000 offsets)."""
    body = response.body
    if not isinstance(body, bytes) or not body.startswith(b"{"):
        return
    if b'"throttle_time_ms"' in body:  # never a duplicate key: the rare slow path
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        obj["throttle_time_ms"] = throttle_ms
        response.body = orjson.dumps(obj)
        return
    field = b'{"throttle_time_ms":%d' % throttle_ms
    rest = body[1:]
    response.body = field + (rest if rest.lstrip().startswith(b"}") else b"," + rest)
