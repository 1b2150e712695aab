"""Kafka's wire protocol on a real 3-broker cluster, spoken by real Kafka clients installed unchanged:
confluent-kafka (librdkafka) and kcat. What HTTP writes, Kafka clients read, and the other way round."""

from __future__ import annotations

import base64
import datetime
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.produce.v10.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v10.response import ProduceResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer

from odradek.protocol.records import encode_batch
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata, request
from tests.harness.wait import SLOW_MACHINE_S

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.cluster

BINARY_V2 = "application/vnd.kafka.binary.v2+json"


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module, each broker with a REST and a Kafka listener (tests use own topics)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-protocol"), "kafka-protocol", 3)
    yield backend
    backend.close()


def new_topic(c: LocalProcessBackend, partitions: int = 1, rf: int = 1) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(1), name, partitions, rf, seen_by=[c.broker_url(b) for b in c.broker_ids()])
    return name


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, **config: Any) -> list[Any]:
    """``count`` messages from the start of ``partitions``, with manual assign() (no group membership)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, **config})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(out) < count:
            assert time.monotonic() < deadline, f"consumed {len(out)} of {count}"
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
        return out
    finally:
        consumer.close()


def produce(bootstrap: str, topic: str, messages: list[dict[str, Any]], **config: Any) -> list[Any]:
    """Produce and flush; the delivery reports (errors fail the test)."""
    reports: list[Any] = []
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, **config})

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err is not None else reports).append(err or msg)

    for m in messages:
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **m)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(SLOW_MACHINE_S) == 0
    assert not errors, errors[:3]
    return reports


# --------------------------------------------------------------------------------------- ApiVersions, Metadata


def test_admin_client_lists_brokers_with_their_kafka_addresses_partitions_and_leaders(
        cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=3, rf=3)
    for b in cluster.broker_ids():  # every broker names every other's Kafka address
        md = AdminClient({"bootstrap.servers": cluster.kafka_address(b)}).list_topics(timeout=SLOW_MACHINE_S)
        assert {i: f"{x.host}:{x.port}" for i, x in md.brokers.items()} == {
            i: cluster.kafka_address(i) for i in cluster.broker_ids()}
        status, health, _ = request("GET", f"{cluster.broker_url(b)}/health")
        assert status == 200, health
        assert md.cluster_id == health["cluster_id"] and md.controller_id == health["controller_id"]
        meta = md.topics[topic]
        assert meta.error is None
        http = metadata(cluster.broker_url(b), topic)["partitions"]
        assert {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in meta.partitions.values()} == {
            p["partition"]: (p["leader"], p["replicas"], sorted(p["isr"])) for p in http}


def test_unknown_topic_is_unknown_topic_or_part_to_the_client(cluster: LocalProcessBackend) -> None:
    md = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics(topic="no-such-topic",
                                                                                   timeout=SLOW_MACHINE_S)
    assert md.topics["no-such-topic"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "topic.metadata.propagation.max.ms": 1000,
                         "message.timeout.ms": 10000})
    producer.produce("no-such-topic", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(SLOW_MACHINE_S)
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART]


# ----------------------------------------------------------------------------------------- produce and fetch


def test_producer_acks_all_and_consumer_with_assign_round_trip_ten_thousand_records(
        cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=3, rf=3)
    n = 10_000
    reports = produce(cluster.kafka_bootstrap, topic, [
        {"key": f"key-{i % 97}".encode(), "value": f"value-{i}".encode()} for i in range(n)], acks="all")
    assert len(reports) == n
    produced: dict[int, list[tuple[int, bytes]]] = {}
    for r in reports:
        produced.setdefault(r.partition(), []).append((r.offset(), r.value()))
    assert sorted(produced) == [0, 1, 2]
    messages = consume(cluster.kafka_bootstrap, topic, [0, 1, 2], n)
    assert len(messages) == n
    consumed: dict[int, list[tuple[int, bytes]]] = {}
    for m in messages:
        consumed.setdefault(m.partition(), []).append((m.offset(), m.value()))
    for p, got in consumed.items():
        assert [o for o, _ in got] == list(range(len(got))), f"partition {p}: offsets not contiguous in order"
        assert got == sorted(produced[p]), f"partition {p}: not what was acknowledged, in order"
    # a key always lands on one partition, and per partition the producer's order is kept
    for got in consumed.values():
        seq = [int(v.split(b"-")[1]) for _, v in got]
        assert seq == sorted(seq)


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_zero_and_one(cluster: LocalProcessBackend, acks: str) -> None:
    topic = new_topic(cluster, partitions=1, rf=3)
    produce(cluster.kafka_bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(50)], acks=acks)
    assert [m.value() for m in consume(cluster.kafka_bootstrap, topic, [0], 50)] == [
        f"v{i}".encode() for i in range(50)]


def test_compressed_batches_round_trip(cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=1)
    for codec in ("gzip", "lz4", "zstd"):
        produce(cluster.kafka_bootstrap, topic, [{"value": f"{codec}-{i}".encode() * 20} for i in range(200)],
                **{"compression.type": codec, "linger.ms": 20})
    values = [m.value() for m in consume(cluster.kafka_bootstrap, topic, [0], 600)]
    assert values == [f"{c}-{i}".encode() * 20 for c in ("gzip", "lz4", "zstd") for i in range(200)]


def test_records_produced_over_http_are_read_by_confluent_kafka(cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3)
    ts = int(time.time() * 1000) - 5_000
    records = [{"key": base64.b64encode(f"k{i}".encode()).decode(),
                "value": base64.b64encode(bytes([i, 0, 255]) + b"payload").decode(),
                "timestamp": ts + i,
                "headers": [{"name": "trace", "value": base64.b64encode(f"t{i}".encode()).decode()},
                            {"name": "empty", "value": None}]} for i in range(20)]
    status, body, _ = request("POST", f"{cluster.broker_url(2)}/topics/{topic}/partitions/0?acks=all",
                              {"records": records}, content_type=BINARY_V2)
    assert status == 200, body
    messages = consume(cluster.kafka_bootstrap, topic, [0], 20)
    assert [(m.offset(), m.key(), m.value(), m.timestamp(), m.headers()) for m in messages] == [
        (i, f"k{i}".encode(), bytes([i, 0, 255]) + b"payload", (TIMESTAMP_CREATE_TIME, ts + i),
         [("trace", f"t{i}".encode()), ("empty", None)]) for i in range(20)]


def test_records_produced_by_confluent_kafka_are_read_over_http(cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3)
    ts = int(time.time() * 1000) - 7_000
    produce(cluster.kafka_bootstrap, topic, [
        {"key": f"k{i}".encode(), "value": bytes([i]) + b"\x00binary", "timestamp": ts + i,
         "headers": [("h1", f"x{i}".encode()), ("h2", b"")]} for i in range(20)], acks="all")
    status, body, _ = request("GET", f"{cluster.broker_url(3)}/topics/{topic}/partitions/0/records?offset=0",
                              accept=BINARY_V2)
    assert status == 200, body
    assert [(r["offset"], r["key"], r["value"], r["timestamp"], r["headers"]) for r in body["records"]] == [
        (i, base64.b64encode(f"k{i}".encode()).decode(), base64.b64encode(bytes([i]) + b"\x00binary").decode(),
         ts + i, [{"name": "h1", "value": base64.b64encode(f"x{i}".encode()).decode()},
                  {"name": "h2", "value": ""}]) for i in range(20)]


def test_list_offsets_watermarks_and_by_timestamp(cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, rf=3)
    base = int(time.time() * 1000) - 60_000
    produce(cluster.kafka_bootstrap, topic, [{"value": b"v%d" % i, "timestamp": base + 1000 * i} for i in range(10)])
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "lo", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=SLOW_MACHINE_S) == (0, 10)
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 3500)], timeout=SLOW_MACHINE_S)
        assert found.offset == 4  # the first record at or after that time
        [none] = consumer.offsets_for_times([TopicPartition(topic, 0, base + 999_999)], timeout=SLOW_MACHINE_S)
        assert none.offset == -1  # none that late: Kafka's "no offset" (librdkafka: OFFSET_END)
    finally:
        consumer.close()


def test_read_committed_skips_an_aborted_transaction(cluster: LocalProcessBackend) -> None:
    """A transaction aborted over HTTP (the Python client's transactional producer) is invisible to a librdkafka
    consumer reading committed, and visible to one reading uncommitted; markers are never delivered."""
    from odradek import Producer as HttpProducer

    topic = new_topic(cluster, partitions=1, rf=3)
    p = HttpProducer(cluster.broker_url(1), transactional_id=f"tx-{topic}", linger_ms=1)
    try:
        p.init_transactions()
        for outcome, n in (("aborted", 5), ("committed", 3)):
            p.begin_transaction()
            for i in range(n):
                p.send(topic, f"{outcome}-{i}".encode(), partition=0)
            p.flush()
            (p.abort_transaction if outcome == "aborted" else p.commit_transaction)()
    finally:
        p.close()
    committed = consume(cluster.kafka_bootstrap, topic, [0], 3, **{"isolation.level": "read_committed"})
    assert [m.value() for m in committed] == [f"committed-{i}".encode() for i in range(3)]
    everything = consume(cluster.kafka_bootstrap, topic, [0], 8, **{"isolation.level": "read_uncommitted"})
    assert [m.value() for m in everything] == [f"aborted-{i}".encode() for i in range(5)] + [
        f"committed-{i}".encode() for i in range(3)]


# ------------------------------------------------------------------------------------------------------ kcat


@pytest.mark.skipif(shutil.which("kcat") is None, reason="apt-get install kcat (scripts/setup.sh)")
def test_kcat_lists_metadata_and_round_trips_records(cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=2, rf=2)
    listing = subprocess.run(["kcat", "-b", cluster.kafka_address(1), "-L", "-J", "-t", topic],
                             capture_output=True, text=True, timeout=SLOW_MACHINE_S, check=True)
    md = json.loads(listing.stdout)
    assert sorted((b["id"], b["name"]) for b in md["brokers"]) == [
        (b, cluster.kafka_address(b)) for b in cluster.broker_ids()]
    [t] = md["topics"]
    assert t["topic"] == topic and sorted(p["partition"] for p in t["partitions"]) == [0, 1]
    lines = "".join(f"key{i}:value {i}\n" for i in range(10))
    subprocess.run(["kcat", "-b", cluster.kafka_bootstrap, "-P", "-t", topic, "-p", "1", "-K:", "-H", "who=kcat"],
                   input=lines, text=True, timeout=SLOW_MACHINE_S, check=True)
    read = subprocess.run(["kcat", "-b", cluster.kafka_address(2), "-C", "-t", topic, "-p", "1", "-o", "beginning",
                           "-e", "-J"], capture_output=True, text=True, timeout=SLOW_MACHINE_S, check=True)
    got = [json.loads(line) for line in read.stdout.splitlines() if line.strip()]
    assert [(m["offset"], m["key"], m["payload"], m["headers"]) for m in got] == [
        (i, f"key{i}", f"value {i}", ["who", "kcat"]) for i in range(10)]
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/topics/{topic}/partitions/1/records?offset=0",
                              accept=BINARY_V2)
    assert status == 200 and [base64.b64decode(r["value"]) for r in body["records"]] == [
        f"value {i}".encode() for i in range(10)]


# ---------------------------------------------------------------------------------------- the wire, by hand


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _read_frame(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _kafka_port(c: LocalProcessBackend, broker_id: int) -> int:
    return int(c.kafka_address(broker_id).rpartition(":")[2])


def test_api_versions_at_an_unknown_version_gets_kafkas_v0_fallback(cluster: LocalProcessBackend) -> None:
    """KIP-511: the broker cannot parse a newer ApiVersions request, so it answers v0 with UNSUPPORTED_VERSION
    and its versions, and the client retries with one it finds there."""
    header = struct.pack(">hhih", 18, 127, 4242, 4) + b"test" + b"\x00" + b"a future body"
    with socket.create_connection(("127.0.0.1", _kafka_port(cluster, 1)), timeout=10) as s:
        s.sendall(_frame(header))
        answer = _read_frame(s)
        correlation, error, count = struct.unpack_from(">ihi", answer)
        versions = {key: (low, high) for key, low, high in
                    (struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count))}
        assert (correlation, error) == (4242, 35)  # UNSUPPORTED_VERSION
        assert versions[18] == (0, 4) and versions[3][1] >= 9 and versions[0][0] == 3 and versions[1][0] == 4
        assert len(answer) == 10 + 6 * count  # v0: no throttle time, no tagged fields
        # the connection stays usable: a v0 request is answered
        s.sendall(_frame(struct.pack(">hhih", 18, 0, 4243, 4) + b"test"))
        correlation, error, _ = struct.unpack_from(">ihi", _read_frame(s))
        assert (correlation, error) == (4243, 0)


def test_a_request_over_socket_request_max_bytes_closes_the_connection(cluster: LocalProcessBackend) -> None:
    with socket.create_connection(("127.0.0.1", _kafka_port(cluster, 2)), timeout=10) as s:
        s.sendall(struct.pack(">i", 104_857_600 + 1))  # socket.request.max.bytes + 1: no byte of it follows
        assert s.recv(1) == b""  # closed by the broker
    with socket.create_connection(("127.0.0.1", _kafka_port(cluster, 2)), timeout=10) as s:  # others are served
        s.sendall(_frame(struct.pack(">hhih", 18, 0, 1, 1) + b"t"))
        assert struct.unpack_from(">ih", _read_frame(s)) == (1, 0)


def test_produce_to_a_follower_is_not_leader_or_follower_naming_the_leader(cluster: LocalProcessBackend) -> None:
    """Produce v10+ carries the current leader (KIP-951): a client can go there without a metadata round trip."""
    topic = new_topic(cluster, partitions=1, rf=3)
    state = metadata(cluster.broker_url(1), topic)["partitions"][0]
    follower = next(b for b in cluster.broker_ids() if b != state["leader"])
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=0, request_api_version=10, correlation_id=9,
                                                    client_id="t"))
    batch = encode_batch([(None, b"x", int(time.time() * 1000), [])])
    entity_writer(ProduceRequest)(out, ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(TopicProduceData(
            name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)),)))
    with socket.create_connection(("127.0.0.1", _kafka_port(cluster, follower)), timeout=10) as s:
        s.sendall(_frame(out.getvalue()))
        answer = _read_frame(s)
    header, pos = entity_reader(ResponseHeader)(answer, 0)
    response, _ = entity_reader(ProduceResponse)(answer, pos)
    assert header.correlation_id == 9
    [part] = response.responses[0].partition_responses
    assert part.error_code == 6  # NOT_LEADER_OR_FOLLOWER
    current = part.current_leader
    assert (current.leader_id, current.leader_epoch) == (state["leader"], state["leader_epoch"])
    assert [(n.node_id, f"{n.host}:{n.port}") for n in response.node_endpoints] == [
        (state["leader"], cluster.kafka_address(state["leader"]))]


# ------------------------------------------------------------------------------------------- odradek cluster


def test_cluster_status_json_names_kafka_addresses_and_bootstrap(cluster: LocalProcessBackend) -> None:
    status = subprocess.run([sys.executable, "-m", "odradek_tools", "cluster", "status", "--json", "--data-dir",
                             str(cluster.cluster.data_dir)], capture_output=True, text=True, timeout=SLOW_MACHINE_S,
                            env={**os.environ}, check=True)
    body = json.loads(status.stdout)
    assert [b["kafka"] for b in body["brokers"]] == [cluster.kafka_address(b) for b in cluster.broker_ids()]
    assert body["kafka_bootstrap"] == ",".join(cluster.kafka_address(b) for b in cluster.broker_ids())


# ------------------------------------------------------------------------------------------------- lifecycle


def test_broker_shutdown_closes_its_kafka_connections(make_cluster: Any) -> None:
    """SIGTERM: the broker closes every Kafka connection (the client sees end of stream), then exits cleanly."""
    c = make_cluster(brokers=1)
    with socket.create_connection(("127.0.0.1", _kafka_port(c, 1)), timeout=SLOW_MACHINE_S) as s:
        s.sendall(_frame(struct.pack(">hhih", 18, 0, 1, 1) + b"t"))
        assert struct.unpack_from(">ih", _read_frame(s)) == (1, 0)
        c.stop_broker(1)
        assert s.recv(1) == b""
    log = c.cluster.slots[1].log_path.read_text(errors="replace")
    assert "broker 1 stopped" in log and "Kafka connections did not close" not in log
