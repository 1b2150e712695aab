"""The Python client against real brokers: admin, produce on the binary path, fetch, resets and failover."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import defaultdict

import pytest

from odradek import AdminClient, Consumer, Producer, TopicPartition
from odradek.protocol.errors import (
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from odradek.protocol.partitioner import murmur2, to_positive
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster


def bootstrap(cluster: LocalProcessBackend) -> str:
    return ",".join(cluster.broker_url(b) for b in cluster.broker_ids())


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def consume_all(consumer: Consumer, expected: int, timeout: float = SLOW_MACHINE_S) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            out.extend(records)
    return out


@pytest.fixture
def cluster3(make_cluster: MakeCluster) -> LocalProcessBackend:
    return make_cluster(brokers=3)


def test_admin_round_trip(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        assert admin.cluster_id()
        assert sorted(admin.brokers()) == [1, 2, 3]
        created = admin.create_topic(name, partitions=2, replication_factor=3, configs={"retention.ms": 60000})
        assert created["topic_name"] == name and created["partitions_count"] == 2
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topic(name, partitions=2, replication_factor=3)
        assert name in admin.list_topics()
        desc = admin.describe_topic(name)
        assert desc.partition_count == 2 and desc.replication_factor == 3
        assert all(p.leader in (1, 2, 3) and sorted(p.replicas) == [1, 2, 3] for p in desc.partitions)
        assert desc.configs["retention.ms"] == "60000"
        admin.alter_configs(name, set={"cleanup.policy": "compact"}, delete=["retention.ms"])
        configs = admin.describe_configs(name)
        assert configs["cleanup.policy"] == "compact" and configs.get("retention.ms") != "60000"
        admin.add_partitions(name, 4)
        assert admin.describe_topic(name).partition_count == 4
        with pytest.raises(InvalidPartitionsError):
            admin.add_partitions(name, 2)
        assigned = topic_name()
        admin.create_topic(assigned, replica_assignment={0: [2, 3], 1: [3, 1]})
        desc = admin.describe_topic(assigned)
        assert [p.replicas for p in desc.partitions] == [(2, 3), (3, 1)]
        admin.delete_topic(name)
        wait_until(lambda: name not in admin.list_topics(), SLOW_MACHINE_S, "the topic to go")
        with pytest.raises(UnknownTopicError):
            admin.describe_topic(name)


def test_produce_and_consume_keyed_records_in_order(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=3, replication_factor=3)
    sent: dict[int, list[tuple[bytes, bytes, int]]] = defaultdict(list)
    with Producer(bootstrap(cluster3), acks="all", linger_ms=2) as producer:
        futures = []
        for i in range(600):
            key = f"key-{i % 37}".encode()
            futures.append((key, f"value-{i}".encode(), producer.send(name, f"value-{i}", key=key,
                                                                          headers={"n": str(i)})))
        producer.flush(timeout=SLOW_MACHINE_S)
        for key, value, fut in futures:
            meta = fut.result(timeout=SLOW_MACHINE_S)  # done by the flush: the timeout only bounds a bug
            assert meta.topic == name and meta.partition == to_positive(murmur2(key)) % 3
            sent[meta.partition].append((key, value, meta.offset))
    for records in sent.values():  # offsets per partition are 0..n-1 in send order
        assert [o for _, _, o in records] == list(range(len(records)))

    with Consumer(bootstrap(cluster3), fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(3)])
        got = consume_all(consumer, 600)
        by_partition: dict[int, list[tuple[bytes, bytes, int]]] = defaultdict(list)
        for r in got:
            by_partition[r.partition].append((r.key, r.value, r.offset))
            assert r.headers == (("n", r.value.split(b"-")[1]),)
        assert dict(by_partition) == dict(sent)
        assert all(consumer.position(TopicPartition(name, p)) == len(sent[p]) for p in range(3))


@pytest.mark.parametrize("compression", ["gzip", "lz4", "zstd"])
def test_compressed_batches_round_trip(cluster3: LocalProcessBackend, compression: str) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=1, replication_factor=2)
    with Producer(bootstrap(cluster3), compression=compression, batch_size=4096) as producer:
        futures = [producer.send(name, b"x" * (i % 50), key=None if i % 3 else b"k") for i in range(300)]
        producer.send(name, None, key=b"tombstone")
        producer.flush(timeout=SLOW_MACHINE_S)
    assert sorted(f.result().offset for f in futures) == list(range(300))
    with Consumer(bootstrap(cluster3)) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        got = consume_all(consumer, 301)
    assert [r.value for r in got[:300]] == [b"x" * (i % 50) for i in range(300)]
    assert got[300].key == b"tombstone" and got[300].value is None


def test_acks_levels_and_keyless_stickiness(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=4, replication_factor=3)
    with Producer(bootstrap(cluster3), acks=0) as producer:
        metas = [producer.send(name, b"zero").result(timeout=SLOW_MACHINE_S) for _ in range(3)]
    assert all(m.offset == -1 for m in metas)
    # A linger far beyond the loop's length: a batch closes only when full (or at the flush), never because a loaded
    # machine paused between two sends.
    with Producer(bootstrap(cluster3), acks=1, batch_size=1024, linger_ms=int(10 * SLOW_MACHINE_S * 1000)) as producer:
        futures = [producer.send(name, b"y" * 100) for _ in range(40)]
        producer.flush(timeout=SLOW_MACHINE_S)
        parts = [f.result().partition for f in futures]
    # Sticky: runs of one partition as long as a batch (about 8 records of 1 KiB batches), then a switch.
    runs = [p for i, p in enumerate(parts) if i == 0 or parts[i - 1] != p]
    assert 3 <= len(runs) <= 10 and len(set(parts)) >= 2
    assert all(a != b for a, b in itertools.pairwise(runs))


def test_unknown_topic_fails_the_future(cluster3: LocalProcessBackend) -> None:
    with Producer(bootstrap(cluster3)) as producer:
        fut = producer.send("no-such-topic", b"v")
        with pytest.raises(UnknownTopicError):
            fut.result(timeout=SLOW_MACHINE_S)


def test_seek_reset_and_position(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    tp = TopicPartition(name, 0)
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=1, replication_factor=1)
    with Producer(bootstrap(cluster3)) as producer:
        for i in range(20):
            producer.send(name, str(i))
    with Consumer(bootstrap(cluster3), auto_offset_reset="latest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 20
        consumer.seek(tp, 15)
        assert [r.offset for r in consume_all(consumer, 5)] == [15, 16, 17, 18, 19]
        consumer.seek_to_beginning(tp)
        first = consumer.poll(timeout_ms=int(SLOW_MACHINE_S * 1000), max_records=3)  # answers once records come
        assert [r.value for r in first[tp]] == [b"0", b"1", b"2"] and consumer.position(tp) == 3
        consumer.seek(tp, 1000)  # out of range: reset to latest
        assert consumer.poll(timeout_ms=1000) == {}
        wait_until(lambda: consumer.poll(timeout_ms=100) == {} and consumer.position(tp) == 20, SLOW_MACHINE_S,
                   "the reset to the high watermark")
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 20
        it = iter(consumer)
        with Producer(bootstrap(cluster3)) as producer:
            producer.send(name, b"late")
        assert next(it).value == b"late" and consumer.position(tp) == 21
    with Consumer(bootstrap(cluster3), auto_offset_reset="none") as strict:
        strict.assign([tp])
        strict.seek(tp, 5000)
        deadline = time.monotonic() + SLOW_MACHINE_S
        with pytest.raises(OffsetOutOfRangeError):
            while time.monotonic() < deadline:
                strict.poll(timeout_ms=200)


def test_consumer_iteration_stops_after_consumer_timeout(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=2, replication_factor=1)
    with Producer(bootstrap(cluster3)) as producer:
        futures = [producer.send(name, str(i), partition=i % 2) for i in range(10)]
    assert [f.result(timeout=0).partition for f in futures] == [0, 1] * 5
    with Consumer(bootstrap(cluster3), consumer_timeout_ms=1000, fetch_max_wait_ms=200) as consumer:
        consumer.assign([TopicPartition(name, 0), TopicPartition(name, 1)])
        # Each pass ends after 1 s without a record; on a loaded machine that can come before the first fetch
        # answers, so pass again until everything is read (a record is yielded once: the position advances).
        values: list[int] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(values) < 10 and time.monotonic() < deadline:
            values += [int(r.value) for r in consumer]
        assert list(consumer) == []  # with nothing left, iteration stops by itself
    assert sorted(values) == list(range(10))


def test_producer_survives_leader_failover(cluster3: LocalProcessBackend) -> None:
    name = topic_name()
    with AdminClient(bootstrap(cluster3)) as admin:
        admin.create_topic(name, partitions=1, replication_factor=3)
        leader = admin.describe_topic(name).partitions[0].leader
    with Producer(bootstrap(cluster3), acks="all", linger_ms=1, retry_backoff_ms=100) as producer:
        futures = [producer.send(name, f"before-{i}") for i in range(100)]
        producer.flush(timeout=SLOW_MACHINE_S)
        cluster3.kill_broker(leader)
        futures += [producer.send(name, f"after-{i}") for i in range(100)]
        producer.flush(timeout=2 * SLOW_MACHINE_S)  # across a failover
    offsets = [f.result().offset for f in futures]
    assert offsets == sorted(offsets)  # order kept across the retries
    with Consumer(bootstrap(cluster3)) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        got = consume_all(consumer, 200)
    values = [r.value.decode() for r in got]
    # acks=all: nothing acknowledged is lost; a retried batch may appear twice (no idempotence).
    assert set(values) == {f"before-{i}" for i in range(100)} | {f"after-{i}" for i in range(100)}
    assert [v for v in dict.fromkeys(values)] == [f"before-{i}" for i in range(100)] + [
        f"after-{i}" for i in range(100)
    ]
