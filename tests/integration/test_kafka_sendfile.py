"""Fetch answers sent with sendfile (broker/kafka/frames.py) on a real broker, read by real clients installed
unchanged: confluent-kafka, kafka-python, aiokafka and kcat each read about 3 MB of distinct records (three
partitions of about 1 MB, so every answer carries file ranges, not the small reads that stay bytes) exactly as
produced, while the broker's ``odradek_kafka_response_bytes_total{how="sendfile"}`` grows: the sendfile path was
taken. A raw client then sends many large fetches and drops connections mid-answer, and the broker process holds
no more descriptors afterwards than before (``/proc/<pid>/fd``): every duplicated segment descriptor is closed.

The TLS side (answers over SSL still correct, and not sent with sendfile) is in test_kafka_security.py, which has
the TLS cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from broker.kafka import codec
from broker.kafka.codec import FETCH, make, nested
from odradek.protocol.records import decode_records
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.cluster

PARTITIONS = 3
PER_PARTITION = 1000
VALUE_CHARS = 1000  # printable (hex), so kcat's output can be split by lines
_SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>[0-9.e+-]+)$')

Produced = dict[int, list[tuple[int, bytes]]]


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One broker: its counters and its descriptors are the whole story."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-sendfile"), "kafka-sendfile", 1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def topic(cluster: LocalProcessBackend) -> tuple[str, Produced]:
    """A topic of three partitions of about 1 MB of distinct records each, produced by confluent-kafka."""
    name = f"sf-{uuid.uuid4().hex[:8]}"
    url = cluster.broker_url(cluster.broker_ids()[0])
    create_topic(url, name, PARTITIONS, 1, seen_by=[url])
    rnd = random.Random(7)
    acked: Produced = {}
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "linger.ms": 20})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    for i in range(PARTITIONS * PER_PARTITION):
        value = rnd.randbytes(VALUE_CHARS // 2).hex().encode()
        while True:
            try:
                producer.produce(name, value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(SLOW_MACHINE_S) == 0
    assert not errors, errors[:3]
    return name, {p: sorted(got) for p, got in acked.items()}


def sendfile_bytes(c: LocalProcessBackend, how: str = "sendfile") -> float:
    """The broker's Kafka response bytes sent ``how`` (write or sendfile), from its /metrics."""
    total = 0.0
    for b in c.broker_ids():
        status, body, _ = request("GET", f"{c.broker_url(b)}/metrics", accept="text/plain")
        assert status == 200, body
        for line in body.decode().splitlines():
            m = _SAMPLE.match(line)
            if m is not None and m["name"] == "odradek_kafka_response_bytes_total" and \
                    f'how="{how}"' in (m["labels"] or ""):
                total += float(m["value"])
    return total


def by_partition(records: list[tuple[int, int, bytes]]) -> Produced:
    out: Produced = {}
    for partition, offset, value in records:
        out.setdefault(partition, []).append((offset, value))
    return {p: sorted(got) for p, got in out.items()}


def total(produced: Produced) -> int:
    return sum(len(v) for v in produced.values())


def assert_read_with_sendfile(cluster: LocalProcessBackend, before: float, produced: Produced,
                              got: list[tuple[int, int, bytes]]) -> None:
    assert by_partition(got) == produced  # every record once, in order, byte for byte
    sent = sendfile_bytes(cluster) - before
    assert sent >= PARTITIONS * PER_PARTITION * VALUE_CHARS * 0.9, f"only {sent} bytes went out with sendfile"


# -------------------------------------------------------------------------------------------------- clients

def test_librdkafka_reads_answers_sent_with_sendfile(cluster: LocalProcessBackend,
                                                      topic: tuple[str, Produced]) -> None:
    name, produced = topic
    before = sendfile_bytes(cluster)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < total(produced):
            assert time.monotonic() < deadline, f"consumed {len(got)} of {total(produced)}"
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.value()))
    finally:
        consumer.close()
    assert_read_with_sendfile(cluster, before, produced, got)


def test_kafka_python_reads_answers_sent_with_sendfile(cluster: LocalProcessBackend,
                                                        topic: tuple[str, Produced]) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    name, produced = topic
    before = sendfile_bytes(cluster)
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    got: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([KafkaTopicPartition(name, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < total(produced):
            assert time.monotonic() < deadline, f"consumed {len(got)} of {total(produced)}"
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got.extend((tp.partition, m.offset, m.value) for m in messages)
    finally:
        consumer.close()
    assert_read_with_sendfile(cluster, before, produced, got)


def test_aiokafka_reads_answers_sent_with_sendfile(cluster: LocalProcessBackend,
                                                    topic: tuple[str, Produced]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    name, produced = topic
    before = sendfile_bytes(cluster)

    async def consume() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(name, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            got: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + SLOW_MACHINE_S
            while len(got) < total(produced):
                assert time.monotonic() < deadline, f"consumed {len(got)} of {total(produced)}"
                for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                    got.extend((tp.partition, m.offset, m.value) for m in messages)
            return got
        finally:
            await consumer.stop()

    assert_read_with_sendfile(cluster, before, produced, asyncio.run(consume()))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="apt-get install kcat (scripts/setup.sh)")
def test_kcat_reads_answers_sent_with_sendfile(cluster: LocalProcessBackend, topic: tuple[str, Produced]) -> None:
    name, produced = topic
    before = sendfile_bytes(cluster)
    got: list[tuple[int, int, bytes]] = []
    for p in range(PARTITIONS):
        read = subprocess.run(["kcat", "-b", cluster.kafka_bootstrap, "-C", "-t", name, "-p", str(p),
                               "-o", "beginning", "-e", "-f", "%p %o %s\n"],
                              capture_output=True, timeout=SLOW_MACHINE_S, check=True)
        for line in read.stdout.splitlines():
            partition, offset, value = line.split(b" ")
            got.append((int(partition), int(offset), value))
    assert_read_with_sendfile(cluster, before, produced, got)


# ---------------------------------------------------------------------------------------------- descriptors

def fetch_request(name: str, correlation_id: int, partition_max_bytes: int = 1 << 20) -> bytes:
    """A consumer's Fetch v12 of every partition from offset 0 (a whole frame, size prefix included)."""
    cls = codec.request_class(FETCH, 12)
    parts = tuple(make(nested(cls, "FetchPartition"), partition=p, current_leader_epoch=-1, fetch_offset=0,
                       last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                  for p in range(PARTITIONS))
    body = make(cls, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=50 << 20,
                isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(make(nested(cls, "FetchTopic"), topic=name, partitions=parts),))
    return codec.encode_request(FETCH, 12, correlation_id, "sendfile-test", body)


def read_answer(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(1 << 20, n - len(buf)))
            assert chunk, "the broker closed the connection"
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def broker_fds(cluster: LocalProcessBackend) -> int:
    pid = cluster.broker_pid(cluster.broker_ids()[0])
    assert pid is not None
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_the_broker_closes_every_segment_descriptor_after_fetches_and_dropped_connections(
        cluster: LocalProcessBackend, topic: tuple[str, Produced]) -> None:
    name, produced = topic
    host, port = cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    address = (host, int(port))
    before_sent = sendfile_bytes(cluster)
    with socket.create_connection(address, timeout=SLOW_MACHINE_S) as sock:
        sock.sendall(fetch_request(name, 1))
        first = codec.decode_response(FETCH, 12, read_answer(sock))  # warm: sessions, caches, the metadata
        records = {p.partition_index: [(r.offset, r.value) for r in decode_records(p.records)]
                   for t in first.responses for p in t.partitions}
        assert records == {p: got for p, got in produced.items()}  # 1 MB per partition: all of it
    baseline = broker_fds(cluster)
    rounds = 60
    with socket.create_connection(address, timeout=SLOW_MACHINE_S) as sock:
        for i in range(rounds):  # pipelined two at a time, each answer read whole
            sock.sendall(fetch_request(name, 2 * i) + fetch_request(name, 2 * i + 1))
            for _ in range(2):
                answer = read_answer(sock)
                assert codec.response_correlation_id(answer) in (2 * i, 2 * i + 1)
    for read_first in (0, 0, 0, 0, 0, 100_000, 100_000, 1_500_000, 1_500_000, 2_500_000):
        sock = socket.create_connection(address, timeout=SLOW_MACHINE_S)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        sock.sendall(fetch_request(name, 1) * 4)
        got = 0
        while got < read_first:
            got += len(sock.recv(min(1 << 16, read_first - got)))
        sock.close()  # gone before, during or between answers: the broker's sends fail
    # Sendfile was taken (three 1 MB ranges an answer), and nothing stays open once the connections are gone.
    assert sendfile_bytes(cluster) - before_sent >= 2 * rounds * 3 * PER_PARTITION * VALUE_CHARS * 0.9
    wait_until(lambda: broker_fds(cluster) <= baseline + 5, SLOW_MACHINE_S,
               "the broker's descriptors back to where they were", interval=0.2)
