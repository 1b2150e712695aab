"""The one HTTP client a broker uses to talk to other brokers (as aiokafka's ``client.send(node_id, request)``).

Why one: forwarded produces and reads, follower fetches, consumer-instance and group forwards and controlled
shutdown all cross the same boundary, so they share one connection pool, one TLS context (the broker's client
context: every broker trusts the same CA), one set of identity headers (the inter-broker credentials, plus
``Odradek-Inter-Broker`` so a forward is never charged to a client's quota), one timeout policy and one decoding
of error answers into the typed hierarchy of ``odradek.protocol.errors``.

Invariants:

* a reply with status >= 400 never reaches a caller as a reply: it is raised as the remote's typed error (its
  ``error`` name first, then its ``error_code``, then a class for the bare HTTP status), details kept;
* a transport failure is ``BrokerNotAvailableError``; ``sent=False`` in its details when no byte of the request
  left (the connection never opened, so a produce may be retried), absent when the outcome is unknown (and on
  a TLS failure, which retrying will not heal);
* the timeout of a request is ``CONNECT_TIMEOUT_S`` to connect and ``REQUEST_TIMEOUT_S`` plus the time the remote
  may legitimately hold it (a long-poll, an acks wait: ``Request.wait_ms``) in all, unless the request says;
* forwarded requests (``FORWARD``: a client's produce, read or call passed on) hold at most ``max_connections``
  connections at once, so a thousand forwarded long-polls wait for a connection instead of opening a thousand;
  replication and control requests (``REPLICATION``) do not queue behind them, so client load cannot starve
  followers out of the ISR. Their number is bounded by the follower partitions, one fetch each.
* the client never retries on its own: whether a retry is safe depends on the request (a produce that may have
  been appended is not), so callers decide, from ``retriable`` and ``sent``.

Concurrency: one instance per broker process, used from the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from broker.quotas import INTER_BROKER  # a broker's own request (value: its id), exempt from client quotas
from odradek.protocol.errors import (
    AuthenticationFailedError,
    BrokerNotAvailableError,
    InvalidRequestError,
    MethodNotAllowedError,
    OdradekError,
    RequestTimedOutError,
    RequestTooLargeError,
    RouteNotFoundError,
    UnknownServerError,
    UnsupportedMediaTypeError,
    error_for,
)

__all__ = [
    "CONNECT_TIMEOUT_S", "FORWARD", "INTER_BROKER", "REPLICATION", "REQUEST_TIMEOUT_S",
    "InterBrokerClient", "Reply", "Request", "decode_error",
]

CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 30.0
FORWARD = "forward"
REPLICATION = "replication"

# An error answer without an Odradek envelope (a proxy's page, an aiohttp default): the closest typed error.
_BY_STATUS: dict[int, type[OdradekError]] = {
    400: InvalidRequestError, 401: AuthenticationFailedError, 404: RouteNotFoundError,
    405: MethodNotAllowedError, 413: RequestTooLargeError, 415: UnsupportedMediaTypeError,
    502: BrokerNotAvailableError, 503: BrokerNotAvailableError, 504: RequestTimedOutError,
}
_ENVELOPE = ("error", "error_code", "message", "retriable")


@dataclass(frozen=True, slots=True)
class Request:
    """One request to another broker. ``path`` starts with ``/`` and may carry a query (a forwarded
    ``request.rel_url``); ``wait_ms`` is how long the remote may hold it before answering."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    wait_ms: int = 0
    timeout_s: float | None = None  # the whole request's bound, instead of the policy's
    lane: str = FORWARD


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful (< 400) answer, read in full."""

    node_id: int | None
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else {}


def decode_error(status: int, body: bytes) -> OdradekError:
    """The typed error an error answer stands for: the one decoding of the inter-broker boundary."""
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or ("error" not in parsed and "error_code" not in parsed):
        text = body[:200].decode("utf-8", "replace").strip()
        message = (parsed or {}).get("message") if isinstance(parsed, dict) else None
        cls = _BY_STATUS.get(status, UnknownServerError)
        return cls(str(message or text or f"HTTP {status}"))
    code = parsed.get("error_code")
    extra = {k: v for k, v in parsed.items() if k not in _ENVELOPE}
    return error_for(parsed.get("error"), code if isinstance(code, int) else None,
                     str(parsed.get("message") or ""), **extra)


class InterBrokerClient:
    """``send(node_id, request)`` to a broker by id (its registered URL from ``locate``), or ``send_to`` a URL
    the caller already holds (a leader named in a NOT_LEADER_OR_FOLLOWER answer)."""

    def __init__(self, broker_id: int, locate: Callable[[int], str | None], *,
                 ssl_context: ssl.SSLContext | None = None, headers: Mapping[str, str] | None = None,
                 max_connections: int = 100) -> None:
        self.broker_id = broker_id
        self._locate = locate
        self._ssl = ssl_context
        self._headers = {**(headers or {}), INTER_BROKER: str(broker_id)}
        self._forward_slots = asyncio.Semaphore(max_connections)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the pool (an aiohttp session must be made on the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S),
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=0, ssl=self._ssl or True),  # bounded per lane, see above
            )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url_of(self, node_id: int) -> str | None:
        return self._locate(node_id)

    async def send(self, node_id: int, request: Request) -> Reply:
        """``request`` to broker ``node_id``; its typed error if it answers one, BROKER_NOT_AVAILABLE if it is not
        registered (``sent=False``) or cannot be reached."""
        url = self._locate(node_id)
        if url is None:
            raise BrokerNotAvailableError(f"broker {node_id} is not registered right now", sent=False)
        return await self._send(url, request, node_id)

    async def send_to(self, base_url: str, request: Request) -> Reply:
        return await self._send(base_url, request, None)

    async def _send(self, base_url: str, req: Request, node_id: int | None) -> Reply:
        session = self._pool()
        total = req.timeout_s if req.timeout_s is not None else REQUEST_TIMEOUT_S + req.wait_ms / 1000
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=CONNECT_TIMEOUT_S)
        where = f"broker {node_id} at {base_url}" if node_id is not None else base_url
        try:
            async with self._slot(req.lane, total, where), session.request(
                    req.method, f"{base_url}{req.path}", params=req.params, data=req.body,
                    headers=dict(req.headers), timeout=timeout) as resp:
                body = await resp.read()
                if resp.status >= 400:
                    raise decode_error(resp.status, body)
                return Reply(node_id, resp.status, resp.headers, body)
        except aiohttp.ClientConnectorError as e:  # never connected: nothing was sent (TLS failures will not heal)
            extra = {} if isinstance(e, aiohttp.ClientSSLError) else {"sent": False}
            raise BrokerNotAvailableError(f"cannot connect to {where}: {e}", **extra) from None
        except aiohttp.ConnectionTimeoutError as e:  # sock_connect elapsed: nothing was sent either
            raise BrokerNotAvailableError(f"cannot connect to {where}: {e!r}", sent=False) from None
        except (aiohttp.ClientError, TimeoutError) as e:
            # After the request may have gone out (a reset, a dropped keep-alive connection, a timeout): the remote
            # may have acted on it, so the outcome is unknown.
            raise BrokerNotAvailableError(f"lost the connection to {where}; the request may or may not have "
                                          f"been processed: {e!r}") from None

    @contextlib.asynccontextmanager
    async def _slot(self, lane: str, wait_s: float, where: str) -> AsyncIterator[None]:
        """A forwarded request's share of the pool, waited for at most as long as the request may take."""
        if lane != FORWARD:
            yield
            return
        try:
            await asyncio.wait_for(self._forward_slots.acquire(), wait_s)
        except TimeoutError:
            raise BrokerNotAvailableError(f"no inter-broker connection came free for {where} in {wait_s:.0f} s",
                                          sent=False) from None
        try:
            yield
        finally:
            self._forward_slots.release()

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise BrokerNotAvailableError("the inter-broker client is not started", sent=False)
        return self._session
