"""Consumer groups over Kafka's wire protocol on a real 3-broker cluster, with Kafka's own clients installed
unchanged: confluent-kafka (librdkafka) consumers in groups with the cooperative-sticky and the eager range
assignors, kafka-python's KafkaConsumer, aiokafka's AIOKafkaConsumer, confluent-kafka's AdminClient; what they
commit is read back over HTTP (/groups/...) and by odradek-consumer-groups.sh."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, request, stable_group
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import (  # noqa: E402
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the shortest session a member may ask for
HEARTBEAT_MS = 500
# The join-and-leave members' session: librdkafka's default. They leave with LeaveGroup (close), so a long session
# costs no time, and a loaded machine cannot expire a live member (a lost member may rightly see its records again).
MEMBER_SESSION_MS = 45_000
# A killed member is expelled by its session, not at once (on its closed connection): its reassignment comes no
# sooner than this after the kill. Half the session, not the session less one heartbeat interval: a member starved
# of CPU before the kill sent its last heartbeat earlier, so its session runs out sooner after the kill.
NOT_AT_ONCE_S = SESSION_MS / 1000 / 2


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module, each broker with a REST and a Kafka listener (tests use own topics
    and groups)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-groups"), "kafka-groups", 3)
    yield backend
    backend.close()


def new_topic(c: LocalProcessBackend, partitions: int) -> str:
    name = f"kg-{uuid.uuid4().hex[:8]}"
    create_topic(c.broker_url(1), name, partitions, 1, seen_by=[c.broker_url(b) for b in c.broker_ids()])
    return name


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Records keyed by their index, so they spread over the partitions by the keys' hashes. Keyless ones would
    not: librdkafka's partitioner sticks to one partition for each linger window (KIP-480), so a small burst can
    all land in one, and a consumer that read them all could still be resolving the other partition's position
    when it commits (aiokafka then commits only the first, and ``committed`` answers None for the other)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[Any] = []
    for i, v in enumerate(values):
        producer.produce(topic, v, key=b"k%d" % i,
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(SLOW_MACHINE_S) == 0
    assert not errors, errors[:3]


def end_offsets(url: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, from its leader, asking again on the retriable answers a leadership change
    gives: NOT_LEADER_OR_FOLLOWER while the partition's leader is a broker just killed and no other is elected yet
    (a producer whose records all went to another partition can be done before that), and OFFSET_NOT_AVAILABLE
    from a leader just elected until its followers have fetched from it (rather than the lower watermark it kept
    as a follower)."""
    out = {}
    deadline = time.monotonic() + SLOW_MACHINE_S
    for p in range(partitions):
        while True:
            status, body, _ = request("GET", f"{url}/topics/{topic}/partitions/{p}/offsets")
            retriable = isinstance(body, dict) and body.get("error") in (
                "OFFSET_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE")
            if status == 200 or not retriable or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200, body
        out[p] = int(body["end_offset"])
    return out


class Member(threading.Thread):
    """A confluent-kafka consumer in a group, on a thread: it records every record it is handed (by this member)
    and commits synchronously after each batch and for the partitions it gives up, so that a partition changes
    hands at its committed position: across rebalances each record is consumed exactly once."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, strategy: str,
                 seen: list[tuple[str, int, int]], lock: threading.Lock) -> None:
        super().__init__(name=name, daemon=True)
        self.member = name
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "partition.assignment.strategy": strategy, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": MEMBER_SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS, "fetch.wait.max.ms": 100})
        self.topic = topic
        self.seen, self.lock = seen, lock
        self.positions: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.assigned: set[int] = set()
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.lost: list[list[int]] = []

    def _commit(self, partitions: list[int]) -> None:
        # Only what moved since this member's last successful commit: the revoke callback that close() runs may
        # find a rebalance under way (its generation gone, ILLEGAL_GENERATION, as Kafka answers too), and a
        # commit of nothing new there must not fail the member.
        offsets = [TopicPartition(self.topic, p, self.positions[p]) for p in partitions
                   if p in self.positions and self.committed.get(p) != self.positions[p]]
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=False)
            self.committed.update((tp.partition, tp.offset) for tp in offsets)

    # The binding (un)assigns after these return, incrementally under the cooperative protocol.
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigned |= {tp.partition for tp in partitions}

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = [tp.partition for tp in partitions]
        try:
            self._commit(gone)  # before the partitions move: the next owner starts where this one stopped
        except KafkaException as e:  # raised into librdkafka, it comes back out of consume()/close() mangled
            self.errors.append(RuntimeError(f"{self.member}: commit on revoking {gone}: {e}"))
        for p in gone:
            self.positions.pop(p, None)
            self.committed.pop(p, None)
        self.assigned -= set(gone)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        # Lost, not revoked: another member may own them already, so nothing is committed (Kafka's rule).
        gone = [tp.partition for tp in partitions]
        self.lost.append(gone)
        for p in gone:
            self.positions.pop(p, None)
            self.committed.pop(p, None)
        self.assigned -= set(gone)

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                    on_lost=self._on_lost)
            uncommitted: set[int] = set()
            while not self.stop_event.is_set():
                batch = self.consumer.consume(num_messages=100, timeout=0.2)
                for m in batch:
                    if m.error() is not None:
                        continue
                    with self.lock:
                        self.seen.append((self.member, m.partition(), m.offset()))
                    self.positions[m.partition()] = m.offset() + 1
                    uncommitted.add(m.partition())
                uncommitted &= self.assigned
                if uncommitted:
                    try:
                        self._commit(sorted(uncommitted))
                        uncommitted.clear()
                    except KafkaException as e:
                        # a rebalance under way (the revoke callback commits), or the coordinator moving: the
                        # next round commits them again
                        if not (e.args[0].retriable() or e.args[0].code() in (
                                KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)):
                            raise
            self.consumer.close()  # revokes (committing) and leaves the group
        except BaseException as e:  # the test thread reports it
            self.errors.append(e)


def run_members_one_after_the_other(cluster: LocalProcessBackend, strategy: str) -> tuple[str, str, int]:
    """Three members join one after the other while records keep coming, then leave one after the other; every
    record is consumed exactly once, and by the members holding its partition at the time. (topic, group,
    records)."""
    topic, group, partitions = new_topic(cluster, 6), new_group(), 6
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    produced = 0

    def feed(n: int) -> None:
        nonlocal produced
        produce(cluster.kafka_bootstrap, topic, [f"r{produced + i}".encode() for i in range(n)])
        produced += n

    def all_consumed() -> bool:
        with lock:
            return len(seen) >= produced

    members: list[Member] = []
    try:
        feed(300)
        for name in ("m1", "m2", "m3"):
            member = Member(name, cluster.kafka_bootstrap, group, topic, strategy, seen, lock)
            members.append(member)
            member.start()
            wait_until(lambda m=member: m.assigned or m.errors, SLOW_MACHINE_S, f"{name} to be assigned partitions")
            assert not member.errors, member.errors
            # every live member holds some partitions, none twice
            wait_until(lambda: all(m.assigned for m in members) and sum(len(m.assigned) for m in members)
                       == partitions, SLOW_MACHINE_S, f"the {len(members)} members to share the partitions")
            feed(300)
            wait_until(all_consumed, SLOW_MACHINE_S, f"every record consumed with {len(members)} members")
        check_live_group_over_http_and_the_tool(cluster, topic, group, members)
        for member in members:
            member.stop_event.set()
            member.join(SLOW_MACHINE_S)
            assert not member.is_alive() and not member.errors, member.errors
            if member is not members[-1]:
                feed(300)
                wait_until(all_consumed, SLOW_MACHINE_S, f"every record consumed after {member.member} left")
    finally:
        for member in members:
            member.stop_event.set()
    with lock:
        records = list(seen)
    owners: dict[tuple[int, int], list[str]] = {}
    for who, p, o in records:
        owners.setdefault((p, o), []).append(who)
    lost = {m.member: m.lost for m in members if m.lost}
    assert not lost, f"members lost partitions without a revoke (a {MEMBER_SESSION_MS} ms session expired): {lost}"
    twice = {k: v for k, v in owners.items() if len(v) > 1}
    assert not twice, f"consumed more than once: {sorted(twice.items())[:5]}"
    ends = end_offsets(cluster.broker_url(1), topic, partitions)
    assert sum(ends.values()) == produced
    assert set(owners) == {(p, o) for p, end in ends.items() for o in range(end)}
    assert {who for who, _, _ in records} == {"m1", "m2", "m3"}
    return topic, group, produced


def check_live_group_over_http_and_the_tool(cluster: LocalProcessBackend, topic: str, group: str,
                                            members: list[Member]) -> None:
    """While the members consume: /groups lists the group and GET /groups/G (any broker) names its members
    with what they hold, decoded from their consumer-protocol assignments, as the tool's --members view does."""
    held = {(topic, p): m.member for m in members for p in m.assigned}
    url = cluster.broker_url(3)
    status, body, _ = request("GET", f"{url}/groups")
    assert status == 200, body
    listed = {g["group"]: g for g in body["groups"]}
    assert listed[group]["state"] == "Stable" and listed[group]["members"] == len(members)

    body = stable_group(url, group, held, "the members' assignments in GET /groups/G")
    assert body["kind"] == "classic" and body["protocol_type"] == "consumer"
    assert body["leader"] in {m["member_id"] for m in body["members"]}
    tool = subprocess.run([str(ROOT / "scripts" / "odradek-consumer-groups.sh"), "--bootstrap-server", url,
                           "--describe", "--group", group, "--members", "--verbose"], capture_output=True,
                          text=True, timeout=90, env={**os.environ})
    assert tool.returncode == 0, tool.stderr
    rows = [line.split() for line in tool.stdout.splitlines() if line.startswith(group)]
    assert sorted((cells[3], int(cells[4])) for cells in rows) == sorted(
        (m.member, len(m.assigned)) for m in members)


def check_committed_over_http_and_the_tool(cluster: LocalProcessBackend, topic: str, group: str,
                                           consumed: int) -> None:
    url = cluster.broker_url(2)
    status, body, _ = request("GET", f"{url}/groups/{group}/offsets")
    assert status == 200, body
    rows = {(o["topic"], o["partition"]): o for o in body["offsets"]}
    assert sum(o["offset"] for o in rows.values()) == consumed
    assert all(o["log_end_offset"] - o["offset"] == o["lag"] for o in rows.values())
    status, described, _ = request("GET", f"{url}/groups/{group}")
    assert status == 200 and described["state"] == "Empty" and described["members"] == [], described
    tool = subprocess.run([str(ROOT / "scripts" / "odradek-consumer-groups.sh"), "--bootstrap-server", url,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=90,
                          env={**os.environ})
    assert tool.returncode == 0, tool.stderr
    lines = [line.split() for line in tool.stdout.splitlines() if line.startswith(group)]
    assert {(cells[1], int(cells[2])): int(cells[3]) for cells in lines} == {
        tp: o["offset"] for tp, o in rows.items()}


# ---------------------------------------------------------------------------------------- confluent-kafka


def test_cooperative_sticky_members_join_and_leave_and_every_record_is_consumed_once(
        cluster: LocalProcessBackend) -> None:
    topic, group, consumed = run_members_one_after_the_other(cluster, "cooperative-sticky")
    check_committed_over_http_and_the_tool(cluster, topic, group, consumed)


def test_eager_range_members_join_and_leave_and_every_record_is_consumed_once(cluster: LocalProcessBackend) -> None:
    topic, group, consumed = run_members_one_after_the_other(cluster, "range")
    check_committed_over_http_and_the_tool(cluster, topic, group, consumed)


def test_a_killed_member_is_expelled_after_its_session_timeout_and_its_partitions_reassigned(
        cluster: LocalProcessBackend) -> None:
    topic, group = new_topic(cluster, 4), new_group()
    worker = subprocess.Popen([sys.executable, "-m", "tests.kafka_consumer_worker", cluster.kafka_bootstrap, group,
                               topic, "--session-timeout-ms", str(SESSION_MS)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    survivor = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                                  "partition.assignment.strategy": "range", "enable.auto.commit": False})
    held: set[int] = set()
    changes: list[float] = []

    def on_assign(c: Any, partitions: list[Any]) -> None:
        held.clear()
        held.update(tp.partition for tp in partitions)
        changes.append(time.monotonic())

    try:
        assert worker.stdout is not None
        first = worker.stdout.readline()  # blocks until the worker's first assignment
        assert first.startswith("assigned"), first
        survivor.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not (held and len(held) < 4):  # both members: the survivor holds some, not all
            assert time.monotonic() < deadline, f"the survivor holds {held}"
            survivor.poll(0.1)
        os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait(SLOW_MACHINE_S)
        while held != {0, 1, 2, 3}:
            assert time.monotonic() < killed + SLOW_MACHINE_S, f"the survivor holds {held}"
            survivor.poll(0.1)
        # The coordinator only learns of a silent member from its session, so the reassignment is not at once.
        assert changes[-1] - killed >= NOT_AT_ONCE_S, f"reassigned {changes[-1] - killed:.1f} s after the kill"
        admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(SLOW_MACHINE_S)
        assert len(described.members) == 1 and described.state == ConsumerGroupState.STABLE
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(SLOW_MACHINE_S)
        survivor.close()


def test_admin_client_lists_describes_reads_offsets_of_and_deletes_groups(cluster: LocalProcessBackend) -> None:
    topic, group = new_topic(cluster, 3), new_group()
    produce(cluster.kafka_bootstrap, topic, [f"v{i}".encode() for i in range(30)])
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                                  "client.id": "describe-me", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "partition.assignment.strategy": "range"})
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + SLOW_MACHINE_S
        while got < 30:
            assert time.monotonic() < deadline, f"consumed {got} of 30"
            got += sum(1 for m in consumer.consume(100, 0.2) if m.error() is None)
        consumer.commit(asynchronous=False)
        listed = wait_until(lambda: {g.group_id: g for g in admin.list_consumer_groups().result(
            SLOW_MACHINE_S).valid if g.group_id == group}, SLOW_MACHINE_S, "the group to be listed")
        assert listed[group].state == ConsumerGroupState.STABLE and not listed[group].is_simple_consumer_group
        described = admin.describe_consumer_groups([group])[group].result(SLOW_MACHINE_S)
        assert described.partition_assignor == "range" and len(described.members) == 1
        member = described.members[0]
        assert member.client_id == "describe-me" and member.host.endswith("127.0.0.1")
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(
            SLOW_MACHINE_S)
        assert sum(tp.offset for tp in offsets.topic_partitions if tp.topic == topic) == 30
        failed = admin.delete_consumer_groups([group])[group]  # it has a member
        with pytest.raises(KafkaException) as e:
            failed.result(SLOW_MACHINE_S)
        assert e.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        consumer.close()
    admin.delete_consumer_groups([group])[group].result(SLOW_MACHINE_S)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(SLOW_MACHINE_S).valid}
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/groups/{group}")
    assert status == 404, body


# ------------------------------------------------------------------------------- kafka-python and aiokafka


def test_kafka_python_consumer_in_a_group_consumes_and_commits(cluster: LocalProcessBackend) -> None:
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    topic, group = new_topic(cluster, 2), new_group()
    produce(cluster.kafka_bootstrap, topic, [f"kp{i}".encode() for i in range(40)])
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap.split(","), group_id=group,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(values) < 40:
            assert time.monotonic() < deadline, f"consumed {len(values)} of 40"
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
        assert sorted(values) == sorted(f"kp{i}".encode() for i in range(40))
        consumer.commit()
        committed = {p: consumer.committed(kafka.TopicPartition(topic, p)) for p in (0, 1)}
        assert sum(committed.values()) == 40
    finally:
        consumer.close()
    status, body, _ = request("GET", f"{cluster.broker_url(3)}/groups/{group}/offsets")
    assert status == 200 and sum(o["offset"] for o in body["offsets"]) == 40, body


def test_aiokafka_consumer_in_a_group_consumes_and_commits(cluster: LocalProcessBackend) -> None:
    aiokafka = pytest.importorskip("aiokafka", reason="pip install aiokafka (the test extra)")
    topic, group = new_topic(cluster, 2), new_group()
    produce(cluster.kafka_bootstrap, topic, [f"ak{i}".encode() for i in range(40)])

    async def main() -> dict[int, int]:
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=cluster.kafka_bootstrap, group_id=group,
                                             auto_offset_reset="earliest", enable_auto_commit=False,
                                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(SLOW_MACHINE_S):
                while len(values) < 40:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        values += [r.value for r in records]
            assert sorted(values) == sorted(f"ak{i}".encode() for i in range(40))
            await consumer.commit()
            return {p: await consumer.committed(aiokafka.TopicPartition(topic, p)) for p in (0, 1)}
        finally:
            await consumer.stop()

    assert sum(asyncio.run(main()).values()) == 40
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/groups/{group}/offsets")
    assert status == 200 and sum(o["offset"] for o in body["offsets"]) == 40, body


# ---------------------------------------------------------------------------------------- the wire, by hand


def call(c: LocalProcessBackend, broker_id: int, body: Any, correlation_id: int = 7) -> Any:
    """One request (a kio entity) to one broker's Kafka listener, its response entity."""
    key, version = int(body.__api_key__), int(body.__version__)
    header_cls = body.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=key, request_api_version=version,
                                              correlation_id=correlation_id, client_id="by-hand"))
    entity_writer(type(body))(out, body)
    payload = out.getvalue()
    host, _, port = c.kafka_address(broker_id).rpartition(":")
    with socket.create_connection((host, int(port)), timeout=SLOW_MACHINE_S) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)

        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                assert chunk, "connection closed"
                data += chunk
            return data

        frame = exactly(struct.unpack(">i", exactly(4))[0])
    response_cls = load_response_schema(key, version)
    header, pos = entity_reader(response_cls.__header_schema__)(frame, 0)
    assert header.correlation_id == correlation_id
    answer, _ = entity_reader(response_cls)(frame, pos)
    return answer


def coordinator_of(c: LocalProcessBackend, group: str) -> int:
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

    answer = call(c, 1, FindCoordinatorRequest(key=group, key_type=0))
    assert answer.error_code == 0, answer
    return int(answer.node_id)


def test_find_coordinator_answers_groups_and_transactional_ids_and_refuses_other_key_types(
        cluster: LocalProcessBackend) -> None:
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    group = new_group()
    answer = call(cluster, 2, FindCoordinatorRequest(key_type=0, coordinator_keys=(group, "bad/name")))
    ok, bad = answer.coordinators
    assert ok.error_code == 0 and f"{ok.host}:{ok.port}" == cluster.kafka_address(ok.node_id)
    assert bad.error_code == 24 and bad.node_id == -1  # INVALID_GROUP_ID
    txn = call(cluster, 3, FindCoordinatorRequest(key_type=1, coordinator_keys=(f"tx-{uuid.uuid4().hex[:6]}",)))
    assert txn.coordinators[0].error_code == 0 and txn.coordinators[0].node_id in cluster.broker_ids()
    share = call(cluster, 1, FindCoordinatorRequest(key_type=2, coordinator_keys=("x",)))
    assert share.coordinators[0].error_code == 42  # INVALID_REQUEST
    assert coordinator_of(cluster, group) == ok.node_id  # stable: the claim holds


def test_join_group_errors_kafka_answers(cluster: LocalProcessBackend) -> None:
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol

    group = new_group()
    coordinator = coordinator_of(cluster, group)
    other = next(b for b in cluster.broker_ids() if b != coordinator)

    def join(member_id: str = "", *, group_id: str = group, session_ms: int = SESSION_MS,
             protocols: tuple[Any, ...] = (JoinGroupRequestProtocol(name="range", metadata=b"m"),)) -> Any:
        return JoinGroupRequest(group_id=group_id, session_timeout=timedelta(milliseconds=session_ms),
                                rebalance_timeout=timedelta(milliseconds=10_000), member_id=member_id,
                                group_instance_id=None, protocol_type="consumer", protocols=protocols)

    assert call(cluster, other, join()).error_code == 16  # NOT_COORDINATOR: never forwarded
    assert call(cluster, coordinator, join(group_id="no spaces")).error_code == 24  # INVALID_GROUP_ID
    assert call(cluster, coordinator, join(session_ms=1000)).error_code == 26  # INVALID_SESSION_TIMEOUT
    assert call(cluster, coordinator, join(protocols=())).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    assert call(cluster, coordinator, join("nobody")).error_code == 25  # UNKNOWN_MEMBER_ID
    first = call(cluster, coordinator, join())
    assert first.error_code == 79 and first.member_id.startswith("by-hand-")  # MEMBER_ID_REQUIRED
    joined = call(cluster, coordinator, join(first.member_id))
    assert joined.error_code == 0 and joined.leader == first.member_id and joined.generation_id >= 1
    assert [m.member_id for m in joined.members] == [first.member_id] and joined.protocol_name == "range"


def test_a_server_side_group_and_a_kafka_protocol_group_do_not_mix(cluster: LocalProcessBackend) -> None:
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol

    topic, group = new_topic(cluster, 1), new_group()
    status, body, _ = request("POST", f"{cluster.broker_url(1)}/groups/{group}/members",
                              {"client_id": "rest", "topics": [topic], "session_timeout_ms": 30_000})
    assert status == 200, body
    answer = call(cluster, coordinator_of(cluster, group), JoinGroupRequest(
        group_id=group, session_timeout=timedelta(milliseconds=SESSION_MS),
        rebalance_timeout=timedelta(milliseconds=10_000), member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)))
    assert answer.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    # a Kafka admin client decodes the server-side group's members as a consumer group's
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(SLOW_MACHINE_S)
    assert described.state == ConsumerGroupState.STABLE and described.partition_assignor == "range"
    [member] = described.members
    assert member.client_id == "rest" and member.member_id == body["member_id"]
    assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [(topic, 0)]
    status, body, _ = request("DELETE", f"{cluster.broker_url(1)}/groups/{group}/members/{body['member_id']}")
    assert status == 200, body


def test_offset_commit_and_fetch_by_hand(cluster: LocalProcessBackend) -> None:
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup

    topic, group, empty = new_topic(cluster, 2), new_group(), new_group()
    coordinator = coordinator_of(cluster, group)

    def part(p: int, offset: int, metadata: str = "m") -> Any:
        return OffsetCommitRequestPartition(partition_index=p, committed_offset=offset, committed_leader_epoch=-1,
                                            committed_metadata=metadata)

    answer = call(cluster, coordinator, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=(
            OffsetCommitRequestTopic(name=topic, partitions=(part(0, 5), part(1, 7, "x" * 5000), part(9, 1))),
            OffsetCommitRequestTopic(name="no-such-topic", partitions=(part(0, 1),)))))
    codes = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
    # a simple commit to an empty group; metadata over 4096 bytes and unknown partitions are refused alone
    assert codes == {(topic, 0): 0, (topic, 1): 12, (topic, 9): 3, ("no-such-topic", 0): 3}
    empty_coordinator = coordinator_of(cluster, empty)  # a second group, maybe coordinated elsewhere
    fetched = call(cluster, coordinator, OffsetFetchRequest(groups=(
        OffsetFetchRequestGroup(group_id=group, topics=None), OffsetFetchRequestGroup(group_id=empty, topics=None),
    ), require_stable=False))
    mine, theirs = fetched.groups
    assert mine.error_code == 0
    assert [(t.name, p.partition_index, p.committed_offset, p.metadata) for t in mine.topics for p in t.partitions] \
        == [(topic, 0, 5, "m")]
    assert theirs.error_code == (0 if empty_coordinator == coordinator else 16)  # else NOT_COORDINATOR
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/groups/{group}/offsets")
    assert status == 200 and [(o["partition"], o["offset"]) for o in body["offsets"]] == [(0, 5)], body


def test_kafka_python_admin_deletes_and_alters_offsets_and_removes_members(cluster: LocalProcessBackend) -> None:
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    from kafka.admin import KafkaAdminClient, MemberToRemove
    from kafka.errors import GroupSubscribedToTopicError, NoError
    from kafka.structs import OffsetAndMetadata

    topic, group = new_topic(cluster, 2), new_group()
    produce(cluster.kafka_bootstrap, topic, [f"a{i}".encode() for i in range(10)])
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap.split(","))
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group, "client.id": "removed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + SLOW_MACHINE_S
        while got < 10:
            assert time.monotonic() < deadline, f"consumed {got} of 10"
            got += sum(1 for m in consumer.consume(100, 0.2) if m.error() is None)
        consumer.commit(asynchronous=False)
        tps = [kafka.TopicPartition(topic, p) for p in (0, 1)]
        refused = admin.delete_group_offsets(group, tps)  # a member subscribes to the topic: offsets stay
        assert set(refused.values()) == {GroupSubscribedToTopicError}
        described = admin.describe_groups([group])[group]
        [member] = described["members"]
        assert member["client_id"] == "removed" and described["protocol_type"] == "consumer"
        admin.remove_group_members(group, [MemberToRemove(member_id=member["member_id"])])  # LeaveGroup v3+
        status, body, _ = request("GET", f"{cluster.broker_url(1)}/groups/{group}")
        assert status == 200 and body["members"] == [] and body["state"] == "Empty", body
        assert admin.delete_group_offsets(group, tps[:1]) == {tps[0]: NoError}
        altered = admin.alter_group_offsets(group, {tps[1]: OffsetAndMetadata(3, "by-admin", -1)})
        assert altered == {tps[1]: NoError}  # a simple commit: the group is empty
        offsets = admin.list_group_offsets(group)[group]
        assert set(offsets) == {tps[1]} and (offsets[tps[1]].offset, offsets[tps[1]].metadata) == (3, "by-admin")
    finally:
        consumer.close()
        admin.close()


def test_a_static_member_restarting_within_its_session_keeps_its_place_without_a_rebalance(
        cluster: LocalProcessBackend) -> None:
    topic, group = new_topic(cluster, 2), new_group()

    def member() -> Any:
        return Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                         "group.instance.id": "instance-1", "session.timeout.ms": 30_000,
                         "heartbeat.interval.ms": HEARTBEAT_MS, "enable.auto.commit": False})

    def assigned(consumer: Any) -> set[int]:
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.1)
        return {tp.partition for tp in consumer.assignment()}

    def described() -> dict[str, Any]:
        status, body, _ = request("GET", f"{cluster.broker_url(1)}/groups/{group}")
        assert status == 200, body
        return body

    first = member()
    first.subscribe([topic])
    try:
        assert assigned(first) == {0, 1}
        before = wait_until(lambda: (d := described())["state"] == "Stable" and d, SLOW_MACHINE_S, "Stable")
        assert [m["group_instance_id"] for m in before["members"]] == ["instance-1"]
    finally:
        first.close()  # a static member leaves no LeaveGroup behind: its place waits for it
    second = member()
    second.subscribe([topic])
    try:
        assert assigned(second) == {0, 1}
        after = described()
        assert after["generation"] == before["generation"] and after["state"] == "Stable"
        assert [m["group_instance_id"] for m in after["members"]] == ["instance-1"]
        assert after["members"][0]["member_id"] != before["members"][0]["member_id"]
    finally:
        second.close()


def test_members_carry_on_when_their_coordinator_dies(cluster: LocalProcessBackend) -> None:
    """The coordinator is killed: its claim goes with its ZooKeeper session, the members' requests are answered
    NOT_COORDINATOR (or find it gone), FindCoordinator names another broker, which loads the group Stable from
    ZooKeeper; every record is consumed exactly once and committed. Last in this module: it restarts a broker."""
    topic, group = f"kg-{uuid.uuid4().hex[:8]}", new_group()
    create_topic(cluster.broker_url(1), topic, 2, 3, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    seen: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    produce(cluster.kafka_bootstrap, topic, [f"f{i}".encode() for i in range(100)])
    members = [Member(name, cluster.kafka_bootstrap, group, topic, "range", seen, lock) for name in ("f1", "f2")]
    for m in members:
        m.start()
    victim = coordinator_of(cluster, group)
    try:
        wait_until(lambda: len(seen) >= 100, SLOW_MACHINE_S, "the first records consumed")
        before = request("GET", f"{cluster.broker_url(1)}/groups/{group}")[1]
        cluster.kill_broker(victim)
        survivor_url = cluster.broker_url(next(b for b in cluster.broker_ids() if b != victim))
        produce(",".join(cluster.kafka_address(b) for b in cluster.broker_ids() if b != victim), topic,
                [f"f{i}".encode() for i in range(100, 200)])
        # a retried produce may have written a record twice (the producer is not idempotent): count the logs
        total = sum(end_offsets(survivor_url, topic, 2).values())
        assert total >= 200
        wait_until(lambda: len(seen) >= total, SLOW_MACHINE_S * 2, "the records produced after the kill consumed")

        def committed_all() -> bool:
            status, body, _ = request("GET", f"{survivor_url}/groups/{group}/offsets")
            return status == 200 and sum(o["offset"] for o in body["offsets"]) == total

        try:
            wait_until(committed_all, SLOW_MACHINE_S, "every record committed")
        except AssertionError as e:  # say what the group and each member hold, so that a failure can be read
            with lock:
                per_partition = {p: sorted(o for _, q, o in seen if q == p)[-3:] for p in (0, 1)}
            held = [(m.member, m.assigned, m.positions, m.committed, m.lost, m.errors) for m in members]
            raise AssertionError(
                f"{e}; {total} records, end offsets {end_offsets(survivor_url, topic, 2)}; committed "
                f"{request('GET', f'{survivor_url}/groups/{group}/offsets')[1]}; group "
                f"{request('GET', f'{survivor_url}/groups/{group}')[1]}; members (name, assigned, positions, "
                f"committed, lost, errors) {held}; last offsets seen {per_partition}") from e
        after = request("GET", f"{survivor_url}/groups/{group}")[1]
        assert after["coordinator"] != victim and after["generation"] >= before["generation"]
        assert all(not m.errors for m in members), [m.errors for m in members]
        with lock:
            consumed = sorted((p, o) for _, p, o in seen)
        assert len(consumed) == len(set(consumed)) == total
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(SLOW_MACHINE_S)
        if cluster.broker_pid(victim) is None:
            cluster.start_broker(victim)
