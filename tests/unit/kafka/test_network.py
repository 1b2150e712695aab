"""The Kafka socket server over real sockets on 127.0.0.1: framing, muting and order, limits, idle timeout,
shutdown. The dispatcher is a stand-in (it echoes); what is under test is the connection handling."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from broker.kafka.listeners import KafkaListener
from broker.kafka.network import CloseConnection, Connection, KafkaServer

LISTENER = KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def run(test: Callable[..., Awaitable[None]], dispatch: Callable[[Connection, bytes], Awaitable[bytes | None]],
        **limits: Any) -> None:
    async def main() -> None:
        server = KafkaServer((LISTENER,), dispatch, **limits)
        await server.start()
        try:
            await asyncio.wait_for(test(server, server.bound_port("PLAINTEXT")), 20)
        finally:
            await server.stop()

    asyncio.run(main())


async def echo(conn: Connection, request: bytes) -> bytes:
    return frame(b"re:" + request)


def test_pipelined_requests_are_processed_one_at_a_time_and_answered_in_order() -> None:
    active = 0
    most = 0
    seen: list[bytes] = []

    async def slow_then_fast(conn: Connection, request: bytes) -> bytes:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await asyncio.sleep(0.05 if request == b"0" else 0.0)  # the first is the slowest
        seen.append(request)
        active -= 1
        return frame(b"re:" + request)

    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(frame(str(i).encode()) for i in range(20)))  # all in flight at once
        await writer.drain()
        answers = [await read_frame(reader) for _ in range(20)]
        assert answers == [f"re:{i}".encode() for i in range(20)]
        writer.close()

    run(test, slow_then_fast)
    assert most == 1, "a connection is muted while one of its requests is processed"
    assert seen == [str(i).encode() for i in range(20)]


def test_connections_are_served_concurrently() -> None:
    release = asyncio.Event()

    async def gate(conn: Connection, request: bytes) -> bytes:
        if request == b"wait":
            await release.wait()
        return frame(request)

    async def test(server: KafkaServer, port: int) -> None:
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(frame(b"wait"))
        w2.write(frame(b"now"))
        assert await read_frame(r2) == b"now"  # not behind the other connection's request
        release.set()
        assert await read_frame(r1) == b"wait"
        w1.close()
        w2.close()

    run(test, gate)


def test_a_request_needing_no_answer_lets_the_next_one_in() -> None:
    async def quiet(conn: Connection, request: bytes) -> bytes | None:
        return None if request.startswith(b"acks0") else frame(request)

    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"acks0-a") + frame(b"acks0-b") + frame(b"answered"))
        assert await read_frame(reader) == b"answered"
        writer.close()

    run(test, quiet)


def test_a_size_over_socket_request_max_bytes_closes_the_connection() -> None:
    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"x" * 100))  # exactly the limit: served
        assert await read_frame(reader) == b"re:" + b"x" * 100
        writer.write(struct.pack(">i", 101))  # one byte over: closed before the body is read
        assert await reader.read() == b""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", -1))  # a negative size too
        assert await reader.read() == b""

    run(test, echo, max_request_bytes=100)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not() -> None:
    # Long enough that a process stall between two of the busy connection's requests (a loaded machine) does not
    # idle it out.
    idle_timeout_s = 2.0

    async def test(server: KafkaServer, port: int) -> None:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started, i = loop.time(), 0
        while loop.time() - started < 1.5 * idle_timeout_s:  # a request every 0.05 s keeps it open past the timeout
            writer.write(frame(b"%d" % i))
            assert await read_frame(reader) == b"re:%d" % i
            answered = loop.time()  # the server waits for the next request from here on
            await asyncio.sleep(0.05)
            i += 1
        writer.write(struct.pack(">i", 10) + b"half")  # a partial request does not count as activity
        assert await reader.read() == b""
        assert 0.9 * idle_timeout_s < loop.time() - answered < 10 * idle_timeout_s
        assert server.connection_count == 0

    run(test, echo, idle_timeout_ms=int(idle_timeout_s * 1000))


def test_close_connection_from_the_dispatcher_and_a_failing_dispatcher_close_only_that_connection() -> None:
    async def picky(conn: Connection, request: bytes) -> bytes:
        if request == b"close":
            raise CloseConnection("asked to")
        if request == b"bug":
            raise RuntimeError("a bug")
        return frame(request)

    async def test(server: KafkaServer, port: int) -> None:
        other_r, other_w = await asyncio.open_connection("127.0.0.1", port)
        for bad in (b"close", b"bug"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame(bad) + frame(b"never"))
            assert await reader.read() == b""
        other_w.write(frame(b"still"))
        assert await read_frame(other_r) == b"still"
        other_w.close()

    run(test, picky)


def test_stop_closes_every_connection_even_one_mid_request_and_accepts_no_more() -> None:
    started = asyncio.Event()

    async def forever(conn: Connection, request: bytes) -> bytes:
        started.set()
        await asyncio.Event().wait()
        return b""

    async def main() -> None:
        server = KafkaServer((LISTENER,), forever)
        await server.start()
        port = server.bound_port("PLAINTEXT")
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        clients[0][1].write(frame(b"stuck"))
        await asyncio.wait_for(started.wait(), 5)
        while server.connection_count < 3:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(server.stop(), 10)
        for reader, _ in clients:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        assert server.connection_count == 0
        try:
            await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            pass
        else:
            raise AssertionError("a stopped server accepted a connection")

    asyncio.run(main())


def test_a_port_in_use_fails_start_naming_the_address() -> None:
    async def main() -> None:
        first = KafkaServer((LISTENER,), echo)
        await first.start()
        taken = KafkaListener("PLAINTEXT", "127.0.0.1", first.bound_port("PLAINTEXT"), "PLAINTEXT")
        second = KafkaServer((taken,), echo)
        try:
            await second.start()
        except OSError as e:
            assert f"127.0.0.1:{taken.port}" in str(e)
        else:
            raise AssertionError("bound a port in use")
        finally:
            await first.stop()

    asyncio.run(main())


def test_the_connection_names_its_listener_and_peer() -> None:
    seen: list[Connection] = []

    async def record(conn: Connection, request: bytes) -> bytes:
        seen.append(conn)
        return frame(b"ok")

    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"x"))
        await read_frame(reader)
        local_port = writer.get_extra_info("sockname")[1]
        writer.close()
        assert seen[0].listener.name == "PLAINTEXT" and seen[0].host == "127.0.0.1" and seen[0].port == local_port

    run(test, record)
