"""The Kafka socket server: one asyncio listener per Kafka listener, as Kafka's ``SocketServer``.

Framing: every request and response is a 4-byte big-endian size and that many bytes. A size above
``socket.request.max.bytes`` (or below zero) closes the connection before any of the request is read, as Kafka
does (``InvalidReceiveException``): nothing the client could send afterwards would be in step with the stream.

Ordering: a connection is muted while one of its requests is processed, as Kafka mutes a channel until its
response is sent. Clients pipeline (librdkafka keeps up to five requests in flight): the following requests are
read ahead into the connection's buffer (bounded by ``READ_AHEAD_BYTES``; beyond it the transport stops
reading, and TCP's window pushes back on the client), but the next one is taken only after the previous answer
was written, so responses leave in request order and each correlation id is answered exactly once. A request
that needs no answer (a produce with acks=0) just lets the next one in.

Lifetime: a connection with no complete request for ``connections.max.idle.ms`` is closed (counted while
waiting for a request or its bytes, not while the broker works on one or while the connection is muted). ``stop``
stops accepting, then closes every connection (cancelling the request it was working on) and waits for them, so a
broker shutting down leaves no socket behind. The dispatcher's ``CloseConnection`` closes the connection too
(after an acks=0 produce failed, the only way Kafka has to tell that client), after writing the final answer it
may carry (a failed SASL authentication's). Any other exception out of the dispatcher is a bug: it is logged and
the connection closed, never answered with a guess.

Security: SSL and SASL_SSL listeners speak TLS with the broker's server context (the HTTPS listeners' certificate
and ``ssl.client.auth``); on an SSL listener the connection's principal is its client certificate's subject
(``User:CN=...``, as the HTTP side maps it) or ``User:ANONYMOUS``. On a SASL listener a connection starts
unauthenticated: until broker/kafka/sasl.py marks it authenticated, a frame may be at most
``sasl.server.max.receive.size`` (512 KiB, Kafka's default), so no one unauthenticated makes the broker buffer
``socket.request.max.bytes``.

Throttling (KIP-219): the dispatcher may ``throttle`` the connection for a time (a client quota's). Then the
connection is muted: no next request of it is processed until the time has passed; the response goes out at
once, or, for clients older than KIP-219 (``hold_response``), only when the time is over, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from broker.kafka.listeners import KafkaListener
from broker.security.authorizer import ANONYMOUS
from broker.security.tls import peer_principal

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
DEFAULT_IDLE_TIMEOUT_MS = 600_000  # Kafka's connections.max.idle.ms
SASL_MAX_RECEIVE_BYTES = 524_288  # Kafka's sasl.server.max.receive.size: a frame before authentication
READ_AHEAD_BYTES = 64 * 1024  # buffered beyond the request being processed before reading pauses (x2)

_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """The dispatcher's answer is to close the connection instead of responding (after writing ``response``,
    when given: the last word Kafka sends before it closes, e.g. a failed authentication's)."""

    def __init__(self, message: str, response: bytes | None = None) -> None:
        super().__init__(message)
        self.response = response


@dataclass(slots=True, eq=False)
class Connection:
    """What a handler may know of the connection a request came on, and who it is.

    ``principal`` is ANONYMOUS until the listener's security says otherwise (a client certificate on SSL, a SASL
    exchange on SASL_*); ``authenticated`` is False only on a SASL listener before its exchange completed.
    ``sasl`` is the SASL layer's own per-connection state (broker/kafka/sasl.py); nothing else reads it."""

    id: str
    listener: KafkaListener
    host: str  # the client's address (what ACLs match as the host)
    port: int
    principal: str = ANONYMOUS
    authenticated: bool = field(init=False)
    sasl: Any = field(default=None, init=False)
    _throttle_ms: int = field(default=0, init=False)
    _hold_response: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.authenticated = not self.listener.sasl

    def throttle(self, ms: int, *, hold_response: bool = False) -> None:
        """Mute the connection for ``ms`` after the current request (KIP-219); ``hold_response``: answer only
        then (clients that do not throttle themselves)."""
        if ms > self._throttle_ms:
            self._throttle_ms = ms
        self._hold_response = self._hold_response or hold_response

    def take_throttle(self) -> tuple[float, bool]:
        """The mute the current request asked for, in seconds, and whether its response waits; resets both."""
        ms, hold = self._throttle_ms, self._hold_response
        self._throttle_ms, self._hold_response = 0, False
        return ms / 1000, hold


Dispatch = Callable[[Connection, bytes], Awaitable[bytes | None]]


class KafkaServer:
    def __init__(self, listeners: tuple[KafkaListener, ...], dispatch: Dispatch, *,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: the server context of the TLS listeners (SSL, SASL_SSL); required when there is one."""
        tls = [str(lst) for lst in listeners if lst.tls]
        if tls and ssl_context is None:
            raise ValueError(f"Kafka listeners {', '.join(tls)} need a TLS context (--ssl-certfile/--ssl-keyfile)")
        self.listeners = listeners
        self._ssl_context = ssl_context
        self._dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_ms / 1000
        self._servers: list[tuple[KafkaListener, asyncio.Server]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count()
        self._stopping = False

    async def start(self) -> None:
        """Bind every listener; OSError (naming the address) if one cannot be bound, with none left bound."""
        try:
            for lst in self.listeners:
                try:
                    server = await asyncio.start_server(
                        lambda r, w, lst=lst: self._serve(lst, r, w), lst.host, lst.port,
                        reuse_address=True, limit=READ_AHEAD_BYTES, ssl=self._ssl_context if lst.tls else None)
                except OSError as e:
                    raise OSError(e.errno, f"cannot listen on {lst.host}:{lst.port} ({lst.name}): {e.strerror}") \
                        from None
                self._servers.append((lst, server))
        except BaseException:
            await self.stop()
            raise

    def bound_port(self, name: str) -> int:
        """The port a listener is bound to (its configured one, or the kernel's pick for port 0)."""
        for lst, server in self._servers:
            if lst.name == name:
                return int(server.sockets[0].getsockname()[1])
        raise KeyError(name)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection, wait (bounded) until they are all gone."""
        self._stopping = True
        for _, server in self._servers:
            server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            if pending:
                log.warning("%d Kafka connections did not close within %.0f s", len(pending), timeout_s)
        for _, server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), timeout_s)
        self._servers.clear()

    async def _serve(self, listener: KafkaListener, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._stopping:
            writer.close()
            return
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        local = writer.get_extra_info("sockname") or ("?", 0)
        conn = Connection(f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{next(self._ids)}", listener,
                          str(peer[0]), int(peer[1]))
        if listener.security_protocol == "SSL":  # on SASL_SSL the SASL exchange names the principal instead
            conn.principal = peer_principal(writer.get_extra_info("peercert")) or ANONYMOUS
        try:
            await self._requests(conn, reader, writer)
        except asyncio.CancelledError:
            pass  # broker shutdown: close below
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _requests(self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        idle_s = self.idle_timeout_s
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    head = await reader.readexactly(4)
                    (size,) = _SIZE.unpack(head)
                    limit = self.max_request_bytes if conn.authenticated else min(self.max_request_bytes,
                                                                                  SASL_MAX_RECEIVE_BYTES)
                    if size < 0 or size > limit:
                        log.warning("Kafka connection %s: a request of %d bytes is over %s (%d); closing the "
                                    "connection", conn.id, size, "socket.request.max.bytes" if conn.authenticated
                                    else "sasl.server.max.receive.size", limit)
                        return
                    frame = await reader.readexactly(size)
            except TimeoutError:
                log.info("Kafka connection %s idle for %.0f s (connections.max.idle.ms); closing it", conn.id,
                         idle_s)
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client closed (or reset) the connection
            try:
                response = await self._dispatch(conn, frame)
            except CloseConnection as e:
                log.info("Kafka connection %s: closing: %s", conn.id, e)
                if e.response is not None:
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        writer.write(e.response)
                        await asyncio.wait_for(writer.drain(), 5.0)
                return
            except Exception:
                log.exception("Kafka connection %s: a request failed; closing the connection", conn.id)
                return
            mute_s, hold = conn.take_throttle()
            if hold and mute_s > 0:
                await asyncio.sleep(mute_s)  # an old client: the answer itself is the throttle
                mute_s = 0
            if response is not None:
                try:
                    writer.write(response)
                    await writer.drain()
                except ConnectionError:
                    return
            if mute_s > 0:
                await asyncio.sleep(mute_s)  # KIP-219: answered at once, muted until the throttle time is over
