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
waiting for a request or its bytes, not while the broker works on one). ``stop`` stops accepting, then closes
every connection (cancelling the request it was working on) and waits for them, so a broker shutting down
leaves no socket behind. The dispatcher's ``CloseConnection`` closes the connection too (after an acks=0
produce failed, the only way Kafka has to tell that client). Any other exception out of the dispatcher is a
bug: it is logged and the connection closed, never answered with a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.kafka.listeners import KafkaListener

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
DEFAULT_IDLE_TIMEOUT_MS = 600_000  # Kafka's connections.max.idle.ms
READ_AHEAD_BYTES = 64 * 1024  # buffered beyond the request being processed before reading pauses (x2)

_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """The dispatcher's answer is to close the connection instead of responding."""


@dataclass(frozen=True, slots=True)
class Connection:
    """What a handler may know of the connection a request came on."""

    id: str
    listener: KafkaListener
    host: str  # the client's address (what ACLs match as the host)
    port: int


Dispatch = Callable[[Connection, bytes], Awaitable[bytes | None]]


class KafkaServer:
    def __init__(self, listeners: tuple[KafkaListener, ...], dispatch: Dispatch, *,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS) -> None:
        self.listeners = listeners
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
                        reuse_address=True, limit=READ_AHEAD_BYTES)
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
                    if size < 0 or size > self.max_request_bytes:
                        log.warning("Kafka connection %s: a request of %d bytes is over socket.request.max.bytes "
                                    "(%d); closing the connection", conn.id, size, self.max_request_bytes)
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
                return
            except Exception:
                log.exception("Kafka connection %s: a request failed; closing the connection", conn.id)
                return
            if response is not None:
                try:
                    writer.write(response)
                    await writer.drain()
                except ConnectionError:
                    return
