"""One broker's persistent Kafka-protocol connection to another broker: Kafka's ``NetworkClient`` as the inter-broker
``BrokerBlockingSender`` uses it, in asyncio.

Why: a follower replicates as Kafka's do with one multi-partition Fetch per round per (follower, leader) pair
over one long-lived connection to the leader's Kafka listener, rather than one HTTP long-poll per partition.
This module is that connection.

What it does:

* connect (TCP, TLS with the ``ssl.SSLContext`` it is given), then ApiVersions (a version the server does not
  serve is answered UNSUPPORTED_VERSION with the server's own ranges, and asked again at the highest common one,
  as Kafka's clients do), then, with ``SaslCredentials``, SaslHandshake v1 and SaslAuthenticate (PLAIN,
  SCRAM-SHA-256/512; the server's SCRAM signature is checked), all before any caller's request goes out;
* ``version(api_key)``: the highest version both sides serve (this side's ranges: ``versions``, by default what
  this broker serves itself, ``codec.SUPPORTED``);
* ``send(api_key, body_or_fields)``: one request, its decoded response. Up to ``max_in_flight`` requests are on
  the wire at once (pipelined, Kafka's ``max.in.flight.requests.per.connection``, 5); further sends wait for a
  slot. A slot is freed when its request is answered or failed, not when its caller stops waiting (a cancelled
  caller's request is still on the wire, and its answer still comes). The server answers in request order
  (broker/kafka/network.py mutes a connection until it answered), so each response is matched to the oldest
  request in flight, and its correlation id must be that request's.

Invariants (those of broker/interbroker.py, the HTTP inter-broker client):

* a failure to reach the broker is ``BrokerNotAvailableError``; ``sent=False`` in its details when no byte of
  that request left (connect, TLS handshake aside, ApiVersions or the wait for a slot failed), absent when the
  outcome is unknown (the request was written: the remote may have acted on it);
* anything that leaves the byte stream in doubt closes the connection and fails every request in flight on it:
  a transport error or EOF, a request that timed out (its answer would still come, and the next caller would
  need to skip it), a response whose correlation id is not the oldest request's, a response that does not parse,
  and a response frame larger than ``max_response_bytes`` (hostile or out of step: never buffered);
* the next ``send`` reconnects, after a backoff (``reconnect.backoff.ms``, 50 ms, after any disconnect; doubling
  with consecutive failed connects up to ``reconnect.backoff.max.ms``, 1 s), waited within the send's own
  timeout;
* a refused authentication is the typed error the server answered (SASL_AUTHENTICATION_FAILED,
  UNSUPPORTED_SASL_MECHANISM), never BROKER_NOT_AVAILABLE: retrying will not heal it;
* the channel never retries a request: whether that is safe depends on the request, so callers decide, from
  ``retriable`` and ``sent``;
* ``close()`` is final: pending calls fail, the socket closes, later sends fail with ``sent=False``.

Buffers (``_Wire``, as the server's ``_Channel``): small responses are cut out of one receive buffer; a larger one
is read by the kernel straight into a buffer of its own size, so a fetch answer of megabytes is copied once on
its way in. A frame's size is checked before any of it is read.

Not here (yet): KIP-219 throttling of the client side (inter-broker traffic is exempt from client quotas
here), requests that expect no response (acks=0 produces), SASL re-authentication (KIP-368; the servers here
never ask for it).

Concurrency: one instance per (this broker, remote broker, purpose), used from one event loop only.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib.metadata
import itertools
import logging
import re
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.kafka import codec
from broker.kafka.codec import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from broker.kafka.errors import error_for_code
from broker.kafka.frame_buffer import KeptBuffer
from odradek.protocol import scram
from odradek.protocol.errors import (
    AuthenticationFailedError,
    BrokerNotAvailableError,
    InvalidRequestError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)

__all__ = [
    "CONNECT_TIMEOUT_S", "DEFAULT_MAX_IN_FLIGHT", "DEFAULT_MAX_RESPONSE_BYTES", "REQUEST_TIMEOUT_S",
    "KafkaChannel", "SaslCredentials",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_IN_FLIGHT = 5  # Kafka's max.in.flight.requests.per.connection
DEFAULT_MAX_RESPONSE_BYTES = 104_857_600  # as the servers' socket.request.max.bytes: a fetch answer may exceed
#                                           replica.fetch.response.max.bytes by one batch (KIP-74)
CONNECT_TIMEOUT_S = 10.0  # Kafka's socket.connection.setup.timeout.ms: TCP, TLS, ApiVersions and SASL together
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms (replica.socket.timeout.ms for the replica fetcher)
RECONNECT_BACKOFF_S = 0.05  # Kafka's reconnect.backoff.ms
RECONNECT_BACKOFF_MAX_S = 1.0  # Kafka's reconnect.backoff.max.ms
CLIENT_SOFTWARE_NAME = "odradek-broker"  # ApiVersions v3+ (KIP-511)

# A connection keeps one buffer up to this size for its large responses (one per broker pair and use).
REUSED_BODY_BYTES = 8 * 1024 * 1024
RECEIVE_BUFFER_BYTES = 64 * 1024  # small responses are cut from this; larger ones get a buffer of their own
_SIZE = struct.Struct(">i")
_NONE = 0
_UNSUPPORTED_VERSION = UnsupportedVersionError.kafka_code


@functools.cache
def _software_version() -> str:
    """This package's version as ApiVersions v3+ wants it (letters, digits, ``.`` and ``-`` only: KIP-511)."""
    try:
        version = importlib.metadata.version("odradek")
    except importlib.metadata.PackageNotFoundError:
        return "0"
    return re.sub(r"[^a-zA-Z0-9.\-]", "-", version).strip(".-") or "0"


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What this broker authenticates as on a SASL listener (its inter-broker user)."""

    mechanism: str  # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism != "PLAIN" and self.mechanism not in scram.MECHANISMS:
            raise ValueError(f"SASL mechanism {self.mechanism!r}: one of PLAIN, {', '.join(scram.MECHANISMS)}")


class _ProtocolError(Exception):
    """The byte stream from the server cannot be trusted any more: close the connection."""


class _Wire(asyncio.BufferedProtocol):
    """One connection's bytes, as the server's ``_Channel`` (broker/kafka/network.py) reads them: response frames
    are cut out of one receive buffer, and a frame larger than it is read by the kernel straight into a buffer of
    its own size (a fetch answer of megabytes is copied once on its way in, not through a stream's buffer).

    A size below 4 (no room for a correlation id) or above ``max_frame`` fails the connection before any of the
    frame is read. Nothing is read ahead beyond ``max_queued`` complete frames: the server answers only what was
    asked, so more than that is out of step."""

    def __init__(self, max_frame: int, max_queued: int) -> None:
        self.transport: asyncio.Transport | None = None
        self._max_frame = max_frame
        self._max_queued = max_queued
        self._buf = bytearray(RECEIVE_BUFFER_BYTES)
        self._have = 0  # bytes of _buf holding data not cut yet
        self._body: memoryview | None = None  # a large frame being read into its own buffer
        self._bodies = KeptBuffer(REUSED_BODY_BYTES)  # that buffer, kept for the next large frame
        self._body_pos = 0
        self._frames: collections.deque[bytes] = collections.deque()
        self._error: BaseException | None = None  # why no more frames will come
        self._waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------------------- the transport's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_pos:]
        return memoryview(self._buf)[self._have:]  # never full: a frame that could fill it gets its own buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_pos += nbytes
            if self._body_pos == len(self._body):
                body, self._body = self._body, None
                self._push(bytes(body))
            return
        self._have += nbytes
        self._cut()

    def eof_received(self) -> bool:
        self._stop(asyncio.IncompleteReadError(b"", None))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(exc if exc is not None else asyncio.IncompleteReadError(b"", None))
        error = self._error if self._error is not None else ConnectionResetError("connection lost")
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError(f"connection lost: {error!r}"))
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    def _cut(self) -> None:
        buf, have, pos = self._buf, self._have, 0
        while have - pos >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4 or size > self._max_frame:
                self._stop(_ProtocolError(f"a response frame of {size} bytes (at most {self._max_frame} taken)"))
                return
            end = pos + _SIZE.size + size
            if end <= have:
                with memoryview(buf) as view:
                    self._push(bytes(view[pos + _SIZE.size:end]))
                pos = end
            elif end - pos > len(buf):
                body = self._bodies.take(size)
                got = have - pos - _SIZE.size
                with memoryview(buf) as view:
                    body[:got] = view[pos + _SIZE.size:have]
                self._body, self._body_pos = body, got
                pos = have
                break
            else:
                break
        if pos:
            rest = have - pos
            buf[:rest] = buf[pos:have]
            self._have = rest

    def _push(self, frame: bytes) -> None:
        if len(self._frames) >= self._max_queued:
            self._stop(_ProtocolError(f"more than {self._max_queued} responses unasked for"))
            return
        self._frames.append(frame)
        self._wake()

    def _stop(self, error: BaseException) -> None:
        """No more frames: the ones queued are still taken, then ``error`` is raised."""
        if self._error is None:
            self._error = error
            if self.transport is not None and isinstance(error, _ProtocolError):
                self.transport.abort()  # nothing more of this stream is read
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # ------------------------------------------------------------------------------------------ the channel's side

    async def next_frame(self) -> bytes:
        """The next response frame (after its size); raises why the connection ended once none are left."""
        while True:
            if self._frames:
                return self._frames.popleft()
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    @property
    def open(self) -> bool:
        """Frames may still come and bytes still go."""
        return self._error is None and self.transport is not None and not self.transport.is_closing()

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("connection lost")
        transport.write(data)

    async def drain(self) -> None:
        """Returns once the transport's buffer is below its high-water mark (several callers may wait)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection lost")
        if self._write_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter


@dataclass(eq=False, slots=True)
class _Pending:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future[Any]


@dataclass(eq=False, slots=True)
class _Connection:
    wire: _Wire
    transport: asyncio.Transport
    server_versions: dict[int, tuple[int, int]]
    in_flight: collections.deque[_Pending] = field(default_factory=collections.deque)
    reader_task: asyncio.Task[None] | None = None
    closed: bool = False


class KafkaChannel:
    """A persistent, pipelined Kafka-protocol connection to one broker's listener (see the module docstring)."""

    def __init__(self, host: str, port: int, *, client_id: str = CLIENT_SOFTWARE_NAME,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 sasl: SaslCredentials | None = None, versions: Mapping[int, tuple[int, int]] | None = None,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 reconnect_backoff_s: float = RECONNECT_BACKOFF_S,
                 reconnect_backoff_max_s: float = RECONNECT_BACKOFF_MAX_S) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.host = host
        self.port = port
        self.client_id = client_id
        self._ssl = ssl_context
        self._server_hostname = server_hostname if server_hostname is not None else (host if ssl_context else None)
        self._sasl = sasl
        self._versions = dict(versions if versions is not None else codec.SUPPORTED)
        self.max_in_flight = max_in_flight
        self.max_response_bytes = max_response_bytes
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._backoff_s = reconnect_backoff_s
        self._backoff_max_s = reconnect_backoff_max_s
        self._slots = asyncio.Semaphore(max_in_flight)
        self._connect_lock = asyncio.Lock()
        self._correlation = itertools.count(1)
        self._conn: _Connection | None = None
        self._failed_connects = 0
        self._next_connect_at = 0.0
        self._closed = False

    def __repr__(self) -> str:
        return f"KafkaChannel({self.host}:{self.port}{' TLS' if self._ssl else ''})"

    # ------------------------------------------------------------------------------------------------ state

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def in_flight(self) -> int:
        """Requests written on the current connection and not answered yet."""
        return len(self._conn.in_flight) if self._conn is not None and not self._conn.closed else 0

    @property
    def server_versions(self) -> dict[int, tuple[int, int]]:
        """The version ranges the server advertised on the current connection (empty while not connected)."""
        return dict(self._conn.server_versions) if self.connected and self._conn is not None else {}

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides serve, on the current connection.

        Raises:
            BrokerNotAvailableError: not connected (``sent=False``): ``await connect()`` first.
            UnsupportedVersionError: no version in common.
        """
        conn = self._conn
        if conn is None or conn.closed:
            raise BrokerNotAvailableError(f"{self!r} is not connected", sent=False)
        return self._pick(conn.server_versions, api_key)

    def _pick(self, server: Mapping[int, tuple[int, int]], api_key: int) -> int:
        ours, theirs = self._versions.get(api_key), server.get(api_key)
        if ours is not None and theirs is not None:
            low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
            if low <= high:
                return high
        raise UnsupportedVersionError(f"broker {self.host}:{self.port} serves API {api_key} at {theirs or 'no'} "
                                      f"versions, this broker speaks {ours or 'none'}", api_key=api_key)

    # ------------------------------------------------------------------------------------------------ calls

    async def connect(self, timeout_s: float | None = None) -> None:
        """Connect now (``send`` connects on its own when it needs to); the errors ``send`` raises before sending."""
        loop = asyncio.get_running_loop()
        await self._ready(loop.time() + (self.connect_timeout_s if timeout_s is None else timeout_s))

    async def send(self, api_key: int, body_or_fields: Any, *, version: int | None = None,
                   timeout_s: float | None = None) -> Any:
        """One request, its decoded response body (whatever error codes it carries: those are the caller's).

        ``body_or_fields``: a kio request entity (its version is then the one sent unless ``version`` says), a
        mapping of field values made into the request class of the chosen version (fields that version does not
        have are dropped, as ``codec.make`` does), or a ``codec.WrittenRequest`` (which writes itself at its own
        version). ``version``: default the highest common one. ``timeout_s``: the
        whole call (a slot, connecting, the answer), default ``request_timeout_s``; a long-poll's wait must fit in.

        Raises:
            BrokerNotAvailableError: see the module docstring (``sent=False`` when nothing of it left).
            UnsupportedVersionError: no version in common, or ``version`` is not one the server serves (not sent).
            InvalidRequestError: the body is not a request of ``(api_key, version)`` (not sent).
            AuthenticationFailedError, UnsupportedSaslMechanismError: the server refused our credentials.
        """
        if self._closed:
            raise BrokerNotAvailableError(f"{self!r} is closed", sent=False)
        loop = asyncio.get_running_loop()
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = loop.time() + timeout
        if self._slots.locked():
            try:
                async with asyncio.timeout_at(deadline):
                    await self._slots.acquire()
            except TimeoutError:
                raise BrokerNotAvailableError(f"no in-flight slot to {self.host}:{self.port} came free in "
                                              f"{timeout:.1f} s", sent=False) from None
        else:
            await self._slots.acquire()  # a free slot is taken without suspending: no timer needed
        written = False  # once written, the request's slot is freed when it is answered or failed, not before
        try:
            conn = await self._ready(deadline)
            version, body = self._request(conn, api_key, body_or_fields, version)
            correlation_id = next(self._correlation)
            data = body.frame(correlation_id, self.client_id) if isinstance(body, codec.WrittenRequest) else \
                codec.encode_request(api_key, version, correlation_id, self.client_id, body)
            pending = _Pending(correlation_id, api_key, version, loop.create_future())
            if not conn.wire.open:  # ended, and the reader has not noticed yet: nothing of this request leaves
                self._fail(conn, "the connection ended")
                raise BrokerNotAvailableError(f"the connection to {self.host}:{self.port} ended", sent=False)
            conn.in_flight.append(pending)  # before the bytes: answers are matched in the order requests are written
            written = True
            conn.wire.write(data)
            # From here on the server may act on the request: a failure's outcome is unknown.
            try:
                async with asyncio.timeout_at(deadline):
                    await conn.wire.drain()
                    return await pending.future
            except TimeoutError:
                if not pending.future.done() or pending.future.cancelled():
                    self._fail(conn, f"request {correlation_id} (API {api_key} v{version}) got no answer in "
                                     f"{timeout:.1f} s")
                    raise BrokerNotAvailableError(
                        f"no answer from {self.host}:{self.port} to API {api_key} v{version} in {timeout:.1f} s; "
                        "the connection is closed and the request may or may not have been processed") from None
                return pending.future.result()
            except OSError as e:  # the write failed (ConnectionError and ssl errors are OSErrors): it is gone
                self._fail(conn, f"lost the connection while writing: {e!r}")
                return await pending.future
        finally:
            if not written:
                self._slots.release()

    def _request(self, conn: _Connection, api_key: int, body_or_fields: Any, version: int | None) -> tuple[int, Any]:
        """The version to send and the request entity (nothing is sent when this raises)."""
        fields = isinstance(body_or_fields, Mapping)
        written = isinstance(body_or_fields, codec.WrittenRequest)
        if written and (body_or_fields.api_key != api_key or version not in (None, body_or_fields.version)):
            raise InvalidRequestError(f"a {type(body_or_fields).__name__} is not a request of API {api_key}"
                                      f"{'' if version is None else f' v{version}'}")
        if not fields and not written and getattr(type(body_or_fields), "__api_key__", None) != api_key:
            raise InvalidRequestError(f"a {type(body_or_fields).__name__} is not a request of API {api_key}")
        if written:
            chosen = body_or_fields.version
        elif version is not None:
            chosen = version
        elif fields:
            chosen = self._pick(conn.server_versions, api_key)
        else:
            chosen = int(type(body_or_fields).__version__)
        bounds = conn.server_versions.get(api_key)
        if bounds is None or not bounds[0] <= chosen <= bounds[1]:
            raise UnsupportedVersionError(f"broker {self.host}:{self.port} does not serve API {api_key} "
                                          f"v{chosen} (it serves {bounds or 'none'})", api_key=api_key,
                                          api_version=chosen)
        if not fields:
            return chosen, body_or_fields
        try:
            cls = codec.request_class(api_key, chosen)
        except Exception:
            raise UnsupportedVersionError(f"no request schema for API {api_key} v{chosen}", api_key=api_key,
                                          api_version=chosen) from None
        return chosen, codec.make(cls, **body_or_fields)

    async def close(self) -> None:
        """Fail pending calls (BROKER_NOT_AVAILABLE), close the socket; the channel is not used again."""
        self._closed = True
        conn = self._conn
        if conn is not None:
            self._fail(conn, "the channel was closed")
            task = conn.reader_task
            if task is not None and task is not asyncio.current_task():
                await asyncio.wait([task], timeout=1.0)  # never raises: a caller's own cancellation still does

    # ------------------------------------------------------------------------------------------ connection

    async def _ready(self, deadline: float) -> _Connection:
        """The live connection, made first if there is none (within ``deadline``)."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        loop = asyncio.get_running_loop()
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout_at(deadline):
                async with self._connect_lock:
                    conn = self._conn
                    if conn is not None and not conn.closed:
                        return conn
                    if self._closed:
                        raise BrokerNotAvailableError(f"{self!r} is closed", sent=False)
                    delay = self._next_connect_at - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)  # a failed connect's backoff, within the caller's timeout
                    try:
                        conn = await asyncio.wait_for(self._open(), self.connect_timeout_s)
                    except BaseException:
                        self._failed_connects += 1
                        backoff = min(self._backoff_s * 2 ** (self._failed_connects - 1), self._backoff_max_s)
                        self._next_connect_at = loop.time() + backoff
                        raise
                    self._failed_connects = 0
                    self._conn = conn
                    return conn
        except TimeoutError:
            raise BrokerNotAvailableError(f"cannot connect to {where}: timed out", sent=False) from None
        except ssl.SSLError as e:  # a TLS failure: retrying will not heal it (no sent=False, as interbroker.py)
            raise BrokerNotAvailableError(f"cannot connect to {where}: TLS: {e}") from None
        except (OSError, asyncio.IncompleteReadError, _ProtocolError) as e:
            raise BrokerNotAvailableError(f"cannot connect to {where}: {e}", sent=False) from None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        transport, wire = await loop.create_connection(
            lambda: _Wire(self.max_response_bytes, self.max_in_flight + 1), self.host, self.port, ssl=self._ssl,
            server_hostname=self._server_hostname)
        try:
            server_versions = await self._api_versions(wire)
            if self._sasl is not None:
                await self._authenticate(wire, server_versions, self._sasl)
        except BaseException:
            transport.abort()
            raise
        conn = _Connection(wire, transport, server_versions)
        conn.reader_task = asyncio.get_running_loop().create_task(self._read_responses(conn),
                                                                  name=f"kafka-channel-{self.host}:{self.port}")
        log.info("Kafka channel to %s:%d connected%s", self.host, self.port,
                 f" (SASL {self._sasl.mechanism} as {self._sasl.username})" if self._sasl else "")
        return conn

    async def _exchange(self, wire: _Wire, api_key: int, version: int, **fields: Any) -> Any:
        """One request and its answer on a connection being set up (nothing else is in flight on it yet)."""
        correlation_id = next(self._correlation)
        body = codec.make(codec.request_class(api_key, version), **fields)
        wire.write(codec.encode_request(api_key, version, correlation_id, self.client_id, body))
        await wire.drain()
        frame = await wire.next_frame()
        try:
            if codec.response_correlation_id(frame) != correlation_id:
                raise _ProtocolError(f"the answer to correlation id {correlation_id} carries "
                                     f"{codec.response_correlation_id(frame)}")
            return codec.decode_response(api_key, version, frame)
        except (InvalidRequestError, UnsupportedVersionError) as e:
            raise _ProtocolError(e.message) from None

    async def _api_versions(self, wire: _Wire) -> dict[int, tuple[int, int]]:
        ours = self._versions.get(API_VERSIONS, (0, 0))
        version = ours[1]
        for _ in range(2):  # at our highest; once more at the highest common one if the server refuses it
            answer = await self._exchange(wire, API_VERSIONS, version,
                                          client_software_name=CLIENT_SOFTWARE_NAME,
                                          client_software_version=_software_version())
            advertised = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
            if int(answer.error_code) == _NONE:
                return advertised
            if int(answer.error_code) != _UNSUPPORTED_VERSION or API_VERSIONS not in advertised:
                break
            version = self._pick(advertised, API_VERSIONS)
        raise error_for_code(int(answer.error_code), f"ApiVersions v{version} refused by {self.host}:{self.port}") \
            or _ProtocolError("ApiVersions")

    async def _authenticate(self, wire: _Wire, server_versions: Mapping[int, tuple[int, int]],
                            creds: SaslCredentials) -> None:
        handshake_v = self._pick(server_versions, SASL_HANDSHAKE)
        if handshake_v < 1:  # v0 means raw tokens without Kafka headers (before KIP-152): not spoken here
            raise UnsupportedVersionError(f"broker {self.host}:{self.port} serves SaslHandshake v0 only")
        answer = await self._exchange(wire, SASL_HANDSHAKE, handshake_v, mechanism=creds.mechanism)
        if int(answer.error_code) != _NONE:
            enabled = ", ".join(str(m) for m in answer.mechanisms)
            error = error_for_code(int(answer.error_code), f"SASL mechanism {creds.mechanism} refused by "
                                   f"{self.host}:{self.port} (enabled: {enabled})")
            raise error or UnsupportedSaslMechanismError(creds.mechanism)
        authenticate_v = self._pick(server_versions, SASL_AUTHENTICATE)

        async def step(token: bytes) -> bytes:
            reply = await self._exchange(wire, SASL_AUTHENTICATE, authenticate_v, auth_bytes=token)
            if int(reply.error_code) != _NONE:
                message = str(reply.error_message or "") or f"{creds.mechanism} authentication failed"
                raise error_for_code(int(reply.error_code), message) or AuthenticationFailedError(message)
            return bytes(reply.auth_bytes)

        if creds.mechanism == "PLAIN":
            await step(b"\0" + creds.username.encode("utf-8") + b"\0" + creds.password.encode("utf-8"))
            return
        client = scram.ScramClient(creds.mechanism, creds.username, creds.password)
        server_first = await step(client.first())
        client.verify(await step(client.final(server_first)))

    # ---------------------------------------------------------------------------------------------- responses

    async def _read_responses(self, conn: _Connection) -> None:
        """The connection's one reader: each frame answers the oldest request in flight."""
        try:
            while True:
                frame = await conn.wire.next_frame()
                if not conn.in_flight:
                    raise _ProtocolError("a response to no request in flight")
                pending = conn.in_flight[0]  # stays in flight (and is failed with the rest) until answered
                correlation_id = codec.response_correlation_id(frame)
                if correlation_id != pending.correlation_id:
                    raise _ProtocolError(f"a response with correlation id {correlation_id} where "
                                         f"{pending.correlation_id} was due")
                if pending.future.done():  # its caller is gone (cancelled): nothing to deliver
                    conn.in_flight.popleft()
                    self._slots.release()
                    continue
                try:
                    body = codec.decode_response(pending.api_key, pending.version, frame)
                except (InvalidRequestError, UnsupportedVersionError) as e:
                    raise _ProtocolError(e.message) from None
                conn.in_flight.popleft()
                self._slots.release()
                pending.future.set_result(body)
        except asyncio.CancelledError:
            self._fail(conn, "the channel was closed")
            raise
        except (asyncio.IncompleteReadError, OSError) as e:
            self._fail(conn, f"the connection was lost: {e!r}")
        except (_ProtocolError, InvalidRequestError) as e:
            log.warning("Kafka channel to %s:%d: %s; closing the connection", self.host, self.port, e)
            self._fail(conn, f"protocol error: {e}")

    def _fail(self, conn: _Connection, reason: str) -> None:
        """Close ``conn`` (once) and fail every request in flight on it: their outcome is unknown."""
        if conn.closed:
            return
        conn.closed = True
        if self._conn is conn:
            self._conn = None
        # As Kafka's NetworkClient after any disconnect: the next connect waits reconnect.backoff.ms.
        loop = asyncio.get_running_loop()
        self._next_connect_at = max(self._next_connect_at, loop.time() + self._backoff_s)
        conn.transport.abort()
        task = conn.reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        message = (f"connection to {self.host}:{self.port} closed ({reason}); the request may or may not have "
                   "been processed")
        while conn.in_flight:
            pending = conn.in_flight.popleft()
            self._slots.release()
            if not pending.future.done():
                pending.future.set_exception(BrokerNotAvailableError(message))
        log.info("Kafka channel to %s:%d closed: %s", self.host, self.port, reason)
