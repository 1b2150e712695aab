"""KafkaApis over stand-in services: what each handler answers, by version, for the cases clients rely on.

Frames are built and read with kio, as a client would; the metadata cache and the fetch-session cache are real
ones; the data path's services (produce, fetch, offsets) are a stand-in that records what it was asked."""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.config import BrokerConfig
from broker.fetch.offsets import LeaderOffset, ListOffsetsRequest
from broker.fetch.service import AbortedTransaction, EpochEndOffset, FetchRequest, PartitionData
from broker.fetch.sessions import FetchSessionCache
from broker.kafka import codec
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import CloseConnection, Connection
from broker.metadata.cache import MetadataCache, PartitionInfo
from broker.produce.service import AppendedBatches
from odradek.protocol.errors import NotLeaderOrFollowerError, OffsetNotAvailableError, UnknownTopicError
from odradek.protocol.model import BrokerInfo, KafkaEndpoint, TopicAssignment
from odradek.protocol.records import encode_batch

TOPIC_UUID = "12345678-1234-5678-9abc-def012345678"
TOPIC_ID = base64.urlsafe_b64encode(uuid.UUID(TOPIC_UUID).bytes).decode().rstrip("=")
PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
CONN = Connection("c", PLAINTEXT, "127.0.0.1", 50000)


def kafka_broker(b: int, listener: str = "PLAINTEXT") -> BrokerInfo:
    return BrokerInfo(b, "127.0.0.1", 8081 + b, rack=f"r{b}",
                      kafka_endpoints=(KafkaEndpoint(listener, f"b{b}.example", 9091 + b, "PLAINTEXT"),))


class Leaders:
    """The data path's services (produce, fetches, offsets; a real fetch-session cache), answering from a table;
    every call is recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[tuple[str, int], Exception] = {}
        self.produce = SimpleNamespace(append_batches=self.append_batches)
        # replica_registered False: this table keeps no quiet partitions (tests/unit/kafka/test_replica_fetch.py's
        # real services do)
        self.fetches = SimpleNamespace(fetch=self.fetch, epoch_end_offset=self.epoch_end_offset,
                                       replica_registered=lambda replica: False)
        self.offsets = SimpleNamespace(leader_offset=self.leader_offset)
        self.sessions = FetchSessionCache()
        self.transactions = None
        self.high_watermark = 0  # 0: one past the offset read

    async def append_batches(self, topic: str, partition: int, data: bytearray, acks: int, timeout_ms: int,
                             verify_txn: Any = None) -> AppendedBatches:
        self.calls.append(("append", topic, partition, acks, timeout_ms))
        if (topic, partition) in self.fail:
            raise self.fail[(topic, partition)]
        return AppendedBatches(40, 40, 1, None, 1, 0, log_start_offset=3)

    async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData:
        topic, partition, offset = request.topic, request.partition, request.offset
        assert offset is not None
        committed = request.isolation_level == "read_committed"
        self.calls.append(("read", topic, partition, offset, request.max_bytes, request.max_wait_ms, committed))
        if (topic, partition) in self.fail:
            raise self.fail[(topic, partition)]
        hw = self.high_watermark or offset + 1
        data = encode_batch([(b"k", b"v", 1, [])], base_offset=offset) if offset < hw else b""
        return PartitionData(topic, partition, offset, data, hw, hw, 0, hw, 5, 1,
                             (AbortedTransaction(7, offset),) if committed else ())

    def epoch_end_offset(self, topic: str, partition: int, leader_epoch: int, *,
                         current_leader_epoch: int = -1) -> EpochEndOffset:
        self.calls.append(("epoch", topic, partition, leader_epoch, current_leader_epoch))
        if (topic, partition) in self.fail:
            raise self.fail[(topic, partition)]
        return EpochEndOffset(leader_epoch, 30) if leader_epoch <= 5 else EpochEndOffset(-1, -1)

    async def leader_offset(self, request: ListOffsetsRequest) -> LeaderOffset:
        self.calls.append(("list", request.topic, request.partition, request.timestamp,
                           request.isolation_level == "read_committed"))
        if (request.topic, request.partition) in self.fail:
            raise self.fail[(request.topic, request.partition)]
        return LeaderOffset(11 if request.timestamp == -1 else 0, -1, 4)


@pytest.fixture
def setup() -> tuple[KafkaApis, MetadataCache, Leaders]:
    cache = MetadataCache()
    cache.brokers = {1: kafka_broker(1), 2: kafka_broker(2), 3: kafka_broker(3, listener="OTHER")}
    cache.topics = {"t": TopicAssignment({0: [1, 2], 1: [2, 4], 2: [3, 1], 3: [1, 2]}, topic_id=TOPIC_ID)}
    cache.partitions = {
        ("t", 0): PartitionInfo("t", 0, (1, 2), 1, 5, (1, 2), 1, 0),
        ("t", 1): PartitionInfo("t", 1, (2, 4), 2, 3, (2,), 1, 0),   # replica 4 is not registered: offline
        ("t", 2): PartitionInfo("t", 2, (3, 1), 3, 1, (3, 1), 1, 0),  # its leader has no PLAINTEXT listener
        # partition 3: no state yet (no leader elected)
    }
    ready = asyncio.Event()
    ready.set()
    view = SimpleNamespace(broker_id=1, cluster_id="cid", controller_id=2, ready=ready)
    leaders = Leaders()
    apis = KafkaApis(view, cache, leaders, KafkaAuthorizer(None),  # type: ignore[arg-type]
                     BrokerConfig(1, "zk", "127.0.0.1", 8082, Path(".")))
    return apis, cache, leaders


def call(apis: KafkaApis, api_key: int, version: int, **fields: Any) -> Any:
    request_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=99, client_id="unit"))
    entity_writer(request_cls)(out, codec.make(request_cls, **fields))
    frame = asyncio.run(apis.handle(CONN, out.getvalue()))
    if frame is None:
        return None
    response_cls = load_response_schema(api_key, version)
    header, size = entity_reader(response_cls.__header_schema__)(frame, 4)
    assert header.correlation_id == 99
    body, rest = entity_reader(response_cls)(frame, 4 + size)
    assert 4 + size + rest == len(frame)
    return body


def metadata_topics(version: int, *names: str) -> dict[str, Any]:
    cls = load_request_schema(3, version)
    topic_cls = codec.nested(cls, "MetadataRequestTopic")
    return {"topics": tuple(codec.make(topic_cls, name=n, topic_id=None) for n in names),
            "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}


@pytest.mark.parametrize("version", [0, 1, 7, 9, 12])
def test_metadata_names_brokers_on_the_requests_listener_and_every_partition_state(
        setup: tuple[KafkaApis, MetadataCache, Leaders], version: int) -> None:
    apis, _, _ = setup
    body = call(apis, 3, version, **metadata_topics(version, "t"))
    assert [(b.node_id, b.host, b.port) for b in body.brokers] == [(1, "b1.example", 9092), (2, "b2.example", 9093)]
    if version >= 2:
        assert (body.cluster_id, body.controller_id) == ("cid", 2)
    [topic] = body.topics
    assert topic.error_code == 0 and topic.name == "t"
    parts = {p.partition_index: p for p in topic.partitions}
    assert (parts[0].error_code, parts[0].leader_id, parts[0].replica_nodes, parts[0].isr_nodes) == (0, 1, (1, 2),
                                                                                                     (1, 2))
    assert parts[1].error_code == 0
    assert (parts[2].error_code, parts[2].leader_id) == (5, -1)  # LEADER_NOT_AVAILABLE: not on this listener
    assert (parts[3].error_code, parts[3].leader_id, parts[3].replica_nodes) == (5, -1, (1, 2))
    if version >= 5:
        assert parts[1].offline_replicas == (4,)
    if version >= 7:
        assert parts[0].leader_epoch == 5
    if version >= 10:
        assert topic.topic_id == uuid.UUID(TOPIC_UUID)  # ZooKeeper's url-safe base64 form, as a UUID


def test_metadata_errors_per_topic_and_all_topics(setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, _ = setup
    body = call(apis, 3, 9, **metadata_topics(9, "nope", "bad/name", "t"))
    assert [(t.name, t.error_code) for t in body.topics] == [("nope", 3), ("bad/name", 17), ("t", 0)]
    everything = call(apis, 3, 9, topics=None, allow_auto_topic_creation=True,
                      include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert [t.name for t in everything.topics] == ["t"]
    assert [t.name for t in call(apis, 3, 0, topics=()).topics] == ["t"]  # v0: an empty list is every topic
    assert call(apis, 3, 1, topics=()).topics == ()  # v1+: an empty list is none


def test_api_versions_answers_the_supported_table(setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, _ = setup
    body = call(apis, 18, 3, client_software_name="librdkafka", client_software_version="2.16.0")
    assert body.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == codec.SUPPORTED
    bad = call(apis, 18, 3, client_software_name="-bad-", client_software_version="1")
    assert bad.error_code == 42 and bad.api_keys == ()


def produce_body(version: int, acks: int, topics: dict[str, list[int]]) -> dict[str, Any]:
    cls = load_request_schema(0, version)
    topic_cls, part_cls = codec.nested(cls, "TopicProduceData"), codec.nested(cls, "PartitionProduceData")
    batch = encode_batch([(None, b"v", 1, [])])
    return {"transactional_id": None, "acks": acks, "timeout": datetime.timedelta(milliseconds=1500),
            "topic_data": tuple(codec.make(topic_cls, name=t, partition_data=tuple(
                codec.make(part_cls, index=p, records=batch) for p in ps)) for t, ps in topics.items())}


def test_produce_answers_per_partition_with_the_leader_when_not_leader(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    leaders.fail[("t", 1)] = NotLeaderOrFollowerError("not me", leader=2, leader_epoch=3)
    leaders.fail[("u", 0)] = UnknownTopicError("no u")
    body = call(apis, 0, 11, **produce_body(11, -1, {"t": [0, 1], "u": [0]}))
    t, u = body.responses
    ok, moved = t.partition_responses
    assert (ok.error_code, ok.base_offset, ok.log_start_offset, ok.log_append_time) == (0, 40, 3, None)
    assert (moved.error_code, moved.base_offset, moved.error_message) == (6, -1, "not me")
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 3)
    assert [(n.node_id, n.host, n.port) for n in body.node_endpoints] == [(2, "b2.example", 9093)]
    assert u.partition_responses[0].error_code == 3
    assert ("append", "t", 0, -1, 1500) in leaders.calls


def test_a_produce_whose_appends_never_wait_is_answered_without_yielding_to_the_loop(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    """Appends to partitions led here (page-cache writes) never wait; the answer must then be ready in the
    request's own step, before anything the appends woke (the followers' parked fetches) runs: through
    asyncio.gather's tasks, their answers went out first and an acks=1 produce at RF 3 took a millisecond more
    than at RF 1 (bench/kafka_latency.py)."""
    apis, _, leaders = setup
    request_cls = load_request_schema(0, 9)
    out = io.BytesIO()
    entity_writer(HeaderV2)(out, HeaderV2(request_api_key=0, request_api_version=9, correlation_id=5,
                                          client_id="unit"))
    entity_writer(request_cls)(out, codec.make(request_cls, **produce_body(9, 1, {"t": [0, 1]})))

    async def main() -> None:
        handling = apis.handle(CONN, out.getvalue())
        with pytest.raises(StopIteration) as answered:  # the first step runs to the end: no suspension
            handling.send(None)
        assert answered.value.value is not None
        assert [c[:3] for c in leaders.calls] == [("append", "t", 0), ("append", "t", 1)]

    asyncio.run(main())


def test_produce_with_invalid_acks_appends_nothing(setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    body = call(apis, 0, 3, **produce_body(3, 2, {"t": [0]}))
    assert body.responses[0].partition_responses[0].error_code == 21  # INVALID_REQUIRED_ACKS
    assert leaders.calls == []


def test_acks_zero_answers_nothing_and_closes_the_connection_on_an_error(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    assert call(apis, 0, 9, **produce_body(9, 0, {"t": [0]})) is None
    leaders.fail[("t", 0)] = UnknownTopicError("gone")
    with pytest.raises(CloseConnection, match="gone"):
        call(apis, 0, 9, **produce_body(9, 0, {"t": [0]}))


def test_list_offsets_by_isolation_level(setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    cls = load_request_schema(2, 6)
    topic_cls, part_cls = codec.nested(cls, "ListOffsetsTopic"), codec.nested(cls, "ListOffsetsPartition")
    body = call(apis, 2, 6, replica_id=-1, isolation_level=1, topics=(codec.make(topic_cls, name="t", partitions=(
        codec.make(part_cls, partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    part = body.topics[0].partitions[0]
    assert (part.error_code, part.offset, part.leader_epoch) == (0, 11, 4)
    assert leaders.calls == [("list", "t", 0, -1, True)]


@pytest.mark.parametrize(("version", "expected"), [(4, 5), (5, 78), (7, 78)])
def test_a_lagging_new_leaders_offset_is_leader_not_available_before_v5(
        setup: tuple[KafkaApis, MetadataCache, Leaders], version: int, expected: int) -> None:
    """OFFSET_NOT_AVAILABLE (78) came with ListOffsets v5; an older client gets LEADER_NOT_AVAILABLE (5), which
    it retries too (KafkaApis.handleListOffsetRequestV1AndAbove)."""
    apis, _, leaders = setup
    leaders.fail[("t", 0)] = OffsetNotAvailableError("lags")
    cls = load_request_schema(2, version)
    topic_cls, part_cls = codec.nested(cls, "ListOffsetsTopic"), codec.nested(cls, "ListOffsetsPartition")
    body = call(apis, 2, version, replica_id=-1, isolation_level=0, topics=(codec.make(topic_cls, name="t", partitions=(
        codec.make(part_cls, partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    part = body.topics[0].partitions[0]
    assert (part.error_code, part.offset) == (expected, -1)


def test_fetch_read_committed_lists_aborted_transactions_and_session_zero(
        setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    apis, _, leaders = setup
    leaders.fail[("t", 1)] = NotLeaderOrFollowerError("not me", leader=2, leader_epoch=3)
    cls = load_request_schema(1, 12)
    topic_cls, part_cls = codec.nested(cls, "FetchTopic"), codec.nested(cls, "FetchPartition")
    body = call(apis, 1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                isolation_level=1, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(codec.make(topic_cls, topic="t", partitions=tuple(
                    codec.make(part_cls, partition=p, current_leader_epoch=-1, fetch_offset=5, last_fetched_epoch=-1,
                               log_start_offset=-1, partition_max_bytes=1000) for p in (0, 1))),))
    assert (body.error_code, body.session_id) == (0, 0)
    ok, moved = body.responses[0].partitions
    assert (ok.error_code, ok.high_watermark, ok.last_stable_offset) == (0, 6, 6)
    assert [(a.producer_id, a.first_offset) for a in ok.aborted_transactions] == [(7, 5)]
    assert ok.records == encode_batch([(b"k", b"v", 1, [])], base_offset=5)
    assert (moved.error_code, moved.current_leader.leader_id, moved.records) == (6, 2, b"")


def test_the_authorizer_filters_and_refuses_as_kafka_does(setup: tuple[KafkaApis, MetadataCache, Leaders]) -> None:
    """User:ANONYMOUS on PLAINTEXT, asked of the broker's authorizer with the client's address as the host."""
    apis, cache, leaders = setup
    cache.topics["secret"] = TopicAssignment({0: [1]})
    asked: list[tuple[str, ...]] = []

    def allowed(principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        asked.append((principal, host, operation, resource_type, name))
        return name == "t"

    apis._auth = KafkaAuthorizer(SimpleNamespace(enforce=True, allowed=allowed))  # type: ignore[arg-type]
    listed = call(apis, 3, 9, topics=None, allow_auto_topic_creation=True,
                  include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert [t.name for t in listed.topics] == ["t"]  # all topics: what may not be described is left out
    named = call(apis, 3, 9, **metadata_topics(9, "secret", "t"))
    assert [(t.name, t.error_code) for t in named.topics] == [("secret", 29), ("t", 0)]
    produced = call(apis, 0, 9, **produce_body(9, -1, {"secret": [0], "t": [0]}))
    assert [(r.name, r.partition_responses[0].error_code) for r in produced.responses] == [("secret", 29), ("t", 0)]
    assert [c for c in leaders.calls if c[0] == "append"] == [("append", "t", 0, -1, 1500)]
    assert ("User:ANONYMOUS", "127.0.0.1", "Write", "Topic", "secret") in asked
