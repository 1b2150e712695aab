"""The Kafka door's data path over stand-in services (tests/unit/kafka/test_apis.py's): Fetch with incremental
fetch sessions, ListOffsets v7's max-timestamp query, OffsetForLeaderEpoch, and the per-API request metrics."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema

from broker.config import BrokerConfig
from broker.kafka import codec
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.network import CloseConnection
from broker.kafka.request_metrics import MeteredDispatch, api_name
from broker.metadata.cache import MetadataCache, PartitionInfo
from broker.metrics import BrokerMetrics
from odradek.protocol.errors import NotLeaderOrFollowerError
from odradek.protocol.model import TopicAssignment
from tests.unit.kafka.test_apis import CONN, Leaders, call, kafka_broker

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = 1, 2, 23


def make_door(authorizer: KafkaAuthorizer | None = None) -> tuple[KafkaApis, Leaders]:
    cache = MetadataCache()
    cache.brokers = {1: kafka_broker(1), 2: kafka_broker(2)}
    cache.topics = {"t": TopicAssignment({0: [1, 2], 1: [2, 1], 2: [1, 2]}), "u": TopicAssignment({0: [1]})}
    cache.partitions = {("t", p): PartitionInfo("t", p, (1, 2), 1, 5, (1, 2), 1, 0) for p in (0, 1, 2)}
    ready = asyncio.Event()
    ready.set()
    services = Leaders()
    apis = KafkaApis(SimpleNamespace(broker_id=1, cluster_id="c", controller_id=1, ready=ready),  # type: ignore[arg-type]
                     cache, services, authorizer or KafkaAuthorizer(None),  # type: ignore[arg-type]
                     BrokerConfig(1, "zk", "127.0.0.1", 8082, Path(".")))
    return apis, services


@pytest.fixture
def door() -> tuple[KafkaApis, Leaders]:
    return make_door()


def fetch(apis: KafkaApis, session_id: int, epoch: int, wanted: dict[tuple[str, int], int],
          forgotten: dict[str, list[int]] | None = None, version: int = 12) -> Any:
    cls = load_request_schema(FETCH, version)
    topic_cls, part_cls = codec.nested(cls, "FetchTopic"), codec.nested(cls, "FetchPartition")
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in wanted.items():
        topics.setdefault(topic, []).append(codec.make(
            part_cls, partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1000))
    forgotten_cls = codec.nested(cls, "ForgottenTopic") if version >= 7 else None
    return call(apis, FETCH, version, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
                forgotten_topics_data=tuple(codec.make(forgotten_cls, topic=t, partitions=tuple(ps))
                                            for t, ps in (forgotten or {}).items()) if forgotten_cls else (),
                topics=tuple(codec.make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in topics.items()))


def carried(body: Any) -> list[tuple[str, int, int, bool]]:
    """(topic, partition, high watermark, has records) of each partition the answer carries, in order."""
    return [(t.topic, p.partition_index, p.high_watermark, bool(p.records)) for t in body.responses
            for p in t.partitions]


def test_a_fetch_session_answers_only_partitions_with_news(door: tuple[KafkaApis, Leaders]) -> None:
    apis, services = door
    services.high_watermark = 10
    full = fetch(apis, 0, 0, {("t", 0): 10, ("t", 1): 10, ("u", 0): 10})
    sid = full.session_id
    assert full.error_code == 0 and sid > 0
    assert carried(full) == [("t", 0, 10, False), ("t", 1, 10, False), ("u", 0, 10, False)]
    reads = len(services.calls)
    quiet = fetch(apis, sid, 1, {})
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (0, sid, ())  # nothing new: nothing said
    assert len(services.calls) == reads + 3  # yet every partition of the session was read
    services.high_watermark = 12
    news = fetch(apis, sid, 2, {})
    assert carried(news) == [("t", 0, 12, True), ("t", 1, 12, True), ("u", 0, 12, True)]
    # the client moved t-0 on and forgot u-0: t-0 has nothing new at 12, t-1 (still at 10) has records again
    moved = fetch(apis, sid, 3, {("t", 0): 12}, forgotten={"u": [0]})
    assert carried(moved) == [("t", 1, 12, True)]
    assert services.sessions.get(sid).size == 2  # type: ignore[union-attr]
    assert services.calls[-2:] == [("read", "t", 0, 12, 1000, 0, False), ("read", "t", 1, 10, 1000, 0, False)]


def test_fetch_session_errors_and_sessionless_fetches(door: tuple[KafkaApis, Leaders]) -> None:
    apis, services = door
    sid = fetch(apis, 0, 0, {("t", 0): 0}).session_id
    wrong = fetch(apis, sid, 5, {})
    assert (wrong.error_code, wrong.session_id, wrong.responses) == (71, 0, ())  # INVALID_FETCH_SESSION_EPOCH
    gone = fetch(apis, 777, 1, {("t", 0): 0})
    assert (gone.error_code, gone.session_id, gone.responses) == (70, 0, ())  # FETCH_SESSION_ID_NOT_FOUND
    assert fetch(apis, sid, 1, {}).error_code == 0  # the session outlived both
    librdkafka = fetch(apis, 0, -1, {("t", 0): 0, ("t", 2): 0})
    assert librdkafka.session_id == 0 and len(carried(librdkafka)) == 2
    old = fetch(apis, 0, 0, {("t", 0): 0}, version=6)  # before KIP-227: no session, whatever was asked
    assert len(carried(old)) == 1 and len(services.sessions) == 1
    stats = services.sessions.stats()
    assert stats.contexts == {"sessionless": 2, "full": 1, "incremental": 1, "error": 2}


def test_a_partition_in_error_stays_in_the_session_and_is_carried_each_time(door: tuple[KafkaApis, Leaders]) -> None:
    apis, services = door
    services.high_watermark = 3
    services.fail[("t", 1)] = NotLeaderOrFollowerError("not me", leader=2, leader_epoch=6)
    sid = fetch(apis, 0, 0, {("t", 0): 3, ("t", 1): 3}).session_id
    again = fetch(apis, sid, 1, {})
    [topic] = again.responses
    [part] = topic.partitions
    assert (part.partition_index, part.error_code, part.current_leader.leader_id) == (1, 6, 2)
    del services.fail[("t", 1)]
    assert carried(fetch(apis, sid, 2, {})) == [("t", 1, 3, False)]  # the error cleared: said once
    assert carried(fetch(apis, sid, 3, {})) == []


def test_list_offsets_v7_asks_for_the_largest_timestamp(door: tuple[KafkaApis, Leaders]) -> None:
    apis, services = door
    cls = load_request_schema(LIST_OFFSETS, 7)
    topic_cls, part_cls = codec.nested(cls, "ListOffsetsTopic"), codec.nested(cls, "ListOffsetsPartition")
    body = call(apis, LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(codec.make(
        topic_cls, name="t", partitions=(codec.make(part_cls, partition_index=0, current_leader_epoch=5,
                                                    timestamp=-3),)),))
    assert body.topics[0].partitions[0].error_code == 0
    assert services.calls == [("list", "t", 0, -3, False)]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers_each_partitions_epoch_end(door: tuple[KafkaApis, Leaders],
                                                                   version: int) -> None:
    apis, services = door
    services.fail[("t", 1)] = NotLeaderOrFollowerError("not me", leader=2)
    cls = load_request_schema(OFFSET_FOR_LEADER_EPOCH, version)
    topic_cls, part_cls = codec.nested(cls, "OffsetForLeaderTopic"), codec.nested(cls, "OffsetForLeaderPartition")
    partitions = (codec.make(part_cls, partition=0, current_leader_epoch=5, leader_epoch=4),
                  codec.make(part_cls, partition=1, current_leader_epoch=5, leader_epoch=4),
                  codec.make(part_cls, partition=2, current_leader_epoch=-1, leader_epoch=9))
    body = call(apis, OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1,
                topics=(codec.make(topic_cls, topic="t", partitions=partitions),))
    assert [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in body.topics[0].partitions] == [
        (0, 0, 4, 30), (1, 6, -1, -1), (2, 0, -1, -1)]  # an epoch the log does not know: undefined, as Kafka
    assert ("epoch", "t", 0, 4, 5) in services.calls


def test_offset_for_leader_epoch_is_authorized_as_kafka_does() -> None:
    asked: list[tuple[str, str, str]] = []

    def allowed(principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        asked.append((operation, resource_type, name))
        return False

    apis, services = make_door(KafkaAuthorizer(SimpleNamespace(enforce=True, allowed=allowed)))  # type: ignore[arg-type]
    cls = load_request_schema(OFFSET_FOR_LEADER_EPOCH, 4)
    topic_cls, part_cls = codec.nested(cls, "OffsetForLeaderTopic"), codec.nested(cls, "OffsetForLeaderPartition")
    topics = (codec.make(topic_cls, topic="t", partitions=(codec.make(part_cls, partition=0, leader_epoch=4),)),)
    consumer = call(apis, OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=topics)
    follower = call(apis, OFFSET_FOR_LEADER_EPOCH, 4, replica_id=2, topics=topics)
    assert consumer.topics[0].partitions[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    assert follower.topics[0].partitions[0].error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert asked == [("Describe", "Topic", "t"), ("ClusterAction", "Cluster", "kafka-cluster")]
    assert not [c for c in services.calls if c[0] == "epoch"]


def test_kafka_requests_are_counted_per_api_and_outcome() -> None:
    metrics = BrokerMetrics(list)

    async def dispatch(conn: Any, frame: bytes) -> bytes | None:
        if frame[:2] == b"\x00\x00":
            return None
        if frame[:2] == b"\x00\x17":
            raise CloseConnection("no")
        return b"answer"

    metered = MeteredDispatch(dispatch, metrics)

    async def main() -> None:
        assert await metered.dispatch(CONN, b"\x00\x01rest") == b"answer"
        assert await metered.dispatch(CONN, b"\x00\x00rest") is None
        with pytest.raises(CloseConnection):
            await metered.dispatch(CONN, b"\x00\x17rest")
        await metered.dispatch(CONN, b"\x7f\x7frest")

    asyncio.run(main())
    text = metrics.render().decode()
    for line in ('odradek_kafka_requests_total{api="Fetch",outcome="ok"} 1.0',
                 'odradek_kafka_requests_total{api="Produce",outcome="no_response"} 1.0',
                 'odradek_kafka_requests_total{api="OffsetForLeaderEpoch",outcome="closed"} 1.0',
                 'odradek_kafka_requests_total{api="unknown",outcome="ok"} 1.0',
                 'odradek_kafka_request_seconds_count{api="Fetch"} 1.0'):
        assert line in text, line
    assert api_name(b"") == "unknown" and api_name(b"\x00\x12") == "ApiVersions"


def test_fetch_sessions_are_exported_once_watched() -> None:
    from broker.fetch.sessions import FetchSessionCache, PartitionFetch, PartitionOutcome

    metrics = BrokerMetrics(list)
    assert "odradek_kafka_fetch_sessions" not in metrics.render().decode()
    sessions = FetchSessionCache()
    metrics.watch_fetch_sessions(sessions.stats)
    sessions.new_context(0, 0, [PartitionFetch("t", 0, 0, 1)]).respond([PartitionOutcome(0, 0, 0)])
    text = metrics.render().decode()
    assert "odradek_kafka_fetch_sessions 1.0" in text and 'odradek_kafka_fetches_total{session="full"} 1.0' in text
