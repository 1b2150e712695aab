"""A follower's Fetch on a leader's Kafka listener (issue 25), on a real 3-broker cluster: the leader's side of the
replication channel, driven with the broker's own Kafka client (broker/kafka/channel.py) as a follower broker
would drive it, at Fetch v15 with its broker epoch read from ZooKeeper, for several partitions in one request."""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from broker.kafka import codec
from broker.kafka.channel import KafkaChannel
from broker.kafka.codec import FETCH, METADATA, make, nested
from odradek.protocol.records import decode_records
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata
from tests.harness.wait import SLOW_MACHINE_S

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.cluster

NONE, NOT_LEADER_OR_FOLLOWER, STALE_BROKER_EPOCH = 0, 6, 77
# A follower's fetch at the log end waits up to this for an append (the brokers' --fetch-max-wait-ms cap raised to
# match), far longer than an acks=all produce takes on a loaded machine. Its answer coming only when the wait ran
# out is what ANSWERED_WITHIN_S excludes: half the wait.
MAX_WAIT_MS = 2 * int(SLOW_MACHINE_S * 1000)
ANSWERED_WITHIN_S = MAX_WAIT_MS / 1000 / 2


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("replica-fetch-kafka"), "replica-fetch-kafka", 3,
                             broker_args=["--fetch-max-wait-ms", str(MAX_WAIT_MS)])
    yield backend
    backend.close()


class Setup:
    """A 6-partition topic on every broker (rf 3), a broker leading at least two of its partitions (pigeonhole),
    and a follower of those: its broker epoch as ZooKeeper holds it."""

    def __init__(self, c: LocalProcessBackend) -> None:
        self.cluster = c
        self.topic = f"rf-{uuid.uuid4().hex[:8]}"
        create_topic(c.broker_url(1), self.topic, 6, 3, seen_by=[c.broker_url(b) for b in c.broker_ids()])
        parts = metadata(c.broker_url(1), self.topic)["partitions"]
        led: dict[int, list[int]] = {}
        for p in parts:
            led.setdefault(p["leader"], []).append(p["partition"])
        self.leader = max(led, key=lambda b: len(led[b]))
        self.partitions = sorted(led[self.leader])
        assert len(self.partitions) >= 2
        self.follower = next(b for b in c.broker_ids() if b != self.leader)
        registered = c.zk_client().get_broker(self.follower)
        assert registered is not None and registered.epoch > 0
        self.broker_epoch = registered.epoch
        host, port = c.kafka_address(self.leader).rsplit(":", 1)
        self.host, self.port = host, int(port)

    def produce(self, partition: int, values: list[bytes]) -> None:
        """acks=all through librdkafka: answered once every ISR member (the real followers) has the records."""
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": self.cluster.kafka_bootstrap, "acks": "all"})
        for v in values:
            producer.produce(self.topic, value=v, partition=partition,
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
        assert producer.flush(SLOW_MACHINE_S) == 0 and not errors, errors


async def topic_id(channel: KafkaChannel, topic: str) -> uuid.UUID:
    v = channel.version(METADATA)
    cls = codec.request_class(METADATA, v)
    answer = await channel.send(METADATA, {
        "topics": (make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})
    (t,) = answer.topics
    assert t.error_code == NONE and t.topic_id is not None
    return t.topic_id


def replica_fetch(version: int, topic: str, tid: uuid.UUID, offsets: dict[int, int], *, replica: int,
                  broker_epoch: int, max_wait_ms: int = 0) -> Any:
    cls = codec.request_class(FETCH, version)
    parts = tuple(make(nested(cls, "FetchPartition"), partition=p, current_leader_epoch=-1, fetch_offset=o,
                       last_fetched_epoch=-1, log_start_offset=0, partition_max_bytes=1 << 20)
                  for p, o in offsets.items())
    return make(cls, replica_id=replica,
                replica_state=make(nested(cls, "ReplicaState"), replica_id=replica, replica_epoch=broker_epoch)
                if version >= 15 else None,
                max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=10 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                topics=(make(nested(cls, "FetchTopic"), topic=topic, topic_id=tid, partitions=parts),))


def by_partition(answer: Any) -> dict[int, Any]:
    assert answer.error_code == NONE
    return {p.partition_index: p for t in answer.responses for p in t.partitions}


def test_a_follower_fetches_several_partitions_at_v15_and_is_answered_on_an_acks_all_append(
        cluster: LocalProcessBackend) -> None:
    s = Setup(cluster)
    first, second = s.partitions[:2]
    for p in (first, second):
        s.produce(p, [f"{p}-{i}".encode() for i in range(5)])

    async def main() -> None:
        channel = KafkaChannel(s.host, s.port, client_id=f"broker-{s.follower}-fetcher-0")
        try:
            await channel.connect()
            assert channel.version(FETCH) == 15
            tid = await topic_id(channel, s.topic)
            # From the start: the records as stored, and the high watermark (acks=all: every ISR member has them).
            answer = await channel.send(FETCH, replica_fetch(15, s.topic, tid, {first: 0, second: 0},
                                                             replica=s.follower, broker_epoch=s.broker_epoch))
            assert [t.topic_id for t in answer.responses] == [tid]
            parts = by_partition(answer)
            for p in (first, second):
                assert parts[p].error_code == NONE, parts[p]
                assert isinstance(parts[p].records, bytes)
                assert [r.value for r in decode_records(parts[p].records)] == [f"{p}-{i}".encode() for i in range(5)]
                assert (parts[p].high_watermark, parts[p].log_start_offset) == (5, 0)
            # At the log end of both: the answer comes with the first append, an acks=all produce meanwhile.
            loop = asyncio.get_running_loop()
            started = loop.time()
            waiting = asyncio.create_task(channel.send(
                FETCH, replica_fetch(15, s.topic, tid, {first: 5, second: 5}, replica=s.follower,
                                     broker_epoch=s.broker_epoch, max_wait_ms=MAX_WAIT_MS),
                timeout_s=MAX_WAIT_MS / 1000 + SLOW_MACHINE_S))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            await loop.run_in_executor(None, s.produce, second, [b"late"])
            parts = by_partition(await asyncio.wait_for(waiting, SLOW_MACHINE_S))
            assert loop.time() - started < ANSWERED_WITHIN_S  # answered by the append, not by max_wait
            assert [r.value for r in decode_records(parts[second].records)] == [b"late"]
            assert parts[first].error_code == NONE and parts[first].records == b""
            assert parts[second].high_watermark >= 5
        finally:
            await channel.close()

    asyncio.run(main())


def test_a_stale_broker_epoch_a_foreign_replica_and_a_pre_v15_replica_fetch_are_refused(
        cluster: LocalProcessBackend) -> None:
    s = Setup(cluster)
    first, second = s.partitions[:2]
    s.produce(first, [b"x"])

    async def main() -> None:
        channel = KafkaChannel(s.host, s.port, client_id="impostor")
        try:
            await channel.connect()
            tid = await topic_id(channel, s.topic)
            refusals = [
                (15, s.follower, s.broker_epoch - 1, STALE_BROKER_EPOCH),  # an older incarnation of the follower
                (14, s.follower, s.broker_epoch, STALE_BROKER_EPOCH),  # v14 carries no broker epoch at all
                (15, 99, s.broker_epoch, NOT_LEADER_OR_FOLLOWER),  # no replica of these partitions
                (15, s.leader, s.broker_epoch, NOT_LEADER_OR_FOLLOWER),  # the leader itself
            ]
            for version, replica, epoch, error in refusals:
                answer = await channel.send(FETCH, replica_fetch(version, s.topic, tid, {first: 0, second: 0},
                                                                 replica=replica, broker_epoch=epoch),
                                            version=version)
                parts = by_partition(answer)
                assert {p: (e.error_code, e.records) for p, e in parts.items()} == {
                    first: (error, b""), second: (error, b"")}, (version, replica)
        finally:
            await channel.close()

    asyncio.run(main())


def test_librdkafka_consumes_every_partition_with_fetch_served_up_to_v15(cluster: LocalProcessBackend) -> None:
    s = Setup(cluster)
    for p in s.partitions:
        s.produce(p, [f"{p}:{i}".encode() for i in range(3)])
    sent: list[str] = []

    class Requests(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Sent FetchRequest" in record.getMessage():
                sent.append(record.getMessage())

    log = logging.getLogger(f"librdkafka-{s.topic}")
    log.addHandler(Requests())
    log.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "debug": "protocol"}, logger=log)
    try:
        consumer.assign([TopicPartition(s.topic, p, OFFSET_BEGINNING) for p in s.partitions])
        got: list[Any] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < 3 * len(s.partitions):
            assert time.monotonic() < deadline, f"consumed {len(got)}"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
        assert sorted(m.value() for m in got) == sorted(f"{p}:{i}".encode() for p in s.partitions for i in range(3))
        assert sent and all("(v15," in m for m in sent), sent[:3]  # librdkafka fetches at v15: topics by id
    finally:
        consumer.close()
