"""The hot routes' connections (broker/api/hot_routes.py) on a real socket: hot requests are answered there by the
route table's handlers, everything else is handed to aiohttp at the request's first byte on the same connection,
and the front door's rules (the path checks, errors, the body and head timeouts, the read budget) hold."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiohttp import web

from broker.api.app import READ_BUDGET, GuardedAppRunner, create_app
from broker.api.context import BROKER as BROKER_KEY
from broker.api.fetch import SegmentResponse
from broker.config import BrokerConfig
from broker.fetch.service import PartitionData
from broker.log.reads import FileSlice, SliceResult
from broker.metadata.cache import MetadataCache
from broker.produce.service import AppendedBatches
from broker.quotas import DEFAULT, PRODUCE, THROTTLE_TIME_MS, ClientQuotaManager
from broker.security.authn import basic_header
from broker.security.authorizer import ANONYMOUS, Acl
from broker.security.middleware import SecurityService
from broker.security.settings import SecuritySettings, parse_listeners
from odradek.protocol import media
from tests.harness.ports import free_port_block
from tests.unit.fakes.metrics import null_metrics

BATCHES = "/topics/t/partitions/1/batches"


class Produce:
    """The produce service's binary path: records what it was given, answers offsets."""

    def __init__(self) -> None:
        self.appended: list[tuple[str, int, bytes, int]] = []

    async def append_batches(self, topic: str, partition: int, data: bytearray, acks: int, timeout_ms: int,
                             key: str | None = None, *, verify_txn: Any = None) -> AppendedBatches:
        base = sum(len(d) for _, _, d, _ in self.appended)
        self.appended.append((topic, partition, bytes(data), acks))
        return AppendedBatches(base, base + len(data) - 1, len(data), None, 1, 7)


class Fetches:
    """The fetch service's leader reads, as file ranges of one file (``fetch_batches`` sends them with sendfile);
    counts the descriptors it opened and those closed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.opened: list[int] = []

    async def fetch(self, request: Any, *, zero_copy: bool = False) -> PartitionData:
        size = self.path.stat().st_size
        fds = [os.open(self.path, os.O_RDONLY) for _ in range(2)]
        self.opened += fds
        ranges = SliceResult((FileSlice(fds[0], 0, 10), FileSlice(fds[1], 10, size - 10)), 9, 0, 9)
        return PartitionData(request.topic, request.partition, 0, ranges, 9, 9, 0, 9, 3, 1)


def _broker(tmp: Path | None = None) -> Any:
    return SimpleNamespace(metrics=null_metrics(), produce=Produce(), cache=SimpleNamespace(brokers={1: object()}),
                           txn_router=SimpleNamespace(verify_produce=lambda *a: None),
                           fetches=Fetches(tmp / "segment") if tmp is not None else None)


@asynccontextmanager
async def _serving(*, hot: bool = True, body_timeout_ms: int = 5000, head_timeout_ms: int = 5000,
                   tmp: Path | None = None, port: int | None = None, security: SecurityService | None = None,
                   quotas: ClientQuotaManager | None = None) -> AsyncIterator[tuple[web.Application, int]]:
    config = BrokerConfig(1, "zk:2181", "127.0.0.1", 9092, Path("."), request_body_timeout_ms=body_timeout_ms,
                          request_header_timeout_ms=head_timeout_ms)
    app = create_app(_broker(tmp), config=config, security=security, quotas=quotas, client_max_size=1 << 20)
    runner = GuardedAppRunner(app, head_timeout_ms=head_timeout_ms, hot_routes=hot, access_log=None,
                              handle_signals=False)
    await runner.setup()
    port = port or free_port_block(1)
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield app, port
    finally:
        await runner.cleanup()


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Type: {media.BATCHES}", f"Content-Length: {len(body)}",
            *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def _open_on(path: Path) -> int:
    """This process's descriptors open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return count


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_hot_requests_are_served_here_and_others_by_aiohttp_from_their_first_byte_on_the_same_connection() -> None:
    async def run() -> None:
        async with _serving() as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # Pipelined: two hot requests, one aiohttp serves, one more hot one (aiohttp's by then).
            writer.write(_post(f"{BATCHES}?acks=1", b"A" * 100) + _post(f"{BATCHES}?acks=all", b"B" * 30)
                         + b"GET /brokers HTTP/1.1\r\nHost: x\r\n\r\n" + _post(BATCHES, b"C" * 5))
            answers = [await _answer(reader) for _ in range(4)]
            writer.close()
            assert [a[0] for a in answers] == [200, 200, 200, 200]
            offsets = [orjson.loads(a[2]).get("base_offset") for a in (answers[0], answers[1], answers[3])]
            assert offsets == [0, 100, 130]
            assert orjson.loads(answers[2][2]) == {"brokers": [1]}
            # aiohttp names itself in a Server header; the hot connection does not.
            assert ["server" in a[1] for a in answers] == [False, False, True, True]
            assert answers[0][1]["content-type"] == "application/json" and "date" in answers[0][1]
            assert [(t, p, len(d), acks) for t, p, d, acks in app[BROKER_KEY].produce.appended] == [
                ("t", 1, 100, 1), ("t", 1, 30, -1), ("t", 1, 5, -1)]  # acks=all by default
            assert app[READ_BUDGET].in_use == 0

    _run(run)


def test_a_binary_fetch_is_sent_from_its_file_ranges_and_they_are_closed(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranges' descriptors are closed by the hot connection's ``release`` once sent: every answer is kept
    alive here, so that SegmentResponse's finalizer (for an answer dropped unsent) cannot be what closed them."""
    segment = tmp_path / "segment"
    segment.write_bytes(bytes(range(256)) * 300)
    kept: list[SegmentResponse] = []
    made = SegmentResponse.__init__

    def keep(self: SegmentResponse, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        kept.append(self)

    monkeypatch.setattr(SegmentResponse, "__init__", keep)

    async def run() -> None:
        async with _serving(tmp=tmp_path) as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            get = b"GET /topics/t/partitions/1/batches?offset=0 HTTP/1.1\r\nHost: x\r\n\r\n"
            writer.write(get + get)  # two on one connection: the second after the first's ranges
            answers = [await _answer(reader) for _ in range(2)]
            writer.close()
            for status, headers, body in answers:
                assert status == 200 and "server" not in headers
                assert headers["content-type"] == media.BATCHES and headers[media.LEADER.lower()] == "1"
                assert body == segment.read_bytes()
            assert len(app[BROKER_KEY].fetches.opened) == 4
            for _ in range(100):  # every descriptor the reads opened is closed once sent (just after the last byte)
                if _open_on(segment) == 0:
                    break
                await asyncio.sleep(0.01)
            assert _open_on(segment) == 0
            assert len(kept) == 2

    _run(run)


def test_a_request_split_over_many_writes_is_framed_by_its_content_length() -> None:
    async def run() -> None:
        async with _serving() as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            data = _post(BATCHES, bytes(range(256)) * 40)
            # Inside the request line, inside the headers, across the head's end, inside the body.
            pieces = [data[:17], data[17:60], data[60:300], data[300:5000], data[5000:]]
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
            status, headers, _ = await _answer(reader)
            writer.close()
            assert status == 200 and "server" not in headers
            assert app[BROKER_KEY].produce.appended[0][2] == bytes(range(256)) * 40

    _run(run)


def test_errors_are_the_front_doors_answers_byte_for_byte() -> None:
    async def answers(hot: bool) -> list[tuple[int, str, bytes]]:
        async with _serving(hot=hot) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            out = []
            for request in (_post("/topics/t/partitions/x/batches", b"x"),  # not a partition id
                            _post("/topics/bad!name/partitions/0/batches", b"x"),  # not a topic name
                            _post(BATCHES, b"x", "X: y").replace(media.BATCHES.encode(), b"text/plain"),
                            _post(f"{BATCHES}?acks=2", b"x")):
                writer.write(request)
                status, headers, body = await _answer(reader)
                out.append((status, headers["content-type"], body))
            writer.close()
            return out

    async def run() -> None:
        here, aiohttp = await answers(True), await answers(False)
        assert [a[0] for a in here] == [404, 400, 415, 400]
        assert here == aiohttp

    _run(run)


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_its_budget_returned() -> None:
    async def run() -> None:
        async with _serving(body_timeout_ms=300) as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(BATCHES, b"x" * 1000)[:-400])
            await writer.drain()
            await asyncio.sleep(0.05)
            assert app[READ_BUDGET].in_use == 1000  # held while the body arrives
            loop = asyncio.get_running_loop()
            started = loop.time()
            status, headers, body = await _answer(reader)
            assert status == 408 and headers["connection"] == "close"
            assert orjson.loads(body)["error_code"] == 40801
            assert 0.2 < loop.time() - started < 2
            assert await asyncio.wait_for(reader.read(), 2) == b""  # then closed
            assert app[READ_BUDGET].in_use == 0 and not app[BROKER_KEY].produce.appended

    _run(run)


def test_a_head_that_does_not_arrive_in_time_closes_the_connection() -> None:
    async def run() -> None:
        async with _serving(head_timeout_ms=300) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /topics/t/partitions/1/batches HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await asyncio.wait_for(reader.read(), 3) == b""
            assert 0.2 < loop.time() - started < 1.5

    _run(run)


def test_chunked_http_1_0_and_other_routes_are_aiohttps_and_still_answered() -> None:
    async def run() -> None:
        async with _serving() as (app, port):
            chunked = (f"POST {BATCHES} HTTP/1.1\r\nHost: x\r\nContent-Type: {media.BATCHES}\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n").encode()
            old = _post(BATCHES, b"def").replace(b"HTTP/1.1", b"HTTP/1.0")
            for request in (chunked, old):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                status, headers, _ = await _answer(reader)
                writer.close()
                assert status == 200 and "server" in headers
            assert [d for _, _, d, _ in app[BROKER_KEY].produce.appended] == [b"abc", b"def"]
            assert app[READ_BUDGET].in_use == 0

    _run(run)


def test_a_head_past_aiohttps_line_limit_is_aiohttps_to_refuse() -> None:
    async def run() -> None:
        async with _serving() as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(BATCHES, b"x", "X-Big: " + "a" * 9000))
            status, _, _ = await _answer(reader)
            writer.close()
            assert status == 400 and not app[BROKER_KEY].produce.appended

    _run(run)


def test_expect_100_continue_is_answered_here_before_the_body_and_other_expectations_are_aiohttps() -> None:
    """A client that sends ``Expect: 100-continue`` (curl does, for bodies over 1 KiB) waits for the interim answer
    before its body: the hot route sends it, then answers the request itself. Any other expectation goes to
    aiohttp, which refuses it (417)."""
    async def run() -> None:
        async with _serving() as (app, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = _post(BATCHES, b"x" * 2000, "Expect: 100-continue")
            head_end = request.index(b"\r\n\r\n") + 4
            writer.write(request[:head_end])
            assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(request[head_end:])
            status, headers, _ = await _answer(reader)
            assert (status, "server" in headers) == (200, False)
            assert app[BROKER_KEY].produce.appended[-1][2] == b"x" * 2000
            writer.write(_post(BATCHES, b"y", "Expect: something-else"))
            status, headers, _ = await _answer(reader)
            writer.close()
            assert (status, "server" in headers) == (417, True)

    _run(run)


def test_requests_are_aiohttps_when_the_budget_is_spent() -> None:
    async def run() -> None:
        async with _serving() as (app, port):
            budget = app[READ_BUDGET]
            budget.in_use = budget.limit  # spent: this request waits in aiohttp's queue, then 503
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(BATCHES, b"x"))
            await asyncio.sleep(0.1)
            budget.in_use = 0
            await budget.release(0)  # wakes the waiter aiohttp queued
            status, headers, _ = await _answer(reader)
            writer.close()
            assert status == 200 and "server" in headers

    _run(run)


async def _ask(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        return await _answer(reader)
    finally:
        writer.close()


def test_a_secured_broker_serves_its_hot_routes_behind_authentication_and_acls() -> None:
    """Security on: produce and fetch are still served here (no aiohttp ``Server`` header), and only once the
    caller is authenticated for the listener and allowed by the ACLs; a refused request never reaches the
    handler."""
    async def run() -> None:
        port = free_port_block(1)
        service = SecurityService(SecuritySettings(listeners=tuple(parse_listeners(f"PLAINTEXT://127.0.0.1:{port}")),
                                                   authorizer="acl"), None)
        async with _serving(port=port, security=service) as (app, _):
            produce = app[BROKER_KEY].produce
            status, headers, body = await _ask(port, _post(BATCHES, b"x"))
            assert (status, "server" in headers) == (403, False), (status, headers, body)
            assert orjson.loads(body)["error_code"] == 40301 and produce.appended == []
            status, headers, body = await _ask(port, _post(BATCHES, b"x", f"Authorization: {basic_header('a', 'b')}"))
            assert (status, "server" in headers) == (401, False), (status, body)  # credentials: TLS only
            assert produce.appended == []
            service.authorizer.replace({("Topic", "LITERAL"): {"t": [Acl(ANONYMOUS, "Allow", "Write")]}})
            status, headers, _ = await _ask(port, _post(BATCHES, b"x"))
            assert (status, "server" in headers) == (200, False)
            assert [a[:3] for a in produce.appended] == [("t", 1, b"x")]

    _run(run)


def test_client_quotas_throttle_the_hot_routes() -> None:
    """A produce quota on every client: hot answers carry the throttle time, and once over the quota the next
    request waits out its mute before it is handled."""
    async def run() -> None:
        cache = MetadataCache()
        cache.dynamic = {("clients", DEFAULT): {PRODUCE: "1000"}}  # 1,000 bytes/s
        async with _serving(quotas=ClientQuotaManager(cache)) as (_, port):
            body = b"x" * 4000
            status, headers, _ = await _ask(port, _post(BATCHES, body, "Odradek-Client-Id: app"))
            assert (status, "server" in headers) == (200, False)
            throttle = int(headers[THROTTLE_TIME_MS.lower()])
            assert throttle > 0
            started = time.monotonic()
            status, headers, _ = await _ask(port, _post(BATCHES, b"y", "Odradek-Client-Id: app"))
            assert status == 200 and time.monotonic() - started >= throttle / 1000 * 0.9

    _run(run)


def test_shutdown_closes_idle_hot_connections() -> None:
    async def run() -> None:
        async with _serving() as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post(BATCHES, b"x"))
            assert (await _answer(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), 3) == b""

    _run(run)

