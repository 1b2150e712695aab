"""The client side of the Kafka protocol between brokers (broker/kafka/channel.py, codec's client functions) against
the real socket server (broker/kafka/network.py) on 127.0.0.1, its TLS and its SASL gate (broker/kafka/sasl.py).
The far broker's KafkaApis is a stand-in (``Peer``): it answers ApiVersions from a table the test sets and
Metadata by echoing the topic names asked for, some of which are instructions (hold, hang, close, a wrong
correlation id, a large answer)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.kafka import codec
from broker.kafka.channel import KafkaChannel, SaslCredentials
from broker.kafka.codec import API_VERSIONS, FETCH, METADATA, SASL_AUTHENTICATE, make, nested
from broker.kafka.errors import error_for_code
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import CloseConnection, Connection, KafkaServer
from broker.kafka.sasl import SaslGate
from broker.security.authn import Authenticator
from broker.security.settings import SecuritySettings
from broker.security.tls import client_context, make_local_pki, server_context
from odradek.protocol import scram
from odradek.protocol.errors import (
    AuthenticationFailedError,
    BrokerNotAvailableError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    UnknownServerError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)

PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")
NO_THROTTLE = datetime.timedelta(0)
FIELDS = {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
          "include_topic_authorized_operations": False}  # Metadata for every topic, in the fields form
USERS = {"alice": {m: scram.make_credential(m, "alice-pw").encode() for m in scram.MECHANISMS}}


class Peer:
    """The far broker's KafkaApis, for the test: what it was asked (api key, version, principal), and answers."""

    def __init__(self, **versions: tuple[int, int]) -> None:
        self.versions = dict(codec.SUPPORTED)
        for key, bounds in versions.items():
            self.versions[{"metadata": METADATA, "api_versions": API_VERSIONS}[key]] = bounds
        self.seen: list[tuple[int, int, str]] = []
        self.release = asyncio.Event()

    def api_versions(self, version: int, error: int = 0) -> Any:
        cls = codec.response_class(API_VERSIONS, version)
        keys = tuple(make(nested(cls, "ApiVersion"), api_key=k, min_version=lo, max_version=hi)
                     for k, (lo, hi) in sorted(self.versions.items()))
        return make(cls, error_code=ErrorCode(error), api_keys=keys, throttle_time=NO_THROTTLE)

    async def __call__(self, conn: Connection, frame: bytes) -> bytes | None:
        header = codec.read_header(frame)
        self.seen.append((header.api_key, header.api_version, conn.principal))
        low, high = self.versions.get(header.api_key, (0, -1))
        if header.api_key == API_VERSIONS and not low <= header.api_version <= high:
            return codec.encode_response(API_VERSIONS, 0, header.correlation_id, self.api_versions(0, error=35))
        request = codec.decode_request(frame)
        version = header.api_version
        if header.api_key == API_VERSIONS:
            return codec.encode_response(API_VERSIONS, version, header.correlation_id, self.api_versions(version))
        if header.api_key == FETCH:
            return codec.encode_response(FETCH, version, header.correlation_id, self.fetch(request.body, version))
        assert header.api_key == METADATA
        names = [str(t.name) for t in request.body.topics or ()]
        correlation_id = header.correlation_id
        for name in names:
            if name == "hold":
                await self.release.wait()
            elif name == "hang":
                await asyncio.Event().wait()
            elif name == "close":
                raise CloseConnection("asked to close")
            elif name == "wrong-correlation":
                correlation_id += 1000
            elif name == "garbage":  # the right correlation id, then a body that does not parse
                return struct.pack(">ii", 6, correlation_id) + b"\x00\x07"
        cls = codec.response_class(METADATA, version)
        topics = tuple(make(nested(cls, "MetadataResponseTopic"), error_code=ErrorCode(0), name=n, topic_id=None,
                            is_internal=False, partitions=(), topic_authorized_operations=-2147483648)
                       for n in names)
        body = make(cls, throttle_time=NO_THROTTLE, brokers=(), cluster_id="c", controller_id=1, topics=topics)
        return codec.encode_response(METADATA, version, correlation_id, body)


    def fetch(self, request: Any, version: int) -> Any:
        """Each partition answered with ``partition_max_bytes`` bytes of its own index, and its fetch offset as
        the high watermark; the replica id asked with in the log start offset (to see it arrived)."""
        cls = codec.response_class(FETCH, version)
        replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
        topics = tuple(make(nested(cls, "FetchableTopicResponse"), topic=getattr(t, "topic", None),
                            topic_id=getattr(t, "topic_id", None), partitions=tuple(
            make(nested(cls, "PartitionData"), partition_index=p.partition, error_code=ErrorCode(0),
                 high_watermark=p.fetch_offset, last_stable_offset=p.fetch_offset,
                 log_start_offset=replica_id, aborted_transactions=None,
                 records=bytes([p.partition]) * p.partition_max_bytes)
            for p in t.partitions)) for t in request.topics)
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(0), session_id=0, responses=topics)


def metadata(version: int, *names: str) -> Any:
    cls = codec.request_class(METADATA, version)
    return make(cls, topics=tuple(make(nested(cls, "MetadataRequestTopic"), name=n, topic_id=None) for n in names),
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False)


async def ask(channel: KafkaChannel, *names: str, timeout_s: float | None = None) -> list[str]:
    """Metadata for ``names`` at the negotiated version; the names answered."""
    if not channel.connected:
        await channel.connect()
    answer = await channel.send(METADATA, metadata(channel.version(METADATA), *names), timeout_s=timeout_s)
    return [str(t.name) for t in answer.topics]


Test = Callable[[KafkaServer, int, Peer], Awaitable[None]]


def serve(test: Test, peer: Peer | None = None, *, listener: KafkaListener = PLAINTEXT,
          wrap: Callable[[Peer], Any] | None = None, ssl_context: Any = None) -> Peer:
    the_peer = peer or Peer()

    async def main() -> None:
        dispatch = the_peer if wrap is None else wrap(the_peer)
        server = KafkaServer((listener,), dispatch, ssl_context=ssl_context)
        await server.start()
        try:
            await asyncio.wait_for(test(server, server.bound_port(listener.name), the_peer), 20)
        finally:
            await server.stop()

    asyncio.run(main())
    return the_peer


def channel_to(port: int, **kwargs: Any) -> KafkaChannel:
    return KafkaChannel("127.0.0.1", port, client_id="broker-2-fetcher-0", **kwargs)


# ------------------------------------------------------------------------------------------------ the codec


@pytest.mark.parametrize("version", [1, 9, 12])  # header v1 (non-flexible) and v2 (flexible)
def test_encode_request_is_what_the_server_decodes(version: int) -> None:
    frame = codec.encode_request(METADATA, version, 77, "broker-2", metadata(version, "a", "b"))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    request = codec.decode_request(frame[4:])
    assert request.header == codec.RequestHeader(METADATA, version, 77, "broker-2")
    assert [t.name for t in request.body.topics] == ["a", "b"]


def test_encode_request_refuses_a_body_of_another_version_or_an_unknown_schema() -> None:
    with pytest.raises(InvalidRequestError):
        codec.encode_request(METADATA, 12, 1, None, metadata(11, "a"))
    with pytest.raises(UnsupportedVersionError):
        codec.encode_request(METADATA, 99, 1, None, metadata(12, "a"))


@pytest.mark.parametrize(("api_key", "version"), [(METADATA, 4), (METADATA, 12), (API_VERSIONS, 3)])
def test_decode_response_reads_the_header_the_schema_names(api_key: int, version: int) -> None:
    peer = Peer()
    if api_key == API_VERSIONS:  # flexible, yet its header is v0 (no tagged fields): Kafka's rule
        body = peer.api_versions(version)
        assert codec.response_class(api_key, version).__flexible__
    else:
        cls = codec.response_class(METADATA, version)
        body = make(cls, throttle_time=NO_THROTTLE, brokers=(), cluster_id=None, controller_id=3, topics=())
    frame = codec.encode_response(api_key, version, 4242, body)[4:]
    assert codec.response_correlation_id(frame) == 4242
    assert codec.decode_response(api_key, version, frame) == body


def test_an_unsupported_version_api_versions_answer_is_read_as_v0() -> None:
    peer = Peer()
    frame = codec.encode_response(API_VERSIONS, 0, 1, peer.api_versions(0, error=35))[4:]
    body = codec.decode_response(API_VERSIONS, 4, frame)
    assert body.error_code == 35 and type(body) is codec.response_class(API_VERSIONS, 0)
    assert {int(k.api_key) for k in body.api_keys} == set(codec.SUPPORTED)


def test_malformed_responses_are_invalid_request_errors() -> None:
    cls = codec.response_class(METADATA, 12)
    body = make(cls, throttle_time=NO_THROTTLE, brokers=(), cluster_id=None, controller_id=3, topics=())
    frame = codec.encode_response(METADATA, 12, 1, body)[4:]
    for broken in (frame[:-3], frame[:2], b""):
        with pytest.raises(InvalidRequestError):
            codec.decode_response(METADATA, 12, broken)
    with pytest.raises(InvalidRequestError):
        codec.response_correlation_id(b"\0\0")
    with pytest.raises(UnsupportedVersionError):
        codec.decode_response(METADATA, 99, frame)


def test_error_for_code_is_the_typed_error() -> None:
    assert error_for_code(0) is None
    assert isinstance(error_for_code(6, "moved"), NotLeaderOrFollowerError)
    unknown = error_for_code(30_000)
    assert isinstance(unknown, UnknownServerError) and unknown.details["kafka_error_code"] == 30_000


# ---------------------------------------------------------------------------------------------- the channel


def test_round_trip_at_the_highest_common_version() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            assert await ask(channel, "orders", "payments") == ["orders", "payments"]
            assert channel.version(METADATA) == codec.SUPPORTED[METADATA][1]
            assert channel.server_versions[METADATA] == codec.SUPPORTED[METADATA]
            answer = await channel.send(METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": False,
                                                   "include_topic_authorized_operations": False})
            assert answer.topics == ()  # the fields form: made at the negotiated version
        finally:
            await channel.close()

    peer = serve(test)
    top = codec.SUPPORTED[API_VERSIONS][1]
    assert peer.seen[0] == (API_VERSIONS, top, "User:ANONYMOUS")
    assert peer.seen[1:] == [(METADATA, codec.SUPPORTED[METADATA][1], "User:ANONYMOUS")] * 2


def test_a_server_advertising_a_lower_maximum_is_asked_at_its_maximum() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            assert await ask(channel, "t") == ["t"]
            assert channel.version(METADATA) == 4
            with pytest.raises(UnsupportedVersionError):  # an explicit version the server does not serve
                await channel.send(METADATA, metadata(5, "t"))
            with pytest.raises(UnsupportedVersionError):
                await channel.send(METADATA, metadata(4, "t"), version=5)
        finally:
            await channel.close()

    peer = serve(test, Peer(metadata=(0, 4)))
    assert [s for s in peer.seen if s[0] == METADATA] == [(METADATA, 4, "User:ANONYMOUS")]


def test_api_versions_is_asked_again_at_the_servers_highest_when_refused() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            assert await ask(channel, "t") == ["t"]
        finally:
            await channel.close()

    peer = serve(test, Peer(api_versions=(0, 2)))
    assert [s[:2] for s in peer.seen] == [(API_VERSIONS, codec.SUPPORTED[API_VERSIONS][1]), (API_VERSIONS, 2),
                                          (METADATA, codec.SUPPORTED[METADATA][1])]


def test_no_version_in_common_is_unsupported_version_and_nothing_is_sent() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, versions={**codec.SUPPORTED, METADATA: (10, 12)})
        try:
            await channel.connect()
            with pytest.raises(UnsupportedVersionError):
                channel.version(METADATA)
            with pytest.raises(UnsupportedVersionError):
                await channel.send(METADATA, FIELDS)
        finally:
            await channel.close()

    peer = serve(test, Peer(metadata=(0, 9)))
    assert [s[0] for s in peer.seen] == [API_VERSIONS]


def test_pipelined_requests_share_one_connection_and_each_answer_reaches_its_caller() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, max_in_flight=3)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            calls = [asyncio.create_task(channel.send(METADATA, metadata(v, "hold" if i == 0 else f"t{i}")))
                     for i in range(7)]
            deadline = time.monotonic() + 5
            while channel.in_flight < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # had the bound not held, more would be on the wire by now
            assert channel.in_flight == 3  # several on the wire at once, and no more than max_in_flight
            peer.release.set()
            answers = await asyncio.gather(*calls)
            assert [[str(t.name) for t in a.topics] for a in answers] == [["hold"]] + [[f"t{i}"] for i in
                                                                                     range(1, 7)]
            assert server.connection_count == 1
        finally:
            await channel.close()

    peer = serve(test)
    assert len([s for s in peer.seen if s[0] == API_VERSIONS]) == 1


def test_a_replica_fetch_of_several_partitions_with_megabytes_of_records() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            await channel.connect()
            v = channel.version(FETCH)
            cls = codec.request_class(FETCH, v)
            partitions = tuple(make(nested(cls, "FetchPartition"), partition=i, current_leader_epoch=3,
                                    fetch_offset=100 * i, last_fetched_epoch=3, log_start_offset=0,
                                    partition_max_bytes=1_500_000) for i in range(3))
            body = make(cls, replica_id=2, replica_state=make(nested(cls, "ReplicaState"), replica_id=2,
                                                               replica_epoch=7) if v >= 15 else None,
                        max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
                        max_bytes=10_485_760, isolation_level=0, session_id=0, session_epoch=-1,
                        topics=(make(nested(cls, "FetchTopic"), topic="orders", topic_id=uuid.UUID(int=7),
                                     partitions=partitions),),
                        forgotten_topics_data=(), rack_id="")
            answer = await channel.send(FETCH, body)
            (topic,) = answer.responses
            assert [(p.partition_index, p.high_watermark, p.log_start_offset) for p in topic.partitions] == \
                [(0, 0, 2), (1, 100, 2), (2, 200, 2)]
            assert [bytes(p.records) for p in topic.partitions] == [bytes([i]) * 1_500_000 for i in range(3)]
        finally:
            await channel.close()

    peer = serve(test)
    assert peer.seen[-1][:2] == (FETCH, codec.SUPPORTED[FETCH][1])


def test_a_server_closing_mid_request_fails_every_pending_call_and_the_next_send_reconnects() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            closing = asyncio.create_task(channel.send(METADATA, metadata(v, "close")))
            behind = asyncio.create_task(channel.send(METADATA, metadata(v, "behind")))
            for call in (closing, behind):
                with pytest.raises(BrokerNotAvailableError) as e:
                    await call
                assert "sent" not in e.value.details  # written: the outcome is unknown
            assert not channel.connected
            assert await ask(channel, "again") == ["again"]
        finally:
            await channel.close()

    peer = serve(test)
    assert len([s for s in peer.seen if s[0] == API_VERSIONS]) == 2  # a second connection


def test_an_unreachable_broker_is_not_sent_to_and_reconnects_back_off() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    async def main() -> None:
        channel = channel_to(port, reconnect_backoff_s=0.3)
        try:
            with pytest.raises(BrokerNotAvailableError) as e:
                await channel.send(METADATA, FIELDS)
            assert e.value.details == {"sent": False}
            started = time.monotonic()
            with pytest.raises(BrokerNotAvailableError) as e:
                await channel.send(METADATA, FIELDS)
            assert e.value.details == {"sent": False}
            assert time.monotonic() - started >= 0.25  # waited out the backoff first
            with pytest.raises(BrokerNotAvailableError) as e:  # a backoff longer than the call may wait
                await channel.send(METADATA, FIELDS, timeout_s=0.1)
            assert e.value.details == {"sent": False}
        finally:
            await channel.close()

    asyncio.run(main())


def test_a_request_timeout_closes_the_connection_and_fails_every_pending_call() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            behind = asyncio.create_task(channel.send(METADATA, metadata(v, "behind"), timeout_s=10))
            started = time.monotonic()
            with pytest.raises(BrokerNotAvailableError) as e:
                await channel.send(METADATA, metadata(v, "hang"), timeout_s=0.2)
            assert 0.15 < time.monotonic() - started < 2
            assert "sent" not in e.value.details
            await asyncio.sleep(0)
            assert behind.done()  # failed at once, not at its own timeout
            with pytest.raises(BrokerNotAvailableError):
                await behind
            assert await ask(channel, "after") == ["after"]
        finally:
            await channel.close()

    serve(test)


def test_waiting_for_an_in_flight_slot_times_out_unsent_and_leaves_the_connection_open() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, max_in_flight=1)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            held = asyncio.create_task(channel.send(METADATA, metadata(v, "hold")))
            await asyncio.sleep(0.05)
            with pytest.raises(BrokerNotAvailableError) as e:
                await channel.send(METADATA, metadata(v, "waits"), timeout_s=0.1)
            assert e.value.details == {"sent": False}
            assert channel.connected
            peer.release.set()
            assert [str(t.name) for t in (await held).topics] == ["hold"]
        finally:
            await channel.close()

    peer = serve(test)
    assert ("waits" not in str(peer.seen)) and len([s for s in peer.seen if s[0] == METADATA]) == 1


def test_a_response_frame_over_the_limit_closes_the_connection() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, max_response_bytes=2000)
        try:
            assert await ask(channel, "x" * 1500) == ["x" * 1500]  # under the limit
            with pytest.raises(BrokerNotAvailableError, match="response frame of"):
                await ask(channel, "y" * 2500)
            assert not channel.connected
            assert await ask(channel, "small") == ["small"]
        finally:
            await channel.close()

    serve(test)


def test_a_correlation_id_out_of_turn_is_a_protocol_error_that_closes_the_connection() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            with pytest.raises(BrokerNotAvailableError, match="correlation id"):
                await ask(channel, "wrong-correlation")
            assert not channel.connected
            assert await ask(channel, "fine") == ["fine"]
        finally:
            await channel.close()

    serve(test)


def test_a_response_that_does_not_parse_closes_the_connection() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            with pytest.raises(BrokerNotAvailableError, match="malformed metadata v12 response"):
                await ask(channel, "garbage")
            assert not channel.connected
            assert await ask(channel, "fine") == ["fine"]
        finally:
            await channel.close()

    serve(test)


def test_a_cancelled_caller_leaves_the_stream_in_step() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            gone = asyncio.create_task(channel.send(METADATA, metadata(v, "hold")))
            waiting = asyncio.create_task(channel.send(METADATA, metadata(v, "next")))
            await asyncio.sleep(0.05)
            gone.cancel()
            peer.release.set()  # the cancelled call's answer still comes first, and is dropped
            assert [str(t.name) for t in (await waiting).topics] == ["next"]
            assert gone.cancelled() and channel.connected and channel.in_flight == 0
        finally:
            await channel.close()

    serve(test)


def test_a_cancelled_callers_request_keeps_its_slot_until_it_is_answered() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, max_in_flight=1)
        try:
            await channel.connect()
            v = channel.version(METADATA)
            gone = asyncio.create_task(channel.send(METADATA, metadata(v, "hold")))
            await asyncio.sleep(0.05)
            gone.cancel()
            waiting = asyncio.create_task(channel.send(METADATA, metadata(v, "next")))
            await asyncio.sleep(0.1)
            assert not waiting.done() and channel.in_flight == 1  # still one on the wire: the cancelled one
            peer.release.set()
            assert [str(t.name) for t in (await waiting).topics] == ["next"]
        finally:
            await channel.close()

    serve(test)


def test_close_fails_pending_calls_and_the_channel_stays_closed() -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port)
        await channel.connect()
        pending = asyncio.create_task(channel.send(METADATA, metadata(channel.version(METADATA), "hold")))
        await asyncio.sleep(0.05)
        await channel.close()
        with pytest.raises(BrokerNotAvailableError):
            await pending
        with pytest.raises(BrokerNotAvailableError) as e:
            await channel.send(METADATA, FIELDS)
        assert e.value.details == {"sent": False}
        peer.release.set()

    serve(test)


# ------------------------------------------------------------------------------------------ TLS and SASL


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_local_pki(d, ["broker-1"])
    return d


def tls_server(pki: Path) -> Any:
    return server_context(SecuritySettings(ssl_cafile=str(pki / "ca.pem"), ssl_certfile=str(pki / "broker-1.pem"),
                                           ssl_keyfile=str(pki / "broker-1.key"), ssl_client_auth="none"))


def test_tls_round_trip_and_an_untrusted_server_is_refused(pki: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    make_local_pki(other, ["someone"])

    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, ssl_context=client_context(str(pki / "ca.pem")))
        try:
            assert await ask(channel, "secret") == ["secret"]
        finally:
            await channel.close()
        stranger = channel_to(port, ssl_context=client_context(str(other / "ca.pem")))
        try:
            with pytest.raises(BrokerNotAvailableError, match="TLS") as e:
                await stranger.connect()
            assert "sent" not in e.value.details  # retrying will not heal it
        finally:
            await stranger.close()

    serve(test, listener=KafkaListener("SSL", "127.0.0.1", 0, "SSL"), ssl_context=tls_server(pki))


def sasl_gate(mechanisms: tuple[str, ...]) -> Callable[[Peer], Any]:
    def wrap(peer: Peer) -> Any:
        return SaslGate(peer, Authenticator(lambda u: USERS.get(u, {}), None), mechanisms).dispatch
    return wrap


@pytest.fixture
def no_failure_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("broker.kafka.sasl.FAILED_AUTHENTICATION_DELAY_S", 0.0)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_authenticates_before_any_request(mechanism: str, no_failure_delay: None) -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, sasl=SaslCredentials(mechanism, "alice", "alice-pw"))
        try:
            assert await ask(channel, "t") == ["t"]
        finally:
            await channel.close()

    peer = serve(test, listener=KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT"),
                 wrap=sasl_gate(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")))
    assert peer.seen[-1] == (METADATA, codec.SUPPORTED[METADATA][1], "User:alice")


def test_sasl_ssl_round_trip(pki: Path, no_failure_delay: None) -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, ssl_context=client_context(str(pki / "ca.pem")),
                             sasl=SaslCredentials("SCRAM-SHA-512", "alice", "alice-pw"))
        try:
            assert await ask(channel, "t") == ["t"]
        finally:
            await channel.close()

    peer = serve(test, listener=KafkaListener("SASL_SSL", "127.0.0.1", 0, "SASL_SSL"),
                 wrap=sasl_gate(("SCRAM-SHA-512",)), ssl_context=tls_server(pki))
    assert peer.seen[-1] == (METADATA, codec.SUPPORTED[METADATA][1], "User:alice")


def test_a_server_whose_scram_signature_is_wrong_is_not_believed(no_failure_delay: None) -> None:
    def lying(peer: Peer) -> Any:
        gate = SaslGate(peer, Authenticator(lambda u: USERS.get(u, {}), None), ("SCRAM-SHA-256",))

        async def dispatch(conn: Connection, frame: bytes) -> bytes | None:
            header = codec.read_header(frame)
            answer = await gate.dispatch(conn, frame)
            if header.api_key == SASL_AUTHENTICATE and answer is not None:
                body = codec.decode_response(SASL_AUTHENTICATE, header.api_version, answer[4:])
                if bytes(body.auth_bytes).startswith(b"v="):  # the server-final: a signature it cannot make
                    body = dataclasses.replace(body, auth_bytes=b"v=QUFBQQ==")
                    answer = codec.encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id,
                                                   body)
            return answer
        return dispatch

    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, sasl=SaslCredentials("SCRAM-SHA-256", "alice", "alice-pw"))
        try:
            with pytest.raises(AuthenticationFailedError, match="signature"):
                await channel.send(METADATA, FIELDS)
        finally:
            await channel.close()

    peer = serve(test, listener=KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT"), wrap=lying)
    assert [s for s in peer.seen if s[0] == METADATA] == []


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_refusals_are_typed_and_nothing_is_sent(mechanism: str, no_failure_delay: None) -> None:
    async def test(server: KafkaServer, port: int, peer: Peer) -> None:
        channel = channel_to(port, sasl=SaslCredentials(mechanism, "alice", "wrong"))
        try:
            with pytest.raises(AuthenticationFailedError):
                await channel.send(METADATA, FIELDS)
        finally:
            await channel.close()
        channel = channel_to(port, sasl=SaslCredentials("SCRAM-SHA-256", "alice", "alice-pw"))
        try:
            with pytest.raises(UnsupportedSaslMechanismError, match="enabled: PLAIN, SCRAM-SHA-512"):
                await channel.connect()
        finally:
            await channel.close()

    peer = serve(test, listener=KafkaListener("SASL_PLAINTEXT", "127.0.0.1", 0, "SASL_PLAINTEXT"),
                 wrap=sasl_gate(("PLAIN", "SCRAM-SHA-512")))
    assert [s for s in peer.seen if s[0] == METADATA] == []


def test_the_scram_client_refuses_a_server_that_does_not_hold_the_credential() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "alice", "alice-pw", nonce="abc")
    with pytest.raises(AuthenticationFailedError, match="nonce"):
        client.final(b"r=zzz,s=c2FsdA==,i=4096")
    with pytest.raises(AuthenticationFailedError, match="iterations"):
        client.final(b"r=abcdef,s=c2FsdA==,i=1000")
    client.final(b"r=abcdef,s=c2FsdA==,i=4096")
    with pytest.raises(AuthenticationFailedError, match="signature"):
        client.verify(b"v=" + b"QUFBQQ==")
    with pytest.raises(AuthenticationFailedError, match="refused"):
        client.verify(b"e=invalid-proof")
