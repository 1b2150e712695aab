"""The Kafka socket server: one asyncio listener per Kafka listener, as Kafka's ``SocketServer``.

Framing: every request and response is a 4-byte big-endian size and that many bytes. A size above
``socket.request.max.bytes`` (or below zero) closes the connection before any of the request is read, as Kafka
does (``InvalidReceiveException``): nothing the client could send afterwards would be in step with the stream.

Ordering: a connection is muted while one of its requests is processed, as Kafka mutes a channel until its
response is sent. Clients pipeline (librdkafka keeps up to five requests in flight): the following requests are
read ahead (complete requests up to ``READ_AHEAD_BYTES``, or one whole request of any allowed size, waiting;
beyond that the transport stops reading, and TCP's window pushes back on the client), but the next one is taken
only after the previous answer was written, so responses leave in request order and each correlation id is
answered exactly once. A request that needs no answer (a produce with acks=0) just lets the next one in.

Buffers (:class:`_Channel`): small requests are cut out of one receive buffer; a request larger than it is read
by the kernel straight into a buffer of its own size, so a megabyte produce is copied once on its way in, not
through a stream's buffer. A large answer is written in ``WRITE_CHUNK_BYTES`` pieces, each after the transport's
buffer drained, so the transport never holds (and shifts along) megabytes of a fetch answer.

Zero copy: a dispatcher may answer with a :class:`~broker.kafka.frames.ResponseFrame` (a Fetch answer whose record
sets are file ranges) instead of bytes. Its pieces go out in order, the kernel copying the ranges from the page
cache to the socket (Kafka's ``FileRecords.writeTo``): when the transport's buffer is empty, as much as the socket
takes at once is written right away under TCP_CORK (``os.write`` and ``os.sendfile``: the answer leaves as full
segments, one wake-up of the receiver rather than one per piece); the rest goes through the transport, file ranges
with ``loop.sendfile``, which waits for the transport's buffer to drain and pauses reading meanwhile. The frame's
descriptors are closed once it was sent, and also when the send fails, the connection drops or the serving task is
cancelled, whether or not its turn to be sent came. A frame cut short (a range that comes up short, a failed or
cancelled sendfile) aborts the connection: the client sees a broken answer, never a wrong one. Only listeners
without TLS are given such frames (broker/kafka/apis.py): over TLS asyncio's sendfile would read through Python
anyway.

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
import collections
import contextlib
import itertools
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from broker.kafka.frame_buffer import KeptBuffer
from broker.kafka.frames import Piece, ResponseFrame, is_file_range
from broker.kafka.listeners import KafkaListener
from broker.security.authorizer import ANONYMOUS
from broker.security.tls import peer_principal

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
DEFAULT_IDLE_TIMEOUT_MS = 600_000  # Kafka's connections.max.idle.ms
SASL_MAX_RECEIVE_BYTES = 524_288  # Kafka's sasl.server.max.receive.size: a frame before authentication
READ_AHEAD_BYTES = 64 * 1024  # complete requests read ahead (beyond the one being processed) before reading pauses
# A connection keeps one buffer up to this size for its large requests (librdkafka's are up to about 1 MB).
REUSED_BODY_BYTES = 2 * 1024 * 1024
RECEIVE_BUFFER_BYTES = 64 * 1024  # small requests are cut from this; larger ones get a buffer of their own
WRITE_CHUNK_BYTES = 256 * 1024  # a large answer goes to the transport in pieces of this size

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


Dispatch = Callable[[Connection, bytes], Awaitable[bytes | ResponseFrame | None]]
# Told the bytes of each answer sent: (through the transport, with sendfile).
SentBytes = Callable[[int, int], None]


class _OversizedRequest(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class _IdleWatch:
    """``connections.max.idle.ms`` without a timer per request: one timer per connection, armed when the serving
    task starts waiting for a request and no timer is pending. When it fires, a connection that has waited
    ``idle_s`` for its next request is closed (``on_idle``); one that was busy, or has waited less, re-arms it for
    the moment its current wait would reach ``idle_s``. A busy connection so pays two attribute writes per request
    instead of a timeout's timer handle (scheduled and cancelled on the loop's heap every request)."""

    __slots__ = ("_handle", "_idle_s", "_loop", "_on_idle", "_since")

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_s: float, on_idle: Callable[[], None]) -> None:
        self._loop = loop
        self._idle_s = idle_s
        self._on_idle = on_idle
        self._since: float | None = None  # when the current wait for a request began; None while serving one
        self._handle: asyncio.TimerHandle | None = None

    def waiting(self) -> None:
        self._since = now = self._loop.time()
        if self._handle is None:
            self._handle = self._loop.call_at(now + self._idle_s, self._check)

    def serving(self) -> None:
        self._since = None

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        since = self._since
        if since is None:
            return  # serving a request: the next wait arms the timer again
        due = since + self._idle_s
        if self._loop.time() + _CLOCK_SLACK_S >= due:
            self._on_idle()
        else:
            self._handle = self._loop.call_at(due, self._check)


_CLOCK_SLACK_S = 0.001  # a timer may fire up to the loop's clock resolution early: that is on time


class _Channel(asyncio.BufferedProtocol):
    """One connection's bytes: request frames in, answers out (see "Buffers" in the module docstring).

    The serving task takes frames with :meth:`next_frame`, giving the size limit that holds for it; frames read
    ahead were checked against the limit of their time, and a size over it waits, unread, for the serving task
    to judge it with the limit of its turn (a SASL exchange only ever raises the limit)."""

    def __init__(self, server: KafkaServer, listener: KafkaListener, limit: int) -> None:
        self._server = server
        self._listener = listener
        self.limit = limit
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._have = 0  # bytes of _buf holding data not cut yet
        self._body: memoryview | None = None  # a large frame being read into its own buffer
        self._bodies = KeptBuffer(REUSED_BODY_BYTES)  # that buffer, kept for the next large frame
        self._body_pos = 0
        self._frames: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._oversize: int | None = None
        self._eof = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # ------------------------------------------------------------------------------- the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._server._accept(self._listener, self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_pos:]
        if self._have == len(self._buf):  # only while a size over the limit waits unread: keep the bytes
            grown = bytearray(2 * len(self._buf))
            grown[:self._have] = self._buf
            self._buf = grown
        return memoryview(self._buf)[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_pos += nbytes
            if self._body_pos == len(self._body):
                body, self._body = self._body, None
                self._push(bytes(body))
            self._flow()
            return
        self._have += nbytes
        self._cut()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._listener.tls  # half-closed: answers may still go out (TLS cannot keep it open)

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._wake()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    def _cut(self) -> None:
        """Complete frames out of the receive buffer; a large one's start moves to a buffer of its own."""
        buf, have, pos = self._buf, self._have, 0
        while self._oversize is None and have - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.limit:
                self._oversize = size
                self._wake()
                break
            end = pos + 4 + size
            if end <= have:
                with memoryview(buf) as view:
                    self._push(bytes(view[pos + 4:end]))
                pos = end
            elif size + 4 > len(buf):
                body = self._bodies.take(size)
                got = have - pos - 4
                with memoryview(buf) as view:
                    body[:got] = view[pos + 4:have]
                self._body, self._body_pos = body, got
                pos = have
                break
            else:
                break
        if pos:
            rest = have - pos
            buf[:rest] = buf[pos:have]  # same length: the buffer is never resized while a view may be out
            self._have = rest
        self._flow()

    def _push(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._queued += len(frame)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _flow(self) -> None:
        pause = self._oversize is not None or self._queued >= READ_AHEAD_BYTES
        if pause != self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # ------------------------------------------------------------------------------- the serving task's side

    async def next_frame(self, limit: int) -> bytes | None:
        """The next request frame (None: the client closed); _OversizedRequest for a size over ``limit``."""
        self.limit = limit
        while True:
            if self._frames:
                frame = self._frames.popleft()
                self._queued -= len(frame)
                self._flow()
                return frame
            if self._oversize is not None:
                if self._oversize < 0 or self._oversize > limit:
                    raise _OversizedRequest(self._oversize)
                self._oversize = None
                self._cut()
                continue
            if self._eof:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        """Write an answer; returns once the transport's buffer is below its high-water mark."""
        transport = self.transport
        assert transport is not None
        with memoryview(data) as view:
            for start in range(0, len(view), WRITE_CHUNK_BYTES):
                if transport.is_closing():
                    raise ConnectionResetError("connection lost")
                transport.write(view[start:start + WRITE_CHUNK_BYTES])
                if self._write_paused:
                    self._drain_waiter = asyncio.get_running_loop().create_future()
                    try:
                        await self._drain_waiter
                    finally:
                        self._drain_waiter = None

    async def send_frame(self, frame: ResponseFrame) -> int:
        """Write a frame of pieces in order (see "Zero copy" in the module docstring); returns the bytes sent with
        ``sendfile``. Does not close the frame: the caller does, whatever happens.

        Raises:
            ConnectionResetError: the connection was lost, a file range could not be sent whole, or sendfile
                failed; the connection is aborted (it is out of step once a frame was cut short).
        """
        loop = asyncio.get_running_loop()
        transport = self.transport
        assert transport is not None
        pieces = frame.pieces
        try:
            start, done, with_sendfile = 0, 0, 0
            if not self._listener.tls and not transport.is_closing() and not transport.get_write_buffer_size():
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    start, done, with_sendfile = _write_now(sock, pieces)
            for i in range(start, len(pieces)):
                piece, skip = pieces[i], done if i == start else 0
                if not is_file_range(piece):
                    await self.send(memoryview(piece)[skip:])  # type: ignore[arg-type]
                    continue
                if transport.is_closing():
                    raise ConnectionResetError("connection lost")
                fd, position, length = piece.fd, piece.position + skip, piece.length - skip  # type: ignore
                with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                    sent = await loop.sendfile(transport, f, position, length)
                if sent != length:
                    raise ConnectionResetError(f"sent {sent} of {length} bytes: the segment shrank under the fetch")
                with_sendfile += sent
        except BaseException as e:
            transport.abort()
            if isinstance(e, OSError | RuntimeError) and not isinstance(e, ConnectionError):
                raise ConnectionResetError(f"a fetch answer could not be sent: {e}") from e
            raise
        return with_sendfile


def _write_now(sock: Any, pieces: list[Piece]) -> tuple[int, int, int]:
    """Write what the socket takes at once of a frame's ``pieces``, corked (the caller checked that the
    transport's buffer is empty, so these bytes are next on the wire); returns (the first piece not written
    whole, its bytes written, bytes sent with sendfile).

    Why: a Fetch answer alternates small bytes pieces and file ranges. Through the transport each small piece is
    a segment of its own (TCP_NODELAY) and wakes the receiver, and each range costs ``loop.sendfile``'s drain,
    pause and resume of reading. Here the whole answer is ``os.write`` and ``os.sendfile`` calls under TCP_CORK,
    which go out as full segments when the cork is pulled. A full socket (EAGAIN) stops it where it is and the
    caller sends the rest through the transport, in order.

    Raises:
        ConnectionResetError: a file range came up short (the segment shrank under the fetch).
        OSError: the socket failed (the caller aborts the connection).
    """
    fd = sock.fileno()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    with_sendfile = 0
    try:
        for i, piece in enumerate(pieces):
            if is_file_range(piece):
                position, length = piece.position, piece.length  # type: ignore[union-attr]
                done = 0
                while done < length:
                    try:
                        n = os.sendfile(fd, piece.fd, position + done, length - done)  # type: ignore[union-attr]
                    except BlockingIOError:
                        return i, done, with_sendfile
                    if n == 0:
                        raise ConnectionResetError(f"sent {done} of {length} bytes: the segment shrank under the "
                                                   "fetch")
                    done += n
                    with_sendfile += n
            else:
                with memoryview(piece) as view:  # type: ignore[arg-type]
                    done = 0
                    while done < len(view):
                        try:
                            done += os.write(fd, view[done:])
                        except BlockingIOError:
                            return i, done, with_sendfile
        return len(pieces), 0, with_sendfile
    finally:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


class KafkaServer:
    def __init__(self, listeners: tuple[KafkaListener, ...], dispatch: Dispatch, *,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS, ssl_context: ssl.SSLContext | None = None,
                 sent_bytes: SentBytes | None = None) -> None:
        """``ssl_context``: the server context of the TLS listeners (SSL, SASL_SSL); required when there is one.
        ``sent_bytes``: told the bytes of every answer sent, through the transport and with sendfile (metrics)."""
        tls = [str(lst) for lst in listeners if lst.tls]
        if tls and ssl_context is None:
            raise ValueError(f"Kafka listeners {', '.join(tls)} need a TLS context (--ssl-certfile/--ssl-keyfile)")
        self.listeners = listeners
        self._ssl_context = ssl_context
        self._dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.idle_timeout_s = idle_timeout_ms / 1000
        self._servers: list[tuple[KafkaListener, asyncio.Server]] = []
        self._sent_bytes = sent_bytes
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count()
        self._stopping = False

    async def start(self) -> None:
        """Bind every listener; OSError (naming the address) if one cannot be bound, with none left bound."""
        try:
            for lst in self.listeners:
                try:
                    server = await asyncio.get_running_loop().create_server(
                        lambda lst=lst: _Channel(self, lst, self._limit(lst.sasl)), lst.host, lst.port,
                        reuse_address=True, ssl=self._ssl_context if lst.tls else None)
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

    def _limit(self, unauthenticated: bool) -> int:
        return min(self.max_request_bytes, SASL_MAX_RECEIVE_BYTES) if unauthenticated else self.max_request_bytes

    def _accept(self, listener: KafkaListener, channel: _Channel) -> None:
        asyncio.get_running_loop().create_task(self._serve(listener, channel))

    async def _serve(self, listener: KafkaListener, channel: _Channel) -> None:
        task = asyncio.current_task()
        assert task is not None
        transport = channel.transport
        assert transport is not None
        if self._stopping:
            transport.close()
            return
        self._connections.add(task)
        peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        conn = Connection(f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{next(self._ids)}", listener,
                          str(peer[0]), int(peer[1]))
        if listener.security_protocol == "SSL":  # on SASL_SSL the SASL exchange names the principal instead
            conn.principal = peer_principal(transport.get_extra_info("peercert")) or ANONYMOUS
        try:
            await self._requests(conn, channel)
        except asyncio.CancelledError:
            pass  # broker shutdown: close below
        finally:
            self._connections.discard(task)
            transport.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(channel.closed), 1.0)

    async def _send(self, channel: _Channel, response: bytes | ResponseFrame) -> None:
        if isinstance(response, ResponseFrame):
            with_sendfile = await channel.send_frame(response)
            written = response.size - with_sendfile
        else:
            await channel.send(response)
            written, with_sendfile = len(response), 0
        if self._sent_bytes is not None:
            self._sent_bytes(written, with_sendfile)

    async def _requests(self, conn: Connection, channel: _Channel) -> None:
        idle_s = self.idle_timeout_s

        def idle_out() -> None:
            log.info("Kafka connection %s idle for %.0f s (connections.max.idle.ms); closing it", conn.id, idle_s)
            assert channel.transport is not None
            channel.transport.close()  # the wait for the next request then ends with None

        idle = _IdleWatch(asyncio.get_running_loop(), idle_s, idle_out)
        try:
            await self._serve_requests(conn, channel, idle)
        finally:
            idle.stop()

    async def _serve_requests(self, conn: Connection, channel: _Channel, idle: _IdleWatch) -> None:
        while True:
            limit = self._limit(not conn.authenticated)
            idle.waiting()
            try:
                frame = await channel.next_frame(limit)
            except _OversizedRequest as e:
                log.warning("Kafka connection %s: a request of %d bytes is over %s (%d); closing the "
                            "connection", conn.id, e.size, "socket.request.max.bytes" if conn.authenticated
                            else "sasl.server.max.receive.size", limit)
                return
            idle.serving()
            if frame is None:
                return  # the client closed (or reset) the connection, or it was idle (_IdleWatch)
            try:
                response = await self._dispatch(conn, frame)
            except CloseConnection as e:
                log.info("Kafka connection %s: closing: %s", conn.id, e)
                if e.response is not None:
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        await asyncio.wait_for(channel.send(e.response), 5.0)
                return
            except Exception:
                log.exception("Kafka connection %s: a request failed; closing the connection", conn.id)
                return
            try:
                mute_s, hold = conn.take_throttle()
                if hold and mute_s > 0:
                    await asyncio.sleep(mute_s)  # an old client: the answer itself is the throttle
                    mute_s = 0
                if response is not None:
                    try:
                        await self._send(channel, response)
                    except ConnectionError:
                        return
            finally:
                if isinstance(response, ResponseFrame):
                    response.close()
            if mute_s > 0:
                await asyncio.sleep(mute_s)  # KIP-219: answered at once, muted until the throttle time is over
