"""Client quotas on the Kafka door (broker/kafka/quotas.py): who pays (the connection's user, the header's client
id), what is counted (the produce request's size, the fetch response's size, the time spent), and how the answer
says so (throttle_time_ms in the response, the connection muted; the response held for pre-KIP-219 versions)."""

from __future__ import annotations

import asyncio
import datetime
import io
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.kafka import codec
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection
from broker.kafka.quotas import KafkaQuotas, user_of, with_throttle_time
from broker.metadata.cache import MetadataCache
from broker.quotas import ClientQuotaManager

LISTENER = KafkaListener("SASL_SSL", "127.0.0.1", 9093, "SASL_SSL")
ZERO = datetime.timedelta(0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def request(api_key: int, version: int, client_id: str | None = "app", **fields: Any) -> bytes:
    cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=5, client_id=client_id))
    entity_writer(cls)(out, codec.make(cls, **fields))
    return out.getvalue()


def produce(version: int, size: int, client_id: str | None = "app") -> bytes:
    cls = load_request_schema(0, version)
    partition = codec.make(codec.nested(cls, "PartitionProduceData"), index=0, records=b"x" * size)
    topic = codec.make(codec.nested(cls, "TopicProduceData"), name="t", partition_data=(partition,))
    return request(0, version, client_id, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1),
                   topic_data=(topic,))


def fetch_request(version: int) -> bytes:
    return request(1, version, replica_id=-1, max_wait=ZERO, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=0, session_epoch=-1, topics=(), forgotten_topics_data=(), rack_id="")


def response(api_key: int, version: int, **fields: Any) -> bytes:
    cls = codec.response_class(api_key, version)
    body = codec.make(cls, throttle_time=ZERO, error_code=ErrorCode(0), session_id=0, responses=(), **fields)
    return codec.encode_response(api_key, version, 5, body)


def read(api_key: int, version: int, frame: bytes) -> Any:
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(frame, 4)
    assert header.correlation_id == 5
    body, rest = entity_reader(cls)(frame, 4 + used)
    assert 4 + used + rest == len(frame)
    return body


def metered(dynamic: dict[tuple[str, str], dict[str, str]], answer: bytes | None,
            clock: Clock | None = None) -> tuple[KafkaQuotas, list[bytes]]:
    """KafkaQuotas over a stand-in KafkaApis that answers ``answer`` and records each request it was given."""
    cache = MetadataCache()
    cache.dynamic = dynamic
    seen: list[bytes] = []

    async def inner(conn: Connection, frame: bytes) -> bytes | None:
        seen.append(frame)
        return answer

    return KafkaQuotas(inner, ClientQuotaManager(cache, now=clock or Clock())), seen


def test_a_produce_over_its_client_quota_is_answered_at_once_with_the_throttle_time_and_mutes() -> None:
    answer = response(0, 9)
    quotas, _ = metered({("clients", "app"): {"producer_byte_rate": "10000"}}, answer)
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    frame = produce(9, 20_000)
    out = asyncio.run(quotas.dispatch(conn, frame))
    assert out is not None
    throttle_ms = read(0, 9, out).throttle_time.total_seconds() * 1000
    assert abs(throttle_ms - len(frame) / 10) <= 1  # the whole request's bytes, at 10 KB/s
    mute_s, hold = conn.take_throttle()
    assert (round(mute_s * 1000), hold) == (int(throttle_ms), False)
    assert conn.take_throttle() == (0, False)


def test_pre_kip219_versions_get_their_answer_late_instead() -> None:
    quotas, _ = metered({("clients", "app"): {"producer_byte_rate": "10000"}}, response(0, 5))
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    out = asyncio.run(quotas.dispatch(conn, produce(5, 20_000)))
    assert read(0, 5, out or b"").throttle_time.total_seconds() > 1
    assert conn.take_throttle()[1] is True


def test_the_user_is_the_connections_principal_and_user_quotas_come_first() -> None:
    answer = response(0, 9)
    dynamic = {("users", "alice"): {"producer_byte_rate": "1000000"},
               ("clients", "<default>"): {"producer_byte_rate": "10"}}
    quotas, _ = metered(dynamic, answer)
    alice = Connection("a", LISTENER, "127.0.0.1", 1, principal="User:alice")
    out = asyncio.run(quotas.dispatch(alice, produce(9, 5000)))  # her own quota: 5 KB at 1 MB/s
    assert read(0, 9, out or b"").throttle_time.total_seconds() <= 0.006
    anonymous = Connection("b", LISTENER, "127.0.0.1", 2)
    out = asyncio.run(quotas.dispatch(anonymous, produce(9, 5000, client_id=None)))  # Kafka's empty client id
    assert read(0, 9, out or b"").throttle_time.total_seconds() == 30  # 10 B/s; capped at the quota window
    assert user_of("User:CN=carol") == "CN=carol" and user_of("User:ANONYMOUS") is None


def test_a_fetch_pays_for_its_response_and_acks_zero_still_mutes() -> None:
    big = response(1, 12)
    quotas, _ = metered({("clients", "app"): {"consumer_byte_rate": "10"}}, big)
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    out = asyncio.run(quotas.dispatch(conn, fetch_request(12)))
    assert read(1, 12, out or b"").throttle_time.total_seconds() * 1000 == len(big) * 100
    assert conn.take_throttle()[0] > 0
    quiet, _ = metered({("clients", "app"): {"producer_byte_rate": "10"}}, None)  # acks=0: no answer to mark
    assert asyncio.run(quiet.dispatch(conn, produce(9, 100))) is None
    assert conn.take_throttle()[0] > 0


def test_request_time_counts_against_request_percentage() -> None:
    clock = Clock()
    cache = MetadataCache()
    cache.dynamic = {("clients", "app"): {"request_percentage": "1"}}

    async def slow(conn: Connection, frame: bytes) -> bytes:
        await asyncio.sleep(0.05)
        return response(1, 12)

    quotas = KafkaQuotas(slow, ClientQuotaManager(cache, now=clock))
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    out = asyncio.run(quotas.dispatch(conn, fetch_request(12)))
    assert read(1, 12, out or b"").throttle_time.total_seconds() >= 4  # 0.05 s of work at 1 % of a second


def test_without_a_quota_or_for_other_apis_nothing_is_touched() -> None:
    answer = response(0, 9)
    quotas, _ = metered({}, answer)
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    assert asyncio.run(quotas.dispatch(conn, produce(9, 50_000))) is answer
    quotas, _ = metered({("clients", "app"): {"producer_byte_rate": "1"}}, b"metadata")
    assert asyncio.run(quotas.dispatch(conn, request(3, 1, topics=None))) == b"metadata"
    assert conn.take_throttle() == (0, False)


def test_with_throttle_time_keeps_every_other_field() -> None:
    cls = codec.response_class(0, 10)
    part = codec.make(codec.nested(cls, "PartitionProduceResponse"), index=3, error_code=ErrorCode(0), base_offset=42,
                      log_append_time=None, log_start_offset=0, record_errors=(), error_message=None)
    topic = codec.make(codec.nested(cls, "TopicProduceResponse"), name="t", partition_responses=(part,))
    frame = codec.encode_response(0, 10, 5, codec.make(cls, responses=(topic,), throttle_time=ZERO,
                                                       node_endpoints=()))
    body = read(0, 10, with_throttle_time(frame, 0, 10, 1234))
    assert body.throttle_time.total_seconds() == 1.234
    assert body.responses[0].partition_responses[0].base_offset == 42
