"""The SASL gate in front of KafkaApis (broker/kafka/sasl.py): what a connection on a SASL listener may send before
it authenticates, the SaslHandshake/SaslAuthenticate exchange (v1 headers and v0 raw tokens), the principal it
leaves on the connection, failures answered then closed, and out-of-turn SASL requests answered
ILLEGAL_SASL_STATE by KafkaApis."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.kafka import codec
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import CloseConnection, Connection
from broker.kafka.sasl import SaslApis, SaslGate
from broker.security.authn import ANONYMOUS, Authenticator
from odradek.protocol import scram
from tests.unit.security.test_sasl import ScramClient

SASL = KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 9092, "SASL_PLAINTEXT")
PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 9093, "PLAINTEXT")
USERS = {"alice": {"SCRAM-SHA-256": scram.make_credential("SCRAM-SHA-256", "alice-pw").encode(),
                   "SCRAM-SHA-512": scram.make_credential("SCRAM-SHA-512", "alice-pw").encode()}}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def frame(api_key: int, version: int, **fields: Any) -> bytes:
    request_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=7, client_id="unit"))
    entity_writer(request_cls)(out, codec.make(request_cls, **fields))
    return out.getvalue()


def decode(api_key: int, version: int, response: bytes) -> Any:
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(response, 4)
    assert header.correlation_id == 7
    body, _ = entity_reader(cls)(response, 4 + used)
    return body


class Inner:
    """KafkaApis' stand-in: records what got past the gate."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    async def __call__(self, conn: Connection, request: bytes) -> bytes:
        self.seen.append((codec.read_header(request).api_key, conn.principal))
        return b"passed"


def gate(mechanisms: tuple[str, ...] = MECHANISMS) -> tuple[SaslGate, Inner]:
    inner = Inner()
    return SaslGate(inner, Authenticator(lambda u: USERS.get(u, {}), None), mechanisms), inner


@pytest.fixture(autouse=True)
def no_failure_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("broker.kafka.sasl.FAILED_AUTHENTICATION_DELAY_S", 0.0)


def metadata() -> bytes:
    return frame(3, 1, topics=None)


def test_before_authenticating_only_api_versions_and_the_handshake_get_through() -> None:
    async def main() -> None:
        g, inner = gate()
        conn = Connection("c", SASL, "127.0.0.1", 1)
        assert not conn.authenticated
        assert await g.dispatch(conn, frame(18, 3, client_software_name="t", client_software_version="1")) == \
            b"passed"
        with pytest.raises(CloseConnection, match="unexpected request \\(API 3\\) during SASL handshake"):
            await g.dispatch(conn, metadata())
        with pytest.raises(CloseConnection, match="unreadable request header"):
            await g.dispatch(Connection("c2", SASL, "127.0.0.1", 2), b"\x16\x03\x01")  # a TLS hello, say
        assert inner.seen == [(18, ANONYMOUS)]

    asyncio.run(main())


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_over_sasl_authenticate_names_the_user_and_opens_the_connection(version: int) -> None:
    async def main() -> None:
        g, inner = gate()
        conn = Connection("c", SASL, "127.0.0.1", 1)
        hello = decode(17, 1, await g.dispatch(conn, frame(17, 1, mechanism="PLAIN")))
        assert (hello.error_code, hello.mechanisms) == (0, MECHANISMS)
        with pytest.raises(CloseConnection, match="during SASL authentication"):
            await _after_handshake(g, metadata())  # after the handshake: SaslAuthenticate only
        answer = decode(36, version, await g.dispatch(conn, frame(36, version, auth_bytes=b"\0alice\0alice-pw")))
        assert (answer.error_code, answer.error_message, answer.auth_bytes) == (0, None, b"")
        if version >= 1:
            assert answer.session_lifetime.total_seconds() == 0  # no re-authentication is asked for
        assert (conn.authenticated, conn.principal) == (True, "User:alice")
        assert await g.dispatch(conn, metadata()) == b"passed"
        assert inner.seen == [(3, "User:alice")]

    asyncio.run(main())


async def _after_handshake(g: SaslGate, request: bytes) -> Any:
    conn = Connection("other", SASL, "127.0.0.1", 2)
    await g.dispatch(conn, frame(17, 1, mechanism="PLAIN"))
    return await g.dispatch(conn, request)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_takes_two_round_trips_and_the_server_proves_itself(mechanism: str) -> None:
    async def main() -> None:
        g, _ = gate()
        conn = Connection("c", SASL, "127.0.0.1", 1)
        await g.dispatch(conn, frame(17, 1, mechanism=mechanism))
        client = ScramClient(mechanism, "alice", "alice-pw")
        first = decode(36, 2, await g.dispatch(conn, frame(36, 2, auth_bytes=client.first())))
        assert first.error_code == 0 and not conn.authenticated
        final = decode(36, 2, await g.dispatch(conn, frame(36, 2, auth_bytes=client.final(first.auth_bytes))))
        assert (final.error_code, final.auth_bytes) == (0, client.expected_server_final())
        assert (conn.authenticated, conn.principal, conn.sasl) == (True, "User:alice", None)

    asyncio.run(main())


def test_a_wrong_password_is_answered_then_the_connection_closed() -> None:
    async def main() -> None:
        g, inner = gate()
        conn = Connection("c", SASL, "127.0.0.1", 1)
        await g.dispatch(conn, frame(17, 1, mechanism="SCRAM-SHA-256"))
        client = ScramClient("SCRAM-SHA-256", "alice", "guess")
        first = decode(36, 1, await g.dispatch(conn, frame(36, 1, auth_bytes=client.first())))
        with pytest.raises(CloseConnection) as e:
            await g.dispatch(conn, frame(36, 1, auth_bytes=client.final(first.auth_bytes)))
        assert e.value.response is not None
        answer = decode(36, 1, e.value.response)
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert answer.error_message == ("Authentication failed during authentication due to invalid credentials "
                                        "with SASL mechanism SCRAM-SHA-256")
        assert (conn.authenticated, conn.principal, inner.seen) == (False, ANONYMOUS, [])

    asyncio.run(main())


def test_a_mechanism_not_enabled_is_answered_with_the_enabled_ones_then_closed() -> None:
    async def main() -> None:
        g, _ = gate(("SCRAM-SHA-512",))
        conn = Connection("c", SASL, "127.0.0.1", 1)
        for mechanism in ("PLAIN", "GSSAPI"):
            with pytest.raises(CloseConnection) as e:
                await g.dispatch(conn, frame(17, 1, mechanism=mechanism))
            answer = decode(17, 1, e.value.response or b"")
            assert (answer.error_code, answer.mechanisms) == (33, ("SCRAM-SHA-512",))  # UNSUPPORTED_SASL_MECHANISM

    asyncio.run(main())


def test_handshake_v0_exchanges_raw_tokens() -> None:
    async def main() -> None:
        g, _ = gate()
        conn = Connection("c", SASL, "127.0.0.1", 1)
        assert decode(17, 0, await g.dispatch(conn, frame(17, 0, mechanism="SCRAM-SHA-512"))).error_code == 0
        client = ScramClient("SCRAM-SHA-512", "alice", "alice-pw")
        first = await g.dispatch(conn, client.first())
        assert first is not None and struct.unpack(">i", first[:4])[0] == len(first) - 4
        final = await g.dispatch(conn, client.final(first[4:]))
        assert final == struct.pack(">i", len(client.expected_server_final())) + client.expected_server_final()
        assert conn.principal == "User:alice"
        raw = Connection("r", SASL, "127.0.0.1", 2)
        await g.dispatch(raw, frame(17, 0, mechanism="PLAIN"))
        with pytest.raises(CloseConnection, match="Invalid username or password") as e:
            await g.dispatch(raw, b"\0alice\0wrong")
        assert e.value.response is None  # raw tokens have no error to carry: just closed

    asyncio.run(main())


def test_connections_of_listeners_without_sasl_go_straight_through() -> None:
    async def main() -> None:
        g, inner = gate()
        conn = Connection("c", PLAINTEXT, "127.0.0.1", 1)
        assert conn.authenticated
        assert await g.dispatch(conn, metadata()) == b"passed"
        assert await g.dispatch(conn, frame(17, 1, mechanism="PLAIN")) == b"passed"  # KafkaApis answers it
        assert inner.seen == [(3, ANONYMOUS), (17, ANONYMOUS)]

    asyncio.run(main())


def test_kafka_apis_answers_out_of_turn_sasl_requests_illegal_sasl_state() -> None:
    async def main() -> None:
        apis = SaslApis()
        done = Connection("c", SASL, "127.0.0.1", 1)
        done.authenticated = True
        for version in (0, 1):
            body = await apis.handle_sasl_handshake(done, codec.decode_request(frame(17, version, mechanism="PLAIN")))
            assert (body.error_code, body.mechanisms) == (34, ())
        for conn, says in ((done, "after successful authentication"),
                           (Connection("p", PLAINTEXT, "h", 1), "does not authenticate with SASL")):
            body = await apis.handle_sasl_authenticate(conn, codec.decode_request(frame(36, 2, auth_bytes=b"x")))
            assert body.error_code == 34 and says in body.error_message

    asyncio.run(main())
