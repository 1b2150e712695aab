"""Kafka's data path on a real 3-broker cluster, spoken by real clients installed unchanged: kafka-python and
aiokafka consumers (manual assignment) reading what confluent-kafka produced, incremental fetch sessions
(KIP-227) as kafka-python uses them, and a librdkafka consumer that goes on without a gap or a duplicate when
the leader it reads from is SIGKILLed (it validates its position with OffsetForLeaderEpoch on the new leader).

The broker's own counters (/metrics) say which kind of fetches it served: librdkafka never asks for a fetch
session (it always sends session 0, epoch -1), kafka-python does as soon as the broker answers a session id.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.cluster

MAX_FULL_FETCHES = 6
"""Full fetches one assign-mode consumer of a 3-partition topic makes: one to open a session at each of the (at
most) 3 brokers leading a partition, and one more each for a session started over (kafka-python does so after any
failed fetch, such as one past its 30 s request timeout on a loaded machine, or a partition's leader moving). It
excludes sessions that never go incremental: the test's read takes dozens of fetches, and its wait after that ten
incremental ones more."""

_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>[0-9.e+-]+)$')


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module, each broker with a REST and a Kafka listener (tests use own topics)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-data-path"), "kafka-data-path", 3)
    yield backend
    backend.close()


def new_topic(c: LocalProcessBackend, partitions: int = 3, rf: int = 3) -> str:
    name = f"kd-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(c.broker_ids()[0]), name, partitions, rf,
                 seen_by=[c.broker_url(b) for b in c.broker_ids()])
    return name


def counter(c: LocalProcessBackend, name: str, brokers: list[int] | None = None, **labels: str) -> float:
    """A counter summed over ``brokers`` (default: all), from each broker's /metrics."""
    total = 0.0
    for b in brokers or c.broker_ids():
        status, body, _ = request("GET", f"{c.broker_url(b)}/metrics", accept="text/plain")
        assert status == 200, body
        for line in body.decode().splitlines():
            m = _SAMPLE.match(line)
            if m is None or m["name"] != name:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m["value"])
    return total


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """``n`` records round the partitions with confluent-kafka (acks=all); what was acknowledged, per partition."""
    acked: dict[int, list[tuple[int, bytes]]] = {}
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    for i in range(n):
        while True:
            try:
                producer.produce(topic, f"value-{i}".encode(), key=f"k{i}".encode(), partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(SLOW_MACHINE_S) == 0
    assert not errors, errors[:3]
    return {p: sorted(got) for p, got in acked.items()}


def by_partition(records: list[tuple[int, int, bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, value in records:
        out.setdefault(partition, []).append((offset, value))
    return out


# ----------------------------------------------------------------------------------------------- kafka-python


def test_kafka_python_reads_in_assign_mode_over_incremental_fetch_sessions(cluster: LocalProcessBackend) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    topic = new_topic(cluster)
    produced = produce(cluster.kafka_bootstrap, topic, 3000, 3)
    incremental = counter(cluster, "odradek_kafka_fetches_total", session="incremental")
    full = counter(cluster, "odradek_kafka_fetches_total", session="full")
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=4096)
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(3)])
        consumer.seek_to_beginning()
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < 3000:
            assert time.monotonic() < deadline, f"consumed {len(got)} of 3000"
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got.extend((tp.partition, m.offset, m.value) for m in messages)
        # caught up: the sessions go on answering nothing new, incrementally (kafka-python fetches inside poll)
        wait_until(lambda: not consumer.poll(timeout_ms=200) and counter(
            cluster, "odradek_kafka_fetches_total", session="incremental") > incremental + 10,
            SLOW_MACHINE_S, "incremental fetches", interval=0)
    finally:
        consumer.close()
    assert by_partition(got) == produced  # every record once, in order, as acknowledged
    # One session per broker that leads a partition (each opened by a full fetch), then incremental fetches only.
    full_fetches = counter(cluster, "odradek_kafka_fetches_total", session="full") - full
    assert 1 <= full_fetches <= MAX_FULL_FETCHES, full_fetches
    assert counter(cluster, "odradek_kafka_fetch_sessions") >= 1


# --------------------------------------------------------------------------------------------------- aiokafka


def test_aiokafka_reads_in_assign_mode_what_confluent_kafka_produced(cluster: LocalProcessBackend) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    topic = new_topic(cluster)
    produced = produce(cluster.kafka_bootstrap, topic, 2000, 3)

    async def consume() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in range(3)])
            await consumer.seek_to_beginning()
            got: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + SLOW_MACHINE_S
            while len(got) < 2000:
                assert time.monotonic() < deadline, f"consumed {len(got)} of 2000"
                for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                    got.extend((tp.partition, m.offset, m.value) for m in messages)
            return got
        finally:
            await consumer.stop()

    assert by_partition(asyncio.run(consume())) == produced


# --------------------------------------------------------------------------------------------- confluent-kafka


def test_librdkafka_fetches_sessionless(cluster: LocalProcessBackend) -> None:
    """librdkafka sends every Fetch with session 0 and epoch -1 (it does not implement KIP-227's client side):
    each is a full fetch, and no session is kept for it."""
    topic = new_topic(cluster, partitions=1)
    produced = produce(cluster.kafka_bootstrap, topic, 200, 1)
    sessionless = counter(cluster, "odradek_kafka_fetches_total", session="sessionless")
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < 200:
            assert time.monotonic() < deadline, f"consumed {len(got)} of 200"
            for m in consumer.consume(num_messages=500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.value()))
    finally:
        consumer.close()
    assert by_partition(got) == produced
    assert counter(cluster, "odradek_kafka_fetches_total", session="sessionless") > sessionless
    assert counter(cluster, "odradek_kafka_requests_total", api="Fetch", outcome="ok") > 0


def test_librdkafka_goes_on_without_gap_or_duplicate_when_its_leader_is_killed(make_cluster: Any) -> None:
    """A producer keeps writing (acks=all, idempotent) while a librdkafka consumer reads; the partition's leader
    is SIGKILLed mid-way. The consumer moves to the new leader, validates its position there with
    OffsetForLeaderEpoch (the leader epoch moved) and reads on: every acknowledged record exactly once, in order."""
    c = make_cluster(brokers=3)
    topic = f"kd-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(1), topic, 1, 3, seen_by=[c.broker_url(b) for b in c.broker_ids()])
    leader = metadata(c.broker_url(1), topic)["partitions"][0]["leader"]
    survivors = [b for b in c.broker_ids() if b != leader]
    bootstrap = ",".join(c.kafka_address(b) for b in c.broker_ids())

    acked: list[tuple[int, bytes]] = []
    errors: list[Any] = []
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": int(SLOW_MACHINE_S * 1000)})

        def on_delivery(err: Any, msg: Any) -> None:
            (errors.append(err) if err is not None else acked.append((msg.offset(), msg.value())))

        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, f"v{i}".encode(), partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.002)
        assert producer.flush(SLOW_MACHINE_S) == 0

    consumed: list[tuple[int, bytes]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})

    def read_for(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                if m.error() is None:
                    consumed.append((m.offset(), m.value()))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        wait_until(lambda: read_for(0.2) or len(consumed) > 300, SLOW_MACHINE_S, "records before the kill")
        epochs_before = counter(c, "odradek_kafka_requests_total", survivors, api="OffsetForLeaderEpoch")
        c.kill_broker(leader)  # mid-consumption: the producer and the consumer are both busy with it
        wait_until(lambda: metadata(c.broker_url(survivors[0]), topic)["partitions"][0]["leader"] in survivors,
                   SLOW_MACHINE_S, "a new leader")
        count = len(consumed)
        wait_until(lambda: read_for(0.2) or len(consumed) > count + 300, SLOW_MACHINE_S,
                   "records from the new leader")
        stop.set()
        writer.join(SLOW_MACHINE_S)
        assert not writer.is_alive()
        wait_until(lambda: read_for(0.2) or len(consumed) >= len(acked), SLOW_MACHINE_S, "every acknowledged record")
        assert counter(c, "odradek_kafka_requests_total", survivors, api="OffsetForLeaderEpoch") > epochs_before
    finally:
        stop.set()
        consumer.close()
    assert not errors, errors[:3]
    offsets = [o for o, _ in consumed]
    assert offsets == list(range(len(offsets))), "a gap or a duplicate in what the consumer read"
    assert consumed[:len(acked)] == sorted(acked), "not what was acknowledged, in order"
