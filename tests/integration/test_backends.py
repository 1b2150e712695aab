"""The cluster's core promises on either backend (local processes, or containers of the docker/ images):
registration, controller failover, produce and read, and leader failover under acks=all with no acknowledged
record lost. ``--backend containers`` (or ODRADEK_TEST_BACKEND=containers) runs them against the images, so the
images are held to the same tests as the code."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.cluster import ClusterBackend
from tests.harness.http import JSON_V2, create_topic, partition_state, produce, read_all, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.backend]

MakeBackendCluster = Callable[..., ClusterBackend]
# A crashed broker's session ends within the timeout plus a tick or two of ZooKeeper's expiry check on a healthy
# machine; the waits below allow SLOW_MACHINE_S, since what they check is that it ends, not how soon.
# An HTTP answer from a live broker: generous, since a missed answer would read as a broker that is not there.
HTTP_TIMEOUT_S = 30


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/health", timeout=HTTP_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def live(cluster: ClusterBackend) -> list[int]:
    return [b for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]


def leader_of(cluster: ClusterBackend, topic: str) -> int:
    return int(partition_state(cluster.broker_url(live(cluster)[0]), topic)["leader"])


def test_registration_appears_and_goes(make_backend_cluster: MakeBackendCluster) -> None:
    cluster = make_backend_cluster(brokers=2)
    zk = cluster.zk_client()
    assert zk.get_broker_ids() == [1, 2]
    info = zk.get_broker(2)
    assert info is not None and info.url == cluster.broker_url(2) and info.epoch > 0
    assert health(cluster.broker_url(2))["broker_epoch"] == info.epoch

    cluster.kill_broker(2)  # SIGKILL: the registration goes when the session expires
    wait_until(lambda: zk.get_broker_ids() == [1], SLOW_MACHINE_S, "broker 2's registration to expire")
    cluster.stop_broker(1)  # SIGTERM: it deregisters at once
    wait_until(lambda: zk.get_broker_ids() == [], SLOW_MACHINE_S, "broker 1 to deregister on SIGTERM")


def test_controller_failover_bumps_the_epoch(make_backend_cluster: MakeBackendCluster) -> None:
    cluster = make_backend_cluster(brokers=3)
    zk = cluster.zk_client()
    controller = int(wait_until(zk.get_controller, SLOW_MACHINE_S, "a controller"))
    wait_until(lambda: all(health(cluster.broker_url(b))["controller_id"] == controller
                           for b in cluster.broker_ids()), SLOW_MACHINE_S, "every broker to know the controller")
    epoch_before, _ = zk.get_controller_epoch()

    cluster.kill_broker(controller)
    new = wait_until(lambda: (c := zk.get_controller()) is not None and c != controller and c, SLOW_MACHINE_S,
                     "a new controller")
    assert zk.get_controller_epoch()[0] == epoch_before + 1
    wait_until(lambda: health(cluster.broker_url(int(new)))["is_controller"], SLOW_MACHINE_S,
               "the new controller to say so")


def test_produce_and_read_through_any_broker(make_backend_cluster: MakeBackendCluster) -> None:
    cluster = make_backend_cluster(brokers=3)
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], "orders", 2, 3, {"min.insync.replicas": "2"}, seen_by=urls)
    for i, url in enumerate(urls):  # a broker that does not lead the partition forwards to the leader
        status, body = produce(url, "orders", i % 2, [{"n": i}], key=f"k{i}")
        assert status == 200 and body["offsets"][0]["error_code"] is None, body
    got = {p: [r["value"]["n"] for r in read_all(urls[-1], "orders", p)] for p in (0, 1)}
    assert got == {0: [0, 2], 1: [1]}
    status, body, _ = request("GET", f"{urls[1]}/topics/orders/partitions/0/records?offset=1", accept=JSON_V2)
    assert status == 200 and [r["key"] for r in body["records"]] == ["k2"]


def test_kafka_clients_produce_and_consume_on_either_backend(make_backend_cluster: MakeBackendCluster) -> None:
    """The Kafka listener is published by both backends: a librdkafka producer and consumer (confluent-kafka,
    default settings) round-trip through it, and the records read back over HTTP are the same."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster = make_backend_cluster(brokers=3)
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], "kafka-door", 1, 3, {"min.insync.replicas": "2"}, seen_by=urls)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("kafka-door", value=str(i).encode(), key=b"k", partition=0)  # JSON numbers
    assert producer.flush(SLOW_MACHINE_S) == 0
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("kafka-door", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [str(i).encode() for i in range(100)]
    assert [r["value"] for r in read_all(urls[1], "kafka-door", 0)] == list(range(100))


class AcksAllProducer(threading.Thread):
    """Sends v0, v1, ... one at a time with acks=all, retrying retriable failures through any live broker;
    records which values were acknowledged, and which needed a retry (those may appear twice)."""

    def __init__(self, cluster: ClusterBackend, topic: str, count: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.count = cluster, topic, count
        self.acked: list[str] = []
        self.retried: set[str] = set()
        self.failed: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        for i in range(self.count):
            value, attempt, deadline = f"v{i}", 0, time.monotonic() + SLOW_MACHINE_S  # spans a failover
            while True:
                brokers = live(self.cluster) or self.cluster.broker_ids()
                url = self.cluster.broker_url(brokers[attempt % len(brokers)])
                attempt += 1
                try:
                    status, body = produce(url, self.topic, 0, [value], key="k", timeout_ms=5000)
                except OSError as e:
                    status, body = 0, str(e)
                if status == 200 and body["offsets"][0]["error_code"] is None:
                    self.acked.append(value)
                    break
                self.retried.add(value)
                self.errors.append(f"{status} {body}"[:200])
                if time.monotonic() > deadline:
                    self.failed.append(value)
                    break
                time.sleep(0.05)
            time.sleep(0.01)


def test_killing_the_leader_during_acks_all_produce_loses_no_acknowledged_record(
    make_backend_cluster: MakeBackendCluster,
) -> None:
    """On the containers backend this is `docker kill` of the leader's container mid-run."""
    cluster = make_backend_cluster(brokers=3)
    topic = "ledger"
    create_topic(cluster.broker_url(1), topic, 1, 3, {"min.insync.replicas": "2"},
                 seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    old_leader = leader_of(cluster, topic)

    producer = AcksAllProducer(cluster, topic, count=200)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, SLOW_MACHINE_S, "some acknowledged records before the kill")
    cluster.kill_broker(old_leader)
    producer.join(4 * SLOW_MACHINE_S)  # 200 sends, one failover: seconds on a healthy machine
    assert not producer.is_alive()
    assert not producer.failed, producer.errors[-5:]

    new_leader = leader_of(cluster, topic)
    assert new_leader != old_leader
    values = [r["value"] for r in read_all(cluster.broker_url(new_leader), topic)]
    first_seen = list(dict.fromkeys(values))
    acked = set(producer.acked)
    assert [v for v in first_seen if v in acked] == producer.acked  # every acknowledged record, in order
    assert set(values) <= {f"v{i}" for i in range(200)}
    assert len(values) - len(first_seen) <= len(producer.retried)
    print(f"acknowledged {len(producer.acked)}, retried {len(producer.retried)}, read {len(values)}")

    cluster.start_broker(old_leader)  # the same container (or data directory) comes back and catches up
    wait_until(lambda: len(partition_state(cluster.broker_url(new_leader), topic)["isr"]) == 3, SLOW_MACHINE_S,
               "the old leader to rejoin the ISR")
    back = [r["value"] for r in read_all(cluster.broker_url(old_leader), topic)]
    assert back == values


def test_a_consumer_group_reads_everything_and_commits(make_backend_cluster: MakeBackendCluster) -> None:
    """Two members of one group split a 2-partition topic, read every record once, and commit their offsets."""
    from odradek import AdminClient, GroupConsumer, Producer, TopicPartition

    cluster = make_backend_cluster(brokers=3)
    bootstrap = ",".join(cluster.broker_url(b) for b in cluster.broker_ids())
    topic, group = "clicks", "dashboard"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=2)
        wait_until(lambda: all(p.leader >= 0 for p in admin.describe_topic(topic).partitions), SLOW_MACHINE_S,
                   "leaders")
    with Producer(bootstrap, acks="all", linger_ms=5) as p:
        for f in [p.send(topic, str(i).encode(), partition=i % 2) for i in range(40)]:
            f.result()

    members = [GroupConsumer(bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, fetch_max_wait_ms=100) for _ in range(2)]
    try:
        for m in members:
            m.subscribe([topic])
        seen: list[bytes] = []

        def everything_read_and_committed() -> bool:
            for m in members:  # every member polls, so rebalances complete; then commits what it consumed
                for records in m.poll(timeout_ms=200).values():
                    seen.extend(r.value for r in records)
                m.commit()
            return {members[0].committed(TopicPartition(topic, p)) for p in (0, 1)} == {20}

        wait_until(everything_read_and_committed, 2 * SLOW_MACHINE_S, "the group to read and commit both partitions")
        # at least once: a partition that moved in a rebalance before a commit may be read twice, never skipped
        assert set(seen) == {str(i).encode() for i in range(40)}
    finally:
        for m in members:
            m.close()
