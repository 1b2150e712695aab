"""The Kafka socket server's security and throttling over real sockets on 127.0.0.1 (broker/kafka/network.py): TLS
listeners with the broker's server context, the SSL principal from a client certificate, the smaller frame limit
before SASL authentication, a last answer before a close, and KIP-219 muting. The dispatcher is a stand-in."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.kafka.listeners import KafkaListener
from broker.kafka.network import CloseConnection, Connection, KafkaServer
from broker.security.settings import SecuritySettings
from broker.security.tls import client_context, issue_certificate, make_local_pki, server_context


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def serve(listeners: tuple[KafkaListener, ...], dispatch: Callable[[Connection, bytes], Awaitable[bytes | None]],
          test: Callable[[KafkaServer], Awaitable[None]], **kwargs: Any) -> None:
    async def main() -> None:
        server = KafkaServer(listeners, dispatch, **kwargs)
        await server.start()
        try:
            await asyncio.wait_for(test(server), 20)
        finally:
            await server.stop()

    asyncio.run(main())


async def who(conn: Connection, request: bytes) -> bytes:
    return frame(conn.principal.encode())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_local_pki(d, ["broker-1"])
    issue_certificate(d, "alice")
    return d


def tls_server(pki: Path, client_auth: str) -> ssl.SSLContext:
    return server_context(SecuritySettings(ssl_cafile=str(pki / "ca.pem"), ssl_certfile=str(pki / "broker-1.pem"),
                                           ssl_keyfile=str(pki / "broker-1.key"), ssl_client_auth=client_auth))


def test_an_ssl_listener_names_the_client_certificate_as_the_http_side_does(pki: Path) -> None:
    ssl_listener = KafkaListener("SSL", "127.0.0.1", 0, "SSL")

    async def test(server: KafkaServer) -> None:
        port = server.bound_port("SSL")
        for cert, principal in (("alice", b"User:CN=alice"), (None, b"User:ANONYMOUS")):
            ctx = client_context(str(pki / "ca.pem"), str(pki / f"{cert}.pem") if cert else None,
                                 str(pki / f"{cert}.key") if cert else None)
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.write(frame(b"who"))
            assert await read_frame(reader) == principal
            writer.close()
        _, writer = await asyncio.open_connection("127.0.0.1", port)  # plaintext on a TLS port: no answer
        writer.write(frame(b"who"))
        writer.close()

    serve((ssl_listener,), who, test, ssl_context=tls_server(pki, "requested"))


def test_required_client_auth_refuses_a_client_without_a_certificate(pki: Path) -> None:
    async def test(server: KafkaServer) -> None:
        ctx = client_context(str(pki / "ca.pem"))
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port("SSL"), ssl=ctx)
            writer.write(frame(b"who"))
            await read_frame(reader)

    serve((KafkaListener("SSL", "127.0.0.1", 0, "SSL"),), who, test, ssl_context=tls_server(pki, "required"))


def test_a_tls_listener_without_a_context_is_refused() -> None:
    with pytest.raises(ValueError, match="need a TLS context"):
        KafkaServer((KafkaListener("SASL_SSL", "127.0.0.1", 0, "SASL_SSL"),), who)


def test_before_sasl_authentication_a_frame_may_be_at_most_sasl_server_max_receive_size() -> None:
    sasl = KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT")

    async def authenticate_on_ok(conn: Connection, request: bytes) -> bytes:
        if request == b"ok":
            conn.authenticated = True
        return frame(b"%d" % len(request))

    async def test(server: KafkaServer) -> None:
        port = server.bound_port("SASL_PLAINTEXT")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 600_000))  # over 512 KiB before authenticating: closed unread
        await writer.drain()
        assert await reader.read() == b""
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"ok") + frame(b"x" * 600_000))  # once authenticated, socket.request.max.bytes holds
        await writer.drain()
        assert await read_frame(reader) == b"2"
        assert await read_frame(reader) == b"600000"
        writer.close()

    serve((sasl,), authenticate_on_ok, test)


def test_close_connection_can_carry_a_last_answer() -> None:
    async def refuse(conn: Connection, request: bytes) -> bytes:
        raise CloseConnection("authentication failed", frame(b"SASL_AUTHENTICATION_FAILED"))

    async def test(server: KafkaServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port("PLAINTEXT"))
        writer.write(frame(b"creds") + frame(b"more"))
        assert await read_frame(reader) == b"SASL_AUTHENTICATION_FAILED"
        assert await reader.read() == b""
        writer.close()

    serve((KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"),), refuse, test)


@pytest.mark.parametrize("hold", [False, True])
def test_a_throttled_connection_is_muted_and_old_clients_get_the_answer_late(hold: bool) -> None:
    # Long enough that "answered before the mute ended" (KIP-219) cannot fail by a process stall of a loaded machine.
    mute_s = 3.0

    async def throttle_first(conn: Connection, request: bytes) -> bytes:
        if request == b"first":
            conn.throttle(int(mute_s * 1000), hold_response=hold)
        return frame(request)

    async def test(server: KafkaServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port("PLAINTEXT"))
        started = time.monotonic()
        writer.write(frame(b"first") + frame(b"second"))
        assert await read_frame(reader) == b"first"
        first_s = time.monotonic() - started
        assert await read_frame(reader) == b"second"
        second_s = time.monotonic() - started
        assert second_s >= mute_s  # the second request waited out the throttle either way
        if hold:
            assert first_s >= mute_s  # a pre-KIP-219 client: the answer itself was held
        else:
            assert first_s < mute_s  # KIP-219: answered at once (the bound is the property under test)
        writer.close()

    serve((KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"),), throttle_first, test)
