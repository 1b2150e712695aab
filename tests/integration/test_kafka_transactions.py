"""Idempotence and transactions over Kafka's wire protocol (broker/kafka/transactions.py) on a real 3-broker
cluster, spoken by confluent-kafka (librdkafka) installed unchanged, and by hand (kio frames) where a client does
not expose an API (DescribeProducers, DescribeTransactions, ListTransactions) or a rule needs a request a client
would never send.

What is shown: an idempotent producer loses and duplicates nothing through a partition leader's SIGKILL; a
transactional producer's commits are read once by read_committed consumers and its aborts never; a second
producer with the same transactional.id fences the first; a consume-transform-produce loop commits its offsets
with its outputs; the HTTP API and the Kafka door see one transaction state; a transactional batch for a
partition not added to the transaction is refused (KIP-890); the idempotence checks of the binary HTTP path
answer Kafka's produce too."""

from __future__ import annotations

import asyncio
import datetime
import io
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.kafka import codec
from odradek.protocol.records import encode_batch
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, partition_state, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

pytestmark = pytest.mark.cluster

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 0, 10, 22, 24, 26
NOT_COORDINATOR = 16
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
OUT_OF_ORDER, INVALID_EPOCH, INVALID_TXN_STATE, UNKNOWN_PRODUCER = 45, 47, 48, 59
MAX_UNACKED = 2000  # records sent and not yet acknowledged: so the kill lands mid-stream, with requests in flight
GROUPS_OVER_KAFKA = {10, 11, 14} <= set(codec.SUPPORTED)  # FindCoordinator, JoinGroup, SyncGroup


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module, each broker with a REST and a Kafka listener (tests use own topics)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-transactions"), "kafka-transactions", 3)
    yield backend
    backend.close()


def new_topic(c: LocalProcessBackend, partitions: int = 3, rf: int = 3) -> str:
    name = f"kt-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(1), name, partitions, rf, {"min.insync.replicas": "2"},
                 seen_by=[c.broker_url(b) for b in c.broker_ids()])
    return name


def live(c: LocalProcessBackend) -> list[int]:
    return [b for b in c.broker_ids() if c.broker_pid(b) is not None]


def state_of(c: LocalProcessBackend, topic: str, partition: int) -> dict[str, Any]:
    return partition_state(c.broker_url(live(c)[0]), topic, partition)


def read_all(bootstrap: str, topics: list[str], *, committed: bool) -> dict[tuple[str, int], list[Any]]:
    """Every message of every partition of ``topics`` up to its end (the last stable offset when ``committed``),
    with assign() from the beginning: (topic, partition) -> [(offset, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    try:
        md = consumer.list_topics(timeout=SLOW_MACHINE_S)
        tps = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in sorted(md.topics[t].partitions)]
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=SLOW_MACHINE_S)[1]
                for tp in tps}
        consumer.assign(tps)
        out: dict[tuple[str, int], list[Any]] = {k: [] for k in ends}
        positions = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 2 * SLOW_MACHINE_S
        while any(positions[k] < ends[k] for k in ends):
            assert time.monotonic() < deadline, f"read up to {positions} of {ends}"
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                key = (m.topic(), m.partition())
                out[key].append((m.offset(), m.value()))
                positions[key] = m.offset() + 1
            for tp in consumer.position([TopicPartition(t, p) for t, p in ends]):
                if tp.offset >= 0:  # past aborted batches and markers, which are never delivered
                    positions[(tp.topic, tp.partition)] = max(positions[(tp.topic, tp.partition)], tp.offset)
        return out
    finally:
        consumer.close()


def values(read: dict[tuple[str, int], list[Any]]) -> list[bytes]:
    return sorted(v for msgs in read.values() for _, v in msgs)


# ------------------------------------------------------------------------------------------ idempotence


def test_idempotent_producer_through_a_leader_sigkill_loses_and_duplicates_nothing(
        cluster: LocalProcessBackend) -> None:
    """20,000 records, acks=all, enable.idempotence=true, over an RF 3 topic; the leader of partition 0 is
    SIGKILLed mid-stream. librdkafka resends what it was not told about to the new leader, with the same producer
    id and sequences: the new leader (which built the producer's state as a follower) answers duplicates with their
    first offsets. Every acknowledged record is then read back exactly once, in the order it was sent, at the
    offset it was acknowledged with (where librdkafka was told one)."""
    topic = new_topic(cluster)
    total = 20_000
    delivered: dict[int, tuple[int, int | None]] = {}  # record -> (partition, offset)
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": int(3 * SLOW_MACHINE_S * 1000),
                         "retry.backoff.ms": 50})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered[int(msg.value())] = (msg.partition(), msg.offset())

    victim = int(state_of(cluster, topic, 0)["leader"])
    killed = False
    try:
        for i in range(total):
            if not killed and len(delivered) >= total // 4:
                cluster.kill_broker(victim)  # SIGKILL, by pid: its in-flight requests are never answered
                killed = True
            while i - len(delivered) - len(errors) >= MAX_UNACKED:  # keep sending while the stream flows
                producer.poll(0.05)
            producer.produce(topic, str(i).encode(), partition=i % 3, on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(3 * SLOW_MACHINE_S) == 0
        assert int(state_of(cluster, topic, 0)["leader"]) not in (victim, -1)  # partition 0 failed over
    finally:
        if killed:
            cluster.start_broker(victim)
    assert killed and not errors, errors[:3]
    assert len(delivered) == total
    wait_until(lambda: all(len(state_of(cluster, topic, p)["isr"]) == 3 for p in range(3)), 2 * SLOW_MACHINE_S,
               "the restarted broker back in every ISR")
    read = read_all(cluster.kafka_bootstrap, [topic], committed=False)
    seen = [int(v) for msgs in read.values() for _, v in msgs]
    assert len(seen) == len(set(seen)) == total  # none lost, none twice
    for (_, partition), msgs in read.items():
        records = [int(v) for _, v in msgs]
        assert records == sorted(records), f"partition {partition} out of order"
        # librdkafka acknowledges without an offset (None) a batch whose answer it lost but whose successor was
        # accepted (the broker checks sequences: the successor proves it written); every other is where it said.
        moved = [(int(v), delivered[int(v)], offset) for offset, v in msgs
                 if delivered[int(v)] not in ((partition, offset), (partition, None))]
        assert not moved, f"not at their acknowledged offsets (record, acknowledged, read): {moved[:5]}"


# ------------------------------------------------------------------------------------------ transactions


def transactional(c: LocalProcessBackend, tid: str, **config: Any) -> Producer:
    producer = Producer({"bootstrap.servers": c.kafka_bootstrap, "transactional.id": tid, "linger.ms": 5,
                         "transaction.timeout.ms": 60_000, **config})
    producer.init_transactions(SLOW_MACHINE_S)
    return producer


def test_commits_are_read_once_by_read_committed_and_aborts_never(cluster: LocalProcessBackend) -> None:
    """Six transactions across two topics, three committed and three aborted, alternating: a read_committed
    consumer gets exactly the committed records once; a read_uncommitted one gets all of them."""
    topics = [new_topic(cluster), new_topic(cluster)]
    producer = transactional(cluster, f"tx-{uuid.uuid4().hex[:8]}")
    committed: list[bytes] = []
    everything: list[bytes] = []
    for n in range(6):
        producer.begin_transaction()
        for i in range(50):
            value = f"{n}-{i}".encode()
            producer.produce(topics[i % 2], value, partition=i % 3)
            everything.append(value)
        if n % 2 == 0:
            producer.commit_transaction(SLOW_MACHINE_S)
            committed.extend(everything[-50:])
        else:
            producer.flush(SLOW_MACHINE_S)  # written, then aborted
            producer.abort_transaction(SLOW_MACHINE_S)
    assert values(read_all(cluster.kafka_bootstrap, topics, committed=True)) == sorted(committed)
    assert values(read_all(cluster.kafka_bootstrap, topics, committed=False)) == sorted(everything)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster: LocalProcessBackend) -> None:
    """The zombie's open transaction is aborted by the new instance's init_transactions, and the zombie's commit
    fails as fenced (fatal); the new instance commits, and only its records are read committed."""
    topic = new_topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = transactional(cluster, tid)
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce(topic, f"zombie-{i}".encode(), partition=i % 3)
    assert zombie.flush(SLOW_MACHINE_S) == 0
    successor = transactional(cluster, tid)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(SLOW_MACHINE_S)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH), fenced.value
    successor.begin_transaction()
    for i in range(10):
        successor.produce(topic, f"successor-{i}".encode(), partition=i % 3)
    successor.commit_transaction(SLOW_MACHINE_S)
    assert values(read_all(cluster.kafka_bootstrap, [topic], committed=True)) == sorted(
        f"successor-{i}".encode() for i in range(10))
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/transactions/{tid}")
    assert status == 200 and body["state"] == "CompleteCommit", body


@pytest.mark.skipif(not GROUPS_OVER_KAFKA, reason="consumer groups over the Kafka protocol (FindCoordinator, "
                    "JoinGroup, SyncGroup) are not served yet: send_offsets_to_transaction needs the group's "
                    "coordinator and the consumer's group metadata")
def test_consume_transform_produce_commits_offsets_with_the_outputs(cluster: LocalProcessBackend) -> None:
    """A read_committed group consumer and a transactional producer: per batch, the outputs and the consumer's
    next offsets in one transaction (send_offsets_to_transaction). Each input's output is read once, and the
    group's committed offsets are the input's end."""
    source, sink = new_topic(cluster), new_topic(cluster)
    inputs = [f"in-{i}".encode() for i in range(300)]
    feeder = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i, v in enumerate(inputs):
        feeder.produce(source, v, partition=i % 3)
    assert feeder.flush(SLOW_MACHINE_S) == 0
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = transactional(cluster, f"ctp-{uuid.uuid4().hex[:8]}")
    done = 0
    try:
        consumer.subscribe([source])
        deadline = time.monotonic() + 3 * SLOW_MACHINE_S
        while done < len(inputs):
            assert time.monotonic() < deadline, f"transformed {done} of {len(inputs)}"
            batch = [m for m in consumer.consume(num_messages=50, timeout=0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value().replace(b"in-", b"out-"), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), SLOW_MACHINE_S)
            producer.commit_transaction(SLOW_MACHINE_S)
            done += len(batch)
    finally:
        consumer.close()
    assert values(read_all(cluster.kafka_bootstrap, [sink], committed=True)) == sorted(
        v.replace(b"in-", b"out-") for v in inputs)
    status, body, _ = request("GET", f"{cluster.broker_url(2)}/groups/{group}/offsets")
    assert status == 200, body
    assert sorted((o["partition"], o["offset"]) for o in body["offsets"]) == [(p, 100) for p in range(3)]


# ------------------------------------------------------------------------------- by hand: kio over a socket


def kafka_call(c: LocalProcessBackend, broker_id: int, api_key: int, version: int, **fields: Any) -> Any:
    """One request to one broker's Kafka listener, as a client encodes it; the decoded response body."""
    request_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=7, client_id="by-hand"))
    entity_writer(request_cls)(out, codec.make(request_cls, **fields))
    payload = out.getvalue()
    host, _, port = c.kafka_address(broker_id).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=SLOW_MACHINE_S) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)

        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                assert chunk, "the broker closed the connection"
                data += chunk
            return data

        (size,) = struct.unpack(">i", exactly(4))
        frame = struct.pack(">i", size) + exactly(size)
    response_cls = load_response_schema(api_key, version)
    header, used = entity_reader(response_cls.__header_schema__)(frame, 4)
    assert header.correlation_id == 7
    body, _ = entity_reader(response_cls)(frame, 4 + used)
    return body


def produce_raw(c: LocalProcessBackend, topic: str, partition: int, batch: bytes, tid: str | None = None) -> Any:
    """Produce v9 (flexible, with a transactional id) to the partition's leader: (error code, base offset)."""
    leader = int(state_of(c, topic, partition)["leader"])
    cls = load_request_schema(PRODUCE, 9)
    data = codec.make(codec.nested(cls, "TopicProduceData"), name=topic, partition_data=(
        codec.make(codec.nested(cls, "PartitionProduceData"), index=partition, records=batch),))
    body = kafka_call(c, leader, PRODUCE, 9, transactional_id=tid, acks=-1, timeout=_ms(SLOW_MACHINE_S),
                      topic_data=(data,))
    [p] = body.responses[0].partition_responses
    return p.error_code, p.base_offset


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def txn_coordinator(c: LocalProcessBackend, tid: str) -> int:
    """The broker coordinating ``tid``, found as a Kafka client finds it (FindCoordinator claims an unclaimed id)."""
    body = kafka_call(c, live(c)[0], FIND_COORDINATOR, 3, key=tid, key_type=1)
    assert body.error_code == 0, body
    return int(body.node_id)


def init_pid(c: LocalProcessBackend, version: int = 4, tid: str | None = None, pid: int = -1,
             epoch: int = -1) -> tuple[int, int, int]:
    where = live(c)[0] if tid is None else txn_coordinator(c, tid)
    body = kafka_call(c, where, INIT_PRODUCER_ID, version, transactional_id=tid,
                      transaction_timeout=_ms(60), producer_id=pid, producer_epoch=epoch)
    return body.error_code, body.producer_id, body.producer_epoch


def batch(pid: int, epoch: int, seq: int, n: int = 2, *, txn: bool = False, tag: str = "") -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, f"{tag}{seq + i}".encode(), now, ()) for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def test_kafkas_produce_gets_the_binary_paths_idempotence_checks(cluster: LocalProcessBackend) -> None:
    """A duplicate is answered with its first offset; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is
    INVALID_PRODUCER_EPOCH; an unknown producer's non-zero sequence is UNKNOWN_PRODUCER_ID; KIP-360's bump of an
    idempotent producer (InitProducerId v3 naming its id and epoch) is a fresh producer id, as on Kafka."""
    topic = new_topic(cluster, partitions=1)
    error, pid, epoch = init_pid(cluster)
    assert (error, epoch) == (0, 0)
    first = produce_raw(cluster, topic, 0, batch(pid, 0, 0))
    assert first[0] == 0
    assert produce_raw(cluster, topic, 0, batch(pid, 0, 0)) == first  # the duplicate: the same offset
    assert produce_raw(cluster, topic, 0, batch(pid, 0, 5))[0] == OUT_OF_ORDER
    assert produce_raw(cluster, topic, 0, batch(pid, 1, 0))[0] == 0  # a new epoch starts at 0
    assert produce_raw(cluster, topic, 0, batch(pid, 0, 2))[0] == INVALID_EPOCH
    _, stranger, _ = init_pid(cluster)
    assert produce_raw(cluster, topic, 0, batch(stranger, 0, 3))[0] == UNKNOWN_PRODUCER
    error, bumped, bumped_epoch = init_pid(cluster, version=3, pid=pid, epoch=1)
    assert error == 0 and bumped not in (pid, stranger) and bumped_epoch == 0


def test_a_transactional_batch_needs_its_partition_in_the_transaction(cluster: LocalProcessBackend) -> None:
    """KIP-890's verification: the leader asks the coordinator's state before a transaction's first batch on a
    partition; without AddPartitionsToTxn it is INVALID_TXN_STATE and nothing is written, so no transaction is
    left open that no marker would end."""
    topic = new_topic(cluster, partitions=1)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    error, pid, epoch = init_pid(cluster, tid=tid)
    assert error == 0
    assert produce_raw(cluster, topic, 0, batch(pid, epoch, 0, txn=True), tid)[0] == INVALID_TXN_STATE
    assert produce_raw(cluster, topic, 0, batch(pid, epoch, 0, txn=True), None)[0] == 53  # no transactional id
    cls = load_request_schema(ADD_PARTITIONS, 3)
    coordinator = txn_coordinator(cluster, tid)
    for broker in [b for b in live(cluster) if b != coordinator] + [coordinator]:  # NOT_COORDINATOR elsewhere
        added = kafka_call(cluster, broker, ADD_PARTITIONS, 3, v3_and_below_transactional_id=tid,
                           v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                           v3_and_below_topics=(codec.make(codec.nested(cls, "AddPartitionsToTxnTopic"), name=topic,
                                                           partitions=(0,)),))
        code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        assert code == (0 if broker == coordinator else NOT_COORDINATOR), (broker, coordinator, code)
    error, offset = produce_raw(cluster, topic, 0, batch(pid, epoch, 0, txn=True), tid)
    assert (error, offset) == (0, 0)  # the refused batches left no trace
    assert kafka_call(cluster, coordinator, END_TXN, 3, transactional_id=tid, producer_id=pid,
                      producer_epoch=epoch, committed=True).error_code == 0
    # after the commit, a late batch of that transaction cannot open a new one
    assert produce_raw(cluster, topic, 0, batch(pid, epoch, 2, txn=True), tid)[0] == INVALID_TXN_STATE
    for isolation in ("read_uncommitted", "read_committed"):  # two records and the marker; nothing left open
        status, body, _ = request("GET", f"{cluster.broker_url(1)}/topics/{topic}/partitions/0/offsets"
                                         f"?isolation={isolation}")
        assert status == 200 and body["end_offset"] == 3, body


def test_http_and_kafka_see_one_transaction_state(cluster: LocalProcessBackend) -> None:
    """A transaction begun by a Kafka client is Ongoing with its partitions to GET /transactions/{id}, to
    DescribeTransactions and ListTransactions on any broker, and its producer is open on the leader
    (DescribeProducers); its commit shows on both doors. One begun over HTTP is described over Kafka."""
    topic = new_topic(cluster)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    producer = transactional(cluster, tid)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, b"open", partition=p)
    assert producer.flush(SLOW_MACHINE_S) == 0
    status, http, _ = request("GET", f"{cluster.broker_url(2)}/transactions/{tid}")
    assert status == 200 and http["state"] == "Ongoing", http
    assert sorted(map(tuple, http["partitions"])) == [(topic, 0), (topic, 1)]
    for b in cluster.broker_ids():
        [described] = kafka_call(cluster, b, DESCRIBE_TRANSACTIONS, 0, transactional_ids=(tid,)).transaction_states
        assert (described.error_code, described.transaction_state, described.producer_id,
                described.producer_epoch) == (0, "Ongoing", http["producer_id"], http["producer_epoch"])
        assert [(t.topic, sorted(t.partitions)) for t in described.topics] == [(topic, [0, 1])]
    listed = [t for b in cluster.broker_ids()
              for t in kafka_call(cluster, b, LIST_TRANSACTIONS, 1, state_filters=("Ongoing",),
                                  producer_id_filters=(), duration_filter=-1).transaction_states
              if t.transactional_id == tid]
    assert [(t.producer_id, t.transaction_state) for t in listed] == [(http["producer_id"], "Ongoing")]  # once
    leader = int(state_of(cluster, topic, 0)["leader"])
    cls = load_request_schema(DESCRIBE_PRODUCERS, 0)
    producers = kafka_call(cluster, leader, DESCRIBE_PRODUCERS, 0, topics=(
        codec.make(codec.nested(cls, "TopicRequest"), name=topic, partition_indexes=(0,)),))
    [p0] = producers.topics[0].partitions
    [active] = [a for a in p0.active_producers if a.producer_id == http["producer_id"]]
    assert p0.error_code == 0 and active.current_txn_start_offset == 0
    producer.commit_transaction(SLOW_MACHINE_S)
    status, http, _ = request("GET", f"{cluster.broker_url(3)}/transactions/{tid}")
    assert http["state"] == "CompleteCommit"
    [described] = kafka_call(cluster, 1, DESCRIBE_TRANSACTIONS, 0, transactional_ids=(tid,)).transaction_states
    assert described.transaction_state == "CompleteCommit"
    # the other way round: begun over HTTP, described over Kafka
    other = f"tx-{uuid.uuid4().hex[:8]}"
    status, ids, _ = request("POST", f"{cluster.broker_url(1)}/transactions/{other}/init", {})
    assert status == 200, ids
    status, body, _ = request("POST", f"{cluster.broker_url(1)}/transactions/{other}/partitions",
                              {**ids, "partitions": [[topic, 2]]})
    assert status == 200, body
    [described] = kafka_call(cluster, 2, DESCRIBE_TRANSACTIONS, 0, transactional_ids=(other,)).transaction_states
    assert (described.transaction_state, [(t.topic, t.partitions) for t in described.topics]) == (
        "Ongoing", [(topic, (2,))])
    status, body, _ = request("POST", f"{cluster.broker_url(1)}/transactions/{other}/end", {**ids, "commit": False})
    assert status == 200 and body["state"] == "CompleteAbort", body


# ------------------------------------------------------------------------------------- the Python clients


def test_kafka_python_transactions_and_idempotence(cluster: LocalProcessBackend) -> None:
    """kafka-python 3's transactional producer (its own version choices: InitProducerId with KIP-360's fields,
    AddPartitionsToTxn, EndTxn) commits once and aborts once; its idempotent producer writes each record once."""
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    topic = new_topic(cluster)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, transactional_id=f"kp-{topic}")
    try:
        producer.init_transactions()
        for outcome in ("committed", "aborted"):
            producer.begin_transaction()
            for i in range(30):
                producer.send(topic, f"kp-{outcome}-{i}".encode(), partition=i % 3)
            producer.flush(timeout=SLOW_MACHINE_S)  # written, so the abort has something to hide
            (producer.commit_transaction if outcome == "committed" else producer.abort_transaction)()
    finally:
        producer.close(timeout=SLOW_MACHINE_S)
    idempotent = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(30):
            idempotent.send(topic, f"kp-idempotent-{i}".encode(), partition=i % 3)
        idempotent.flush(timeout=SLOW_MACHINE_S)
    finally:
        idempotent.close(timeout=SLOW_MACHINE_S)
    expected = [f"kp-{k}-{i}".encode() for k in ("committed", "idempotent") for i in range(30)]
    assert values(read_all(cluster.kafka_bootstrap, [topic], committed=True)) == sorted(expected)
    assert len(values(read_all(cluster.kafka_bootstrap, [topic], committed=False))) == 90


def test_aiokafka_transactions(cluster: LocalProcessBackend) -> None:
    """aiokafka 0.14's transactional producer (the lowest versions of every transaction API) commits once and
    aborts once."""
    aiokafka = pytest.importorskip("aiokafka", reason="pip install aiokafka (the test extra)")
    topic = new_topic(cluster)

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap,
                                             transactional_id=f"aio-{topic}", request_timeout_ms=30_000)
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(20):
                    await producer.send(topic, f"aio-committed-{i}".encode(), partition=i % 3)
            await producer.begin_transaction()
            for i in range(20):
                await producer.send(topic, f"aio-aborted-{i}".encode(), partition=i % 3)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 2 * SLOW_MACHINE_S))
    assert values(read_all(cluster.kafka_bootstrap, [topic], committed=True)) == sorted(
        f"aio-committed-{i}".encode() for i in range(20))
    assert len(values(read_all(cluster.kafka_bootstrap, [topic], committed=False))) == 40
