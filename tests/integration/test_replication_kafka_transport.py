"""Replication over Kafka's protocol (issue 25), against real processes with ``--replica-fetch-transport kafka``:
each follower fetches from each leader with one multi-partition Fetch per round in an incremental fetch session
over one connection to the leader's Kafka listener. The sessions take in partitions of topics created while they
run and let go of topics deleted; a leader's session cache evicting them costs nothing but full fetches; a
leader change moves a partition from one session to another with nothing lost; a throttled move replicates at
the throttled rate; a leader SIGKILL under RF 3 acks=all load loses no acknowledged record; and with the default
transport a broker without a Kafka listener follows and is followed over HTTP beside brokers that use Kafka's Fetch.

Every test checks that the sessions were in use (the leaders' incremental Fetch count moved): no Kafka consumer
runs in these tests while that is measured, so only the followers' fetchers send incremental fetches."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, partition_state, produce, produce_with_failover, read_all, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from tests.integration.test_reassignment import copy_rate, create, fill, move_throttled, reassign, size_on
from tests.integration.test_replication import TOPIC, SequentialProducer, leader_of, urls

pytestmark = pytest.mark.cluster

KAFKA_TRANSPORT = ["--replica-fetch-transport", "kafka"]


# ------------------------------------------------------------------------------------------------- helpers


def metric(cluster: LocalProcessBackend, broker: int, name: str, labels: str = "") -> float:
    """The sum of one metric's samples on ``broker`` (those whose labels contain ``labels``)."""
    with urllib.request.urlopen(f"{cluster.broker_url(broker)}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        sample, _, value = line.rpartition(" ")
        metric_name, _, label_part = sample.partition("{")
        if metric_name == name and labels in label_part:
            total += float(value)
    return total


def incremental_fetches(cluster: LocalProcessBackend) -> float:
    """Incremental Fetch requests the live brokers answered (their fetch-session caches count them by kind)."""
    return sum(metric(cluster, b, "odradek_kafka_fetches_total", 'session="incremental"')
               for b in cluster.broker_ids() if cluster.broker_pid(b) is not None)


def session_partitions(cluster: LocalProcessBackend) -> float:
    """Partitions held by the live brokers' incremental fetch sessions."""
    return sum(metric(cluster, b, "odradek_kafka_fetch_session_partitions")
               for b in cluster.broker_ids() if cluster.broker_pid(b) is not None)


def segment_bytes(cluster: LocalProcessBackend, broker: int, topic: str, partition: int) -> bytes:
    d = cluster.cluster.slots[broker].data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(Path(d).glob("*.log")))


def wait_converged(cluster: LocalProcessBackend, topic: str, partition: int, brokers: list[int]) -> bytes:
    def same() -> bytes | None:
        blobs = [segment_bytes(cluster, b, topic, partition) for b in brokers]
        return blobs[0] if blobs[0] and all(b == blobs[0] for b in blobs) else None

    return wait_until(same, SLOW_MACHINE_S,  # type: ignore[return-value]
                      f"{topic}-{partition} byte-identical on brokers {brokers}")


def wait_full_isr(cluster: LocalProcessBackend, topic: str, partitions: range | list[int], size: int = 3) -> None:
    url = cluster.broker_url(next(b for b in cluster.broker_ids() if cluster.broker_pid(b) is not None))
    for p in partitions:
        wait_until(lambda p=p: len(partition_state(url, topic, p)["isr"]) == size, SLOW_MACHINE_S,
                   f"{topic}-{p}'s ISR to hold all {size} replicas")


class PartitionLoad(threading.Thread):
    """acks=all produces of one record at a time, round robin over the topic's partitions, through any live
    broker, retrying retriable failures (as test_replication's SequentialProducer does for one partition) until
    ``stop`` is set; what was acknowledged is kept per partition, in order."""

    def __init__(self, cluster: LocalProcessBackend, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.acked: dict[int, list[str]] = {p: [] for p in range(partitions)}
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            partition, value = i % self.partitions, f"{self.topic}-{i}"
            i += 1
            if produce_with_failover(self.cluster, self.topic, partition, value, self.errors):
                self.acked[partition].append(value)
            else:
                self.failed.append(value)

    def finish(self) -> None:
        self.stop.set()
        self.join(2 * SLOW_MACHINE_S)
        assert not self.is_alive()
        assert not self.failed, self.errors[-5:]

    def check_kept(self, cluster: LocalProcessBackend) -> None:
        """Every acknowledged record is in its partition's leader's log, in order."""
        any_url = urls(cluster)[0]
        for p, acked in self.acked.items():
            url = cluster.broker_url(int(partition_state(any_url, self.topic, p)["leader"]))
            values = [r["value"] for r in read_all(url, self.topic, p)]
            assert [v for v in dict.fromkeys(values) if v in set(acked)] == acked, f"{self.topic}-{p}"


def cluster_id(cluster: LocalProcessBackend) -> str:
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/v3/clusters")
    assert status == 200, body
    return str(body["data"][0]["cluster_id"])


# --------------------------------------------------------------------------------------------------- tests


def test_sessions_take_in_a_topic_created_and_let_go_of_it_deleted_while_they_run(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, broker_args=KAFKA_TRANSPORT)
    create_topic(cluster.broker_url(1), "steady", 3, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    load = PartitionLoad(cluster, "steady", 3)
    load.start()
    try:
        wait_until(lambda: load.count >= 30, SLOW_MACHINE_S, "acknowledged records before the new topic")
        wait_until(lambda: incremental_fetches(cluster) > 0, SLOW_MACHINE_S, "incremental fetches")
        # each of the 3 partitions is in the session of each of its 2 followers with its leader
        wait_until(lambda: session_partitions(cluster) == 6, SLOW_MACHINE_S, "6 partitions in fetch sessions")
        # a follower's fetchers in its /metrics (Kafka's FetcherStats and ReplicaFetcherManager MaxLag)
        assert metric(cluster, 2, "odradek_replica_fetcher_requests_total") > 0
        with urllib.request.urlopen(f"{cluster.broker_url(2)}/metrics", timeout=10) as response:
            assert b"\nodradek_replica_fetcher_max_lag " in response.read()
        # min.insync.replicas 3: an acks=all produce to the new topic is answered only once both followers of
        # each partition fetched it, within the fetchers' running sessions
        create_topic(cluster.broker_url(1), "added", 3, 3, {"min.insync.replicas": "3"}, seen_by=urls(cluster))
        for p in range(3):
            status, body = produce(cluster.broker_url(1), "added", p, [f"added-{p}-{i}" for i in range(5)])
            assert status == 200 and all(o["error_code"] is None for o in body["offsets"]), body
        wait_full_isr(cluster, "added", range(3))
        for p in range(3):
            wait_converged(cluster, "added", p, [1, 2, 3])
        wait_until(lambda: session_partitions(cluster) == 12, SLOW_MACHINE_S, "12 partitions in fetch sessions")
        before = incremental_fetches(cluster)
        status, body, _ = request("DELETE", f"{cluster.broker_url(2)}/v3/clusters/{cluster_id(cluster)}/topics/added")
        assert status == 204, body
        for u in urls(cluster):
            wait_until(lambda u=u: request("GET", f"{u}/topics/added")[0] == 404, SLOW_MACHINE_S,
                       f"{u} to forget the deleted topic")
        # the followers' sessions forgot its partitions (the leaders' session caches say so)
        wait_until(lambda: session_partitions(cluster) == 6, SLOW_MACHINE_S, "6 partitions in fetch sessions")
        acked = load.count
        wait_until(lambda: load.count >= acked + 30, SLOW_MACHINE_S, "acknowledged records after the deletion")
        assert incremental_fetches(cluster) > before  # the same sessions went on
    finally:
        load.finish()
    wait_full_isr(cluster, "steady", range(3))
    for p in range(3):
        wait_converged(cluster, "steady", p, [1, 2, 3])
    load.check_kept(cluster)


def test_a_leaders_session_cache_evicting_the_followers_sessions_costs_them_nothing_but_full_fetches(
        make_cluster: MakeCluster) -> None:
    # room for one session per broker, evictable at once: the two followers of a leader take each other's slot
    cluster = make_cluster(brokers=3, broker_args=[*KAFKA_TRANSPORT, "--max-incremental-fetch-session-cache-slots",
                                                   "1", "--min-incremental-fetch-session-eviction-ms", "0"])
    create_topic(cluster.broker_url(1), "evicted", 3, 3, {"min.insync.replicas": "3"}, seen_by=urls(cluster))
    load = PartitionLoad(cluster, "evicted", 3)
    load.start()
    try:
        wait_until(lambda: sum(metric(cluster, b, "odradek_kafka_fetch_session_evictions_total")
                               for b in cluster.broker_ids()) >= 3, SLOW_MACHINE_S, "sessions evicted")
        acked = load.count
        wait_until(lambda: load.count >= acked + 60, SLOW_MACHINE_S, "acks=all records while sessions are evicted")
    finally:
        load.finish()
    # a follower whose session was evicted was answered FETCH_SESSION_ID_NOT_FOUND, and started over
    assert sum(metric(cluster, b, "odradek_kafka_fetches_total", 'session="error"') for b in cluster.broker_ids())
    wait_full_isr(cluster, "evicted", range(3))
    for p in range(3):
        wait_converged(cluster, "evicted", p, [1, 2, 3])
    load.check_kept(cluster)


def test_a_leader_change_inside_a_session_moves_the_partition_with_nothing_lost(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, broker_args=[*KAFKA_TRANSPORT, "--auto-leader-rebalance-enable", "false"])
    # partition 0 prefers broker 3, partition 1 broker 1; broker 3 steps down and comes back, so broker 1 leads
    # both and broker 2 follows both from it, in one session
    create(cluster, "moving", "3:1:2,1:2:3", "min.insync.replicas=2")
    cluster.stop_broker(3)
    wait_until(lambda: partition_state(cluster.broker_url(1), "moving", 0)["leader"] == 1, SLOW_MACHINE_S,
               "broker 1 to lead partition 0")
    cluster.start_broker(3)
    wait_full_isr(cluster, "moving", [0, 1])
    load = PartitionLoad(cluster, "moving", 2)
    load.start()
    try:
        wait_until(lambda: load.count >= 40, SLOW_MACHINE_S, "acknowledged records before the leader change")
        before = incremental_fetches(cluster)
        status, body, _ = request("POST", f"{cluster.broker_url(2)}/admin/preferred_leader_election",
                                  {"partitions": [{"topic": "moving", "partition": 0}]})
        assert status == 202 and body["accepted"] is True, body
        wait_until(lambda: partition_state(cluster.broker_url(2), "moving", 0)["leader"] == 3, SLOW_MACHINE_S,
                   "broker 3 to lead partition 0 again")
        assert partition_state(cluster.broker_url(2), "moving", 1)["leader"] == 1  # only partition 0 moved
        acked = {p: len(v) for p, v in load.acked.items()}
        wait_until(lambda: all(len(load.acked[p]) >= acked[p] + 30 for p in (0, 1)), SLOW_MACHINE_S,
                   "acknowledged records on both partitions after the leader change")
        assert incremental_fetches(cluster) > before
    finally:
        load.finish()
    wait_full_isr(cluster, "moving", [0, 1])
    for p in (0, 1):
        wait_converged(cluster, "moving", p, [1, 2, 3])
    load.check_kept(cluster)


def test_a_throttled_move_replicates_at_the_throttled_rate(make_cluster: MakeCluster, tmp_path: Path) -> None:
    """test_reassignment's throttle test, on the Kafka transport: a new replica catches up 20 MB under a 2 MB/s
    throttle, the rate measured on the receiving broker within 20 % of the limit; meanwhile a partition in sync
    on the same fetcher keeps its acks=all produces answered."""
    cluster = make_cluster(brokers=3, broker_args=KAFKA_TRANSPORT)
    topic, limit, total = "big", 2_000_000, 20_000_000
    # partition 0 moves from broker 3 to broker 2 under the throttle; partition 1 (leader 1, follower 2) is in sync
    # on the same fetcher of broker 2 and stays unthrottled
    create(cluster, topic, "1:3,1:2")
    fill(cluster, topic, total)
    wait_full_isr(cluster, topic, [0, 1], size=2)
    moves = move_throttled(cluster, tmp_path, topic, limit)

    samples: list[tuple[float, int]] = []
    latencies: list[float] = []
    deadline = time.monotonic() + 2 * SLOW_MACHINE_S
    i = 0
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), size_on(cluster, 2, topic)))
        if samples[-1][1] >= total * 0.9:
            break
        started = time.monotonic()
        status, body = produce(cluster.broker_url(1), topic, 1, [f"in-sync-{i}"])
        assert status == 200 and body["offsets"][0]["error_code"] is None, body
        latencies.append(time.monotonic() - started)
        i += 1
        time.sleep(0.2)
    rate = copy_rate(samples, total)
    latencies.sort()
    print(f"measured replication rate {rate / 1e6:.2f} MB/s under a {limit / 1e6:.1f} MB/s throttle; acks=all "
          f"latency of the in-sync partition: median {latencies[len(latencies) // 2] * 1000:.0f} ms")
    assert abs(rate - limit) <= 0.2 * limit, rate
    assert incremental_fetches(cluster) > 0
    wait_until(lambda: (v := reassign(cluster, "--verify", "--reassignment-json-file", str(moves))).returncode == 0
               and "is complete." in v.stdout, 2 * SLOW_MACHINE_S, "the move to complete", interval=0.5)
    wait_converged(cluster, topic, 0, [1, 2])


def test_sigkill_of_the_leader_under_acks_all_load_loses_no_acknowledged_record(make_cluster: MakeCluster) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
    cluster = make_cluster(brokers=3, broker_args=KAFKA_TRANSPORT)
    create_topic(cluster.broker_url(1), TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    load_topic = f"load-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.broker_url(1), load_topic, 3, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    old_leader = leader_of(cluster)

    # load beside the checked sequence: librdkafka, acks=all, every delivery report kept
    delivered: list[bytes] = []
    stop = threading.Event()

    def pump() -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all",
                                             "linger.ms": 5, "message.timeout.ms": 60_000})
        i = 0
        while not stop.is_set():
            producer.produce(load_topic, value=f"load-{i}".encode(), partition=i % 3,
                             on_delivery=lambda err, msg: delivered.append(msg.value()) if err is None else None)
            i += 1
            producer.poll(0)
            if i % 200 == 0:
                producer.flush(SLOW_MACHINE_S)
        producer.flush(2 * SLOW_MACHINE_S)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    producer = SequentialProducer(cluster, count=300)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 60 and len(delivered) >= 500, SLOW_MACHINE_S,
                   "acknowledged records before the kill")
        assert incremental_fetches(cluster) > 0
        cluster.kill_broker(old_leader)
        producer.join(120)
        assert not producer.is_alive()
        assert not producer.failed, producer.errors[-5:]
    finally:
        stop.set()
        pumping.join(3 * SLOW_MACHINE_S)
    assert not pumping.is_alive()

    new_leader = leader_of(cluster)
    assert new_leader != old_leader
    values = [r["value"] for r in read_all(cluster.broker_url(new_leader), TOPIC)]
    first_seen = list(dict.fromkeys(values))
    assert [v for v in first_seen if v in set(producer.acked)] == producer.acked
    stored: set[bytes] = set()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": load_topic,
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(load_topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(3)])
        wanted = set(delivered)
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not wanted <= stored and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    stored.add(m.value())
    finally:
        consumer.close()
    lost = set(delivered) - stored
    print(f"acknowledged {len(producer.acked)} + {len(delivered)} (load), lost {len(lost)}")
    assert not lost, f"{len(lost)} acknowledged records lost: {sorted(lost)[:5]}"

    cluster.start_broker(old_leader)
    wait_full_isr(cluster, TOPIC, [0])
    wait_converged(cluster, TOPIC, 0, [1, 2, 3])


def test_a_broker_without_a_kafka_listener_is_followed_and_follows_over_http_beside_kafkas_fetch(
        make_cluster: MakeCluster) -> None:
    """The default transport (``auto``, no flag here): brokers 1 and 2 have Kafka listeners and follow each other
    over Kafka's Fetch; broker 3 has none, so it follows both over HTTP, and they follow it over HTTP (a leader
    without the listener). With min.insync.replicas 3, an acks=all produce to a partition led by any of the three
    is acknowledged only once both others have it, so every pair of brokers has to replicate both ways."""
    cluster = make_cluster(brokers=3, start=False)
    cluster.cluster.slots[3] = dataclasses.replace(cluster.cluster.slots[3], kafka_port=None, kafka_extra=())
    cluster.up()
    assert cluster.cluster.kafka_address(3) is None
    all_urls = urls(cluster)
    create_topic(all_urls[0], "mixed", 6, 3, {"min.insync.replicas": "3"}, seen_by=all_urls)
    wait_full_isr(cluster, "mixed", range(6))
    leaders = {p: int(partition_state(all_urls[0], "mixed", p)["leader"]) for p in range(6)}
    assert set(leaders.values()) == {1, 2, 3}, leaders
    before = {b: metric(cluster, b, "odradek_kafka_fetches_total", 'session="incremental"') for b in (1, 2)}
    for p in range(6):
        for i in range(5):
            status, body = produce(cluster.broker_url(leaders[p]), "mixed", p, [f"{p}-{i}"], acks="all")
            assert status == 200 and body["offsets"][0].get("error_code") is None, body
    for p in range(6):
        wait_converged(cluster, "mixed", p, [1, 2, 3])
        assert [r["value"] for r in read_all(all_urls[0], "mixed", p)] == [f"{p}-{i}" for i in range(5)]
    # brokers 1 and 2 answered each other's sessions over Kafka's protocol meanwhile; broker 3 answers none
    assert all(metric(cluster, b, "odradek_kafka_fetches_total", 'session="incremental"') > before[b]
               for b in (1, 2)), before
    assert metric(cluster, 3, "odradek_kafka_fetches_total") == 0
