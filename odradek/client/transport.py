"""HTTP to the brokers with the standard library: pooled keep-alive connections, typed errors.

Why ``http.client`` and not a third-party client: a producer or consumer talks to a handful of brokers with small
requests, so connection reuse is what matters, and ``http.client`` over a kept-alive socket is as fast as anything
in pure Python, with nothing to install. Every failure leaves here as an :class:`~odradek.protocol.errors.OdradekError`:
error envelopes through :func:`~odradek.protocol.errors.error_for`, a refused or dropped connection as the retriable
``BROKER_NOT_AVAILABLE`` and a socket timeout as the retriable ``REQUEST_TIMED_OUT``, so callers decide retries
from one attribute (``retriable``) whatever went wrong.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode, urlsplit

import orjson

from odradek.client.security import ClientSecurity
from odradek.protocol import media
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    OdradekError,
    RequestTimedOutError,
    UnknownServerError,
    error_for,
)

__all__ = [
    "BATCHES_MEDIA_TYPE",
    "JSON_MEDIA_TYPE",
    "Response",
    "Transport",
    "normalize_url",
    "parse_bootstrap",
    "quote_path",
]

BATCHES_MEDIA_TYPE = media.BATCHES
JSON_MEDIA_TYPE = media.PLAIN_JSON
CLIENT_ID_HEADER = "Odradek-Client-Id"
_ENVELOPE_KEYS = frozenset({"error_code", "message", "error", "retriable"})
# A kept-alive socket the server has closed in the meantime fails like this on first use; the request never
# reached the application, so it is safe to send it again once on a fresh connection.
_STALE_CONNECTION_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def normalize_url(server: str) -> str:
    """``host:port`` or ``http://host:port/`` -> ``http://host:port`` (the key of the connection pool)."""
    server = server.strip().rstrip("/")
    if "://" not in server:
        server = "http://" + server
    return server


def parse_bootstrap(servers: str | Sequence[str]) -> list[str]:
    """Accept ``"a:9092,b:9093"`` or a list; drop blanks and duplicates, keep order."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    urls: list[str] = []
    for item in items:
        if item.strip():
            url = normalize_url(item)
            if url not in urls:
                urls.append(url)
    if not urls:
        raise ValueError("bootstrap_servers names no broker")
    return urls


def quote_path(*segments: str | int) -> str:
    """Join path segments, each percent-encoded (topic names are safe today; the contract may widen)."""
    return "/" + "/".join(quote(str(s), safe="") for s in segments)


class Response(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


class _Connection(http.client.HTTPConnection):
    """Nagle off: a request is one small write and we wait for its answer, so delaying it only adds latency."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _TLSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Transport:
    """A keep-alive connection pool per broker URL, shared by the threads of one client.

    Thread-safe: a connection belongs to one request at a time (taken from the idle list, returned after the
    whole answer is read), so concurrent requests to one broker simply use several connections.
    """

    def __init__(self, request_timeout_ms: int = 30000, max_idle_per_broker: int = 16,
                 client_id: str | None = None, security: ClientSecurity | None = None) -> None:
        self.request_timeout_ms = request_timeout_ms
        # TLS and credentials (odradek/client/security.py): one context and one header for every request.
        self.security = security
        self._ssl = security.ssl_context() if security is not None and security.tls else None
        self._authorization = security.authorization() if security is not None else None
        # Sent as Odradek-Client-Id on every request: brokers apply client quotas by it (Kafka's client.id).
        self.client_id = client_id
        self._max_idle = max_idle_per_broker
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------------------------------- requests

    def request(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        timeout_ms: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request and read the whole answer; a status >= 400 raises its typed error. ``headers``: more
        request headers.

        Raises:
            OdradekError: the broker's error envelope, rebuilt; ``BrokerNotAvailableError`` when the broker
                cannot be reached or drops the connection; ``RequestTimedOutError`` when it does not answer
                within ``timeout_ms`` (default: the transport's request timeout).
        """
        if query:
            path = f"{path}?{urlencode(query)}"
        headers = {**(headers or {}), "Accept": accept or JSON_MEDIA_TYPE}
        if self.client_id is not None:
            headers[CLIENT_ID_HEADER] = self.client_id
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        if body is not None:
            headers["Content-Type"] = content_type or JSON_MEDIA_TYPE
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000.0
        for attempt in (0, 1):
            conn, reused = self._acquire(base_url, timeout)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except _STALE_CONNECTION_ERRORS as exc:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise BrokerNotAvailableError(f"{base_url} dropped the connection: {exc}", url=base_url) from exc
            except TimeoutError as exc:
                conn.close()
                raise RequestTimedOutError(
                    f"{base_url} did not answer {method} {path} within {timeout:.3f} s", url=base_url
                ) from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise BrokerNotAvailableError(f"cannot reach {base_url}: {exc}", url=base_url) from exc
            if resp.will_close:
                conn.close()
            else:
                self._release(base_url, conn)
            if resp.status >= 400:
                raise _error_from(resp.status, data, base_url)
            return Response(resp.status, resp.headers, data)
        raise AssertionError("unreachable")  # pragma: no cover

    def get_json(self, base_url: str, path: str, **kwargs: Any) -> Any:
        return self.request(base_url, "GET", path, **kwargs).json()

    def send_json(self, base_url: str, method: str, path: str, payload: Any, **kwargs: Any) -> Any:
        return self.request(base_url, method, path, body=orjson.dumps(payload), **kwargs).json()

    def close(self) -> None:
        """Close idle connections; ones in use are closed when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    # ----------------------------------------------------------------------------------------------- pool

    def _acquire(self, base_url: str, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise BrokerNotAvailableError("the client is closed")
            conns = self._idle.get(base_url)
            conn = conns.pop() if conns else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        parts = urlsplit(base_url)
        if not parts.hostname:
            raise BrokerNotAvailableError(f"bad broker URL {base_url!r}")
        if parts.scheme == "https" or self._ssl is not None:
            return _TLSConnection(parts.hostname, parts.port, timeout=timeout, context=self._ssl), False
        return _Connection(parts.hostname, parts.port, timeout=timeout), False

    def _release(self, base_url: str, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                conns = self._idle.setdefault(base_url, [])
                if len(conns) < self._max_idle:
                    conns.append(conn)
                    return
        conn.close()


def _error_from(status: int, data: bytes, base_url: str) -> OdradekError:
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and ("error" in body or "error_code" in body):
        # "name" would collide with error_for's own parameter; no envelope field is called that today.
        details = {("detail_name" if k == "name" else k): v for k, v in body.items() if k not in _ENVELOPE_KEYS}
        code = body.get("error_code")
        return error_for(
            body.get("error"),
            code if isinstance(code, int) else None,
            str(body.get("message") or ""),
            **details,
        )
    text = data[:200].decode("utf-8", "replace")
    if status in (502, 503, 504):  # a proxy or a broker still starting: worth another try elsewhere
        return BrokerNotAvailableError(f"{base_url} answered HTTP {status}: {text}", url=base_url)
    return UnknownServerError(f"{base_url} answered HTTP {status}: {text}", status=status)
