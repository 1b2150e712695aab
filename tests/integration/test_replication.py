"""Replication's promise, against real processes: with RF 3, acks=all and min.insync.replicas=2, no acknowledged
record is lost or reordered while one broker at a time fails; stale leaders acknowledge nothing."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, partition_state, produce, produce_with_failover, read_all, request
from tests.harness.sockets import socket_inodes, tcp_sockets, unread_at_server
from tests.harness.wait import SLOW_MACHINE_S, hold_for, wait_at_most, wait_until

pytestmark = pytest.mark.cluster

TOPIC = "events"
SEND_DEADLINE_S = SLOW_MACHINE_S
"""How long SequentialProducer retries one value (through elections and restarts) before counting it failed."""
PRODUCER_JOIN_S = 4 * SLOW_MACHINE_S
"""A few hundred sequential sends and one failover: seconds on a healthy machine."""
PARKED_FETCH_S = 4.0
"""How long _let_parked_fetches_end looks for the frozen followers' answered fetches. A fetch parks at the leader
for up to 500 ms; the bound leaves a loaded machine several times that to answer it, and stays well under the
8 s session of the test that freezes the followers, so that none of them loses its session meanwhile."""


def urls(cluster: LocalProcessBackend) -> list[str]:
    return [cluster.broker_url(b) for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]


def leader_of(cluster: LocalProcessBackend, topic: str = TOPIC, via: int | None = None) -> int:
    live = [b for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]
    url = cluster.broker_url(via if via is not None else live[0])
    return int(partition_state(url, topic)["leader"])


def segment_bytes(cluster: LocalProcessBackend, broker: int, topic: str = TOPIC, partition: int = 0) -> bytes:
    d = cluster.cluster.slots[broker].data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(Path(d).glob("*.log")))


def wait_converged(cluster: LocalProcessBackend, brokers: list[int], timeout: float = SLOW_MACHINE_S) -> bytes:
    def same() -> bytes | None:
        blobs = {b: segment_bytes(cluster, b) for b in brokers}
        first = blobs[brokers[0]]
        return first if first and all(v == first for v in blobs.values()) else None

    return wait_until(same, timeout, f"replicas {brokers} to hold byte-identical logs")  # type: ignore[return-value]


class SequentialProducer(threading.Thread):
    """Sends v0, v1, ... one at a time with acks=all and one key, retrying retriable failures through any live
    broker; records which values were acknowledged and which needed retries. Sends ``count`` values, or, with
    ``stop``, values until ``stop`` is set (the value in flight then is still seen through)."""

    def __init__(self, cluster: LocalProcessBackend, count: int | None = None, pause_s: float = 0.01,
                 stop: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        assert (count is None) != (stop is None), "a count or a stop event"
        self.cluster = cluster
        self.count = count
        self.stop = stop
        self.pause_s = pause_s
        self.acked: list[str] = []
        self.retried: set[str] = set()
        self.failed: list[str] = []
        self.errors: list[str] = []

    def _more(self, sent: int) -> bool:
        if self.stop is not None:
            return not self.stop.is_set()
        return sent < (self.count or 0)

    def run(self) -> None:
        i = 0
        while self._more(i):
            value = f"v{i}"
            i += 1
            errors_before = len(self.errors)
            if produce_with_failover(self.cluster, TOPIC, 0, value, self.errors, key="k",
                                     deadline_s=SEND_DEADLINE_S):
                self.acked.append(value)
            else:
                self.failed.append(value)
            if len(self.errors) > errors_before:
                self.retried.add(value)
            time.sleep(self.pause_s)


def test_sigkill_of_the_leader_loses_no_acknowledged_record(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    create_topic(cluster.broker_url(1), TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    old_leader = leader_of(cluster)

    producer = SequentialProducer(cluster, count=300)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 60, SLOW_MACHINE_S, "some acknowledged records before the kill")
    cluster.kill_broker(old_leader)
    producer.join(PRODUCER_JOIN_S)
    assert not producer.is_alive()
    assert not producer.failed, producer.errors[-5:]

    new_leader = leader_of(cluster)
    assert new_leader != old_leader
    values = [r["value"] for r in read_all(cluster.broker_url(new_leader), TOPIC)]
    # every acknowledged record is there, in send order (first occurrences), and nothing else was invented
    first_seen = list(dict.fromkeys(values))
    assert [v for v in first_seen if v in set(producer.acked)] == producer.acked
    assert set(values) <= {f"v{i}" for i in range(300)}
    duplicates = len(values) - len(first_seen)
    assert duplicates <= len(producer.retried), (duplicates, producer.retried)
    print(f"acknowledged {len(producer.acked)}, retried {len(producer.retried)}, duplicates {duplicates}")

    cluster.start_broker(old_leader)
    wait_until(lambda: len(partition_state(cluster.broker_url(new_leader), TOPIC)["isr"]) == 3, SLOW_MACHINE_S,
               "the old leader to rejoin the ISR")
    wait_converged(cluster, [1, 2, 3])


def test_a_stopped_follower_leaves_the_isr_and_rejoins(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, session_timeout_ms=8000, broker_args=["--replica-lag-time-max-ms", "1500"])
    url = cluster.broker_url(1)
    create_topic(url, TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    leader = leader_of(cluster)
    follower = next(b for b in (1, 2, 3) if b != leader)
    leader_url = cluster.broker_url(leader)
    assert produce(leader_url, TOPIC, 0, ["before"])[0] == 200

    others = sorted(b for b in (1, 2, 3) if b != follower)
    cluster.pause_broker(follower)
    try:
        # keep writing so the stopped follower falls behind the leader's log end
        wait_until(lambda: produce(leader_url, TOPIC, 0, ["during"], acks="1")[0] == 200
                   and follower not in partition_state(leader_url, TOPIC)["isr"], SLOW_MACHINE_S,
                   "the ISR to shrink after replica.lag.time.max.ms")
        # The live follower may lag past replica.lag.time.max.ms too on a loaded machine and drop out for a
        # moment; it comes back, and with the leader it is an ISR of 2 that takes acks=all writes.
        wait_until(lambda: sorted(partition_state(leader_url, TOPIC)["isr"]) == others, SLOW_MACHINE_S,
                   f"the ISR to be {others}: the stopped follower out, the live one in")

        def acknowledged_while_shrunk() -> bool:
            status, body = produce(leader_url, TOPIC, 0, ["while-shrunk"])  # acks=all
            return status == 200 and body["offsets"][0]["error_code"] is None

        wait_until(acknowledged_while_shrunk, SLOW_MACHINE_S, "an acks=all write with 2 replicas in the ISR")
        assert follower not in partition_state(leader_url, TOPIC)["isr"]
    finally:
        cluster.resume_broker(follower)
    wait_until(lambda: follower in partition_state(leader_url, TOPIC)["isr"], SLOW_MACHINE_S,
               "the follower to rejoin the ISR")
    wait_converged(cluster, [1, 2, 3])


def test_acks_all_needs_min_insync_replicas_but_acks_1_does_not(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    create_topic(cluster.broker_url(1), TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    leader = leader_of(cluster)
    leader_url = cluster.broker_url(leader)
    for b in (1, 2, 3):
        if b != leader:
            cluster.kill_broker(b)
    wait_until(lambda: partition_state(leader_url, TOPIC)["isr"] == [leader], SLOW_MACHINE_S,
               "the ISR to shrink to the leader")

    status, body = produce(leader_url, TOPIC, 0, ["refused"], acks="all")
    assert status == 200 and body["offsets"][0]["offset"] is None
    assert body["offsets"][0]["error_name"] == "NOT_ENOUGH_REPLICAS", body  # refused before appending
    status, batch_body, _ = request(
        "POST", f"{leader_url}/topics/{TOPIC}/partitions/0/batches?acks=all",
        raw=_one_batch(b"refused-too"), content_type="application/vnd.odradek.batches.v2")
    assert status == 503 and batch_body["error"] == "NOT_ENOUGH_REPLICAS" and batch_body["retriable"] is True

    status, body = produce(leader_url, TOPIC, 0, ["accepted"], acks="1")
    assert status == 200 and body["offsets"][0]["error_code"] is None
    assert [r["value"] for r in read_all(leader_url, TOPIC)] == ["accepted"]


def _one_batch(value: bytes) -> bytes:
    from odradek.protocol.records import encode_batch

    return encode_batch([(None, value, int(time.time() * 1000), ())])


def test_a_stale_leader_acknowledges_nothing_and_its_divergent_tail_is_cut(make_cluster: MakeCluster) -> None:
    # The followers stay frozen for up to PARKED_FETCH_S and a write: their sessions must outlive that.
    cluster = make_cluster(brokers=3, session_timeout_ms=8000)
    create_topic(cluster.broker_url(1), TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    old = leader_of(cluster)
    followers = [b for b in (1, 2, 3) if b != old]
    old_url = cluster.broker_url(old)
    assert produce(old_url, TOPIC, 0, ["committed"])[0] == 200

    # The leader takes a write its followers never see (acks=1), then freezes.
    for f in followers:
        cluster.pause_broker(f)
    _let_parked_fetches_end(cluster, old, followers)
    status, body = produce(old_url, TOPIC, 0, ["divergent"], acks="1")
    assert status == 200 and body["offsets"][0]["offset"] == 1
    cluster.pause_broker(old)
    for f in followers:
        cluster.resume_broker(f)

    new = wait_until(lambda: (lead := leader_of(cluster, via=followers[0])) in followers and lead, SLOW_MACHINE_S,
                     "a new leader among the followers")
    new_url = cluster.broker_url(int(new))  # type: ignore[arg-type]
    status, body = produce(new_url, TOPIC, 0, ["after"])
    assert status == 200 and body["offsets"][0]["offset"] == 1  # same offset as the divergent record

    # A produce queued at the frozen old leader, on the leader-only binary path (the JSON path would forward to
    # the real leader, which may acknowledge), must be answered when it wakes, and with a fencing error: not a
    # timeout, not a refused connection, and never a success.
    conn = _send_batch(old_url, b"from-stale-leader")
    client_port, server_port = conn.sock.getsockname()[1], cluster.cluster.slots[old].port
    wait_until(lambda: (unread_at_server(client_port, server_port) or 0) > 0, SLOW_MACHINE_S,
               "the produce to be queued, unread, at the frozen old leader")
    cluster.resume_broker(old)
    response = conn.getresponse()  # the old leader is reachable again: it must answer (30 s socket timeout)
    answer = json.loads(response.read() or b"{}")
    conn.close()
    print(f"the stale leader answered {response.status} {answer}")
    assert response.status != 200, f"the stale leader acknowledged a produce: {answer}"
    assert answer.get("error") in ("NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH"), (response.status, answer)
    assert answer["retriable"] is True
    if answer["error"] == "NOT_LEADER_OR_FOLLOWER":
        assert answer.get("leader") == new, answer  # it names the leader the client should go to

    wait_until(lambda: len(partition_state(new_url, TOPIC)["isr"]) == 3, SLOW_MACHINE_S, "the old leader to rejoin")
    log_bytes = wait_converged(cluster, [1, 2, 3])
    assert b"divergent" not in log_bytes and b"from-stale-leader" not in log_bytes
    values = [r["value"] for r in read_all(new_url, TOPIC)]
    assert values[:2] == ["committed", "after"] and "divergent" not in values


def _let_parked_fetches_end(cluster: LocalProcessBackend, leader: int, followers: list[int]) -> None:
    """Wait (at most PARKED_FETCH_S) until each frozen follower's fetch parked at the leader has been answered, so that
    no in-flight long-poll (500 ms) carries the leader's next write to a follower when it wakes up.

    An answered fetch shows as bytes the frozen follower has not read from its connection to the leader. A
    follower that had no fetch in flight when it froze never shows one, so this waits out its bound instead of
    failing: there is nothing to carry in that case.
    """
    slot = cluster.cluster.slots[leader]
    leader_ports = {slot.port, *slot.kafka_listeners.values()}  # HTTP long-polls, or the Kafka fetcher's channel

    def answered(follower: int) -> bool:
        pid = cluster.broker_pid(follower)
        inodes = socket_inodes(pid) if pid is not None else set()
        return any(s.remote_port in leader_ports and s.rx_queue > 0 and s.inode in inodes for s in tcp_sockets())

    wait_at_most(lambda: all(answered(f) for f in followers), PARKED_FETCH_S)


def _send_batch(url: str, value: bytes) -> http.client.HTTPConnection:
    """Send a binary-path produce (acks=all) and return the connection without reading the answer."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
    conn.request("POST", f"/topics/{TOPIC}/partitions/0/batches?acks=all&timeout_ms=15000", body=_one_batch(value),
                 headers={"Content-Type": "application/vnd.odradek.batches.v2"})
    return conn


def test_clean_election_keeps_the_partition_offline_until_unclean_is_allowed(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=2)
    url1 = cluster.broker_url(1)
    create_topic(url1, TOPIC, 1, 2, seen_by=urls(cluster))
    leader = leader_of(cluster)
    other = 1 if leader == 2 else 2
    leader_url = cluster.broker_url(leader)
    status, body = produce(leader_url, TOPIC, 0, ["both"])
    assert status == 200 and body["offsets"][0]["error_code"] is None, body

    cluster.kill_broker(other)
    wait_until(lambda: partition_state(leader_url, TOPIC)["isr"] == [leader], SLOW_MACHINE_S, "the ISR to shrink")
    status, body = produce(leader_url, TOPIC, 0, ["only-leader"], acks="1")
    assert status == 200 and body["offsets"][0]["error_code"] is None, body
    cluster.kill_broker(leader)  # the whole ISR is gone now
    cluster.start_broker(other)  # alive, but out of sync
    other_url = cluster.broker_url(other)
    # The killed leader's session must expire before the controller takes the partition offline (leader -1).
    wait_until(lambda: partition_state(other_url, TOPIC)["leader"] == -1, SLOW_MACHINE_S, "the partition to go offline")
    # A produce waits up to its timeout for a leader (as it does right after a topic creation): no clean leader
    # may appear meanwhile, so after 3 s it answers LEADER_NOT_AVAILABLE.
    status, body = produce(other_url, TOPIC, 0, ["x"], timeout_ms=3000)
    assert body["offsets"][0]["error_name"] == "LEADER_NOT_AVAILABLE", body
    assert partition_state(other_url, TOPIC)["leader"] == -1

    cid = request("GET", f"{other_url}/v3/clusters")[1]["data"][0]["cluster_id"]
    config_url = f"{other_url}/v3/clusters/{cid}/topics/{TOPIC}/configs/unclean.leader.election.enable"
    status, _, _ = request("PUT", config_url, {"value": "true"})
    assert status == 204
    wait_until(lambda: partition_state(other_url, TOPIC)["leader"] == other, SLOW_MACHINE_S,
               "the out-of-sync replica to lead")
    assert [r["value"] for r in read_all(other_url, TOPIC)] == ["both"]  # the leader-only record is lost, as allowed


def test_an_unclean_election_by_the_operator_brings_a_leaderless_partition_back(make_cluster: MakeCluster) -> None:
    """kafka-leader-election.sh --election-type unclean (KIP-460): the operator chooses availability for one
    partition whose whole ISR is gone, without changing the topic's config; the leader-only record is lost."""
    import subprocess

    cluster = make_cluster(brokers=2)
    create_topic(cluster.broker_url(1), TOPIC, 1, 2, seen_by=urls(cluster))
    leader = leader_of(cluster)
    other = 1 if leader == 2 else 2
    leader_url = cluster.broker_url(leader)
    assert produce(leader_url, TOPIC, 0, ["both"])[0] == 200
    cluster.kill_broker(other)
    wait_until(lambda: partition_state(leader_url, TOPIC)["isr"] == [leader], SLOW_MACHINE_S, "the ISR to shrink")
    assert produce(leader_url, TOPIC, 0, ["only-leader"], acks="1")[0] == 200
    cluster.kill_broker(leader)
    cluster.start_broker(other)
    other_url = cluster.broker_url(other)
    wait_until(lambda: partition_state(other_url, TOPIC)["leader"] == -1, SLOW_MACHINE_S, "the partition to go offline")
    script = Path(__file__).resolve().parents[2] / "scripts" / "odradek-leader-election.sh"
    done = subprocess.run([str(script), "--bootstrap-server", other_url, "--election-type", "unclean",
                           "--topic", TOPIC, "--partition", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Successfully completed leader election (UNCLEAN) for partitions {TOPIC}-0"
    wait_until(lambda: partition_state(other_url, TOPIC)["leader"] == other, SLOW_MACHINE_S,
               "the out-of-sync replica to lead")
    assert [r["value"] for r in read_all(other_url, TOPIC)] == ["both"]
    cid = request("GET", f"{other_url}/v3/clusters")[1]["data"][0]["cluster_id"]
    status, config, _ = request("GET", f"{other_url}/v3/clusters/{cid}/topics/{TOPIC}/configs/"
                                       "unclean.leader.election.enable")
    assert status == 200 and config["value"] == "false", config  # the topic's policy is unchanged


def test_controlled_shutdown_moves_leadership_with_no_failed_produce(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, session_timeout_ms=8000)
    create_topic(cluster.broker_url(1), TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls(cluster))
    leader = leader_of(cluster)
    producer = SequentialProducer(cluster, count=200)
    producer.start()
    wait_until(lambda: len(producer.acked) >= 50, SLOW_MACHINE_S, "records before the shutdown")
    logs = {b: cluster.cluster.slots[b].log_path for b in cluster.broker_ids()}
    logged = {b: path.stat().st_size for b, path in logs.items()}
    cluster.stop_broker(leader)  # SIGTERM: controlled shutdown
    producer.join(PRODUCER_JOIN_S)
    assert not producer.failed and len(producer.acked) == 200
    new_leader = leader_of(cluster)
    assert new_leader != leader
    # The controller moved the leadership at the broker's request, before it went (not because its registration
    # or session went): the controller says so in its log, whichever broker it is.
    done = f"controlled shutdown of broker {leader}; it still leads []"
    assert any(done in path.read_bytes()[logged[b]:].decode(errors="replace") for b, path in logs.items()), done
    values = [r["value"] for r in read_all(cluster.broker_url(new_leader), TOPIC)]
    assert [v for v in dict.fromkeys(values) if v in set(producer.acked)] == producer.acked


def test_preferred_leaders_come_back_on_request_and_by_auto_rebalance(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, broker_args=["--leader-imbalance-check-interval-seconds", "1"])
    url = cluster.broker_url(1)
    create_topic(url, "manual", 1, 3, seen_by=urls(cluster))
    preferred = int(partition_state(url, "manual")["replicas"][0])
    other_url = cluster.broker_url(next(b for b in (1, 2, 3) if b != preferred))

    cluster.stop_broker(preferred)  # controlled shutdown moves leadership away
    wait_until(lambda: partition_state(other_url, "manual")["leader"] not in (preferred, -1), SLOW_MACHINE_S,
               "the leadership to move off the stopped preferred replica")
    cluster.start_broker(preferred)
    wait_until(lambda: preferred in partition_state(other_url, "manual")["isr"], SLOW_MACHINE_S,
               "the preferred replica in sync")
    # the auto-rebalance (every second here, 10 % imbalance) gives leadership back without being asked
    wait_until(lambda: partition_state(other_url, "manual")["leader"] == preferred, SLOW_MACHINE_S,
               "leadership back on the preferred replica")


def test_preferred_leader_election_on_request(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3, broker_args=["--auto-leader-rebalance-enable", "false",
                                                   "--leader-imbalance-check-interval-seconds", "1"])
    url = cluster.broker_url(1)
    create_topic(url, "manual", 4, 3, seen_by=urls(cluster))  # partitions 0 and 3 share a preferred leader
    victim = int(partition_state(url, "manual", 0)["replicas"][0])
    assert int(partition_state(url, "manual", 3)["replicas"][0]) == victim
    other_url = cluster.broker_url(next(b for b in (1, 2, 3) if b != victim))
    cluster.stop_broker(victim)
    cluster.start_broker(victim)
    for p in (0, 3):
        wait_until(lambda p=p: victim in partition_state(other_url, "manual", p)["isr"], SLOW_MACHINE_S,
                   "the replica in sync")
    # No automatic move when disabled: with checks every second, an enabled rebalance would have moved it.
    hold_for(lambda: partition_state(other_url, "manual", 0)["leader"] != victim, 2.5,
             "partition 0 away from its preferred leader with auto-rebalance disabled")

    status, body, _ = request("POST", f"{other_url}/admin/preferred_leader_election",
                              {"partitions": [{"topic": "manual", "partition": 0}]})
    assert status == 202 and body["accepted"] is True
    wait_until(lambda: partition_state(other_url, "manual", 0)["leader"] == victim, SLOW_MACHINE_S, "partition 0 back")
    assert partition_state(other_url, "manual", 3)["leader"] != victim  # only the listed partition moved
    wait_until(lambda: request("POST", f"{other_url}/admin/preferred_leader_election")[0] == 202, SLOW_MACHINE_S,
               "the first election to finish")
    wait_until(lambda: partition_state(other_url, "manual", 3)["leader"] == victim, SLOW_MACHINE_S,
               "all partitions back")
