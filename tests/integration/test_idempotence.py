"""The idempotent producer (KIP-98) against real ZooKeeper and brokers: through repeated leader SIGKILLs every
record lands exactly once and in order; a duplicate re-sent after a leader change gets its original offsets; a
gap and a fenced epoch are refused; producer state survives a restart; a REST retry with an Idempotency-Key is
not written twice."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from concurrent.futures import Future
from typing import Any

import pytest

from odradek import Producer
from odradek.protocol.records import encode_batch
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import create_topic, partition_state, read_all, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

TOPIC = "idem"
BATCHES = "application/vnd.odradek.batches.v2"
MAX_UNACKED = 1000  # the sending thread's backlog cap (see run below)


def live(cluster: LocalProcessBackend) -> list[int]:
    return [b for b in cluster.broker_ids() if cluster.broker_pid(b) is not None]


def leader_of(cluster: LocalProcessBackend, partition: int = 0) -> int:
    return int(partition_state(cluster.broker_url(live(cluster)[0]), TOPIC, partition)["leader"])


def wait_new_leader(cluster: LocalProcessBackend, old: int, partition: int = 0) -> int:
    def elected() -> int | None:
        try:
            lead = leader_of(cluster, partition)
        except (AssertionError, OSError):
            return None
        return lead if lead >= 0 and lead != old and lead in live(cluster) else None

    return wait_until(elected, SLOW_MACHINE_S, f"a new leader of {TOPIC}-{partition}")  # type: ignore[return-value]


def wait_full_isr(cluster: LocalProcessBackend, partitions: int) -> None:
    def full() -> bool:
        try:
            url = cluster.broker_url(live(cluster)[0])
            return all(len(partition_state(url, TOPIC, p)["isr"]) == 3 for p in range(partitions))
        except (AssertionError, OSError):
            return False

    wait_until(full, SLOW_MACHINE_S, "every partition's ISR back to 3")


def wait_more_sent(futures: list[Any], what: str, more: int = 300) -> None:
    target = len(futures) + more
    wait_until(lambda: len(futures) >= target, SLOW_MACHINE_S, what)


def init_producer(url: str) -> tuple[int, int]:
    status, body, _ = request("POST", f"{url}/producer_ids")
    assert status == 200, body
    return body["producer_id"], body["producer_epoch"]


def send(url: str, data: bytes, partition: int = 0) -> tuple[int, Any]:
    status, body, _ = request("POST", f"{url}/topics/{TOPIC}/partitions/{partition}/batches?acks=all"
                                      f"&timeout_ms={int(SLOW_MACHINE_S * 1000)}",
                              raw=data, content_type=BATCHES, timeout=2 * SLOW_MACHINE_S)
    return status, body


def batch(pid: int, seq: int, n: int = 2, epoch: int = 0, tag: str = "") -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([(None, f"{tag}{seq + i}".encode(), now, ()) for i in range(n)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq)


def test_idempotent_producer_through_repeated_leader_sigkills_writes_each_record_once(
        make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    partitions = 2
    urls = [cluster.broker_url(b) for b in live(cluster)]
    create_topic(urls[0], TOPIC, partitions, 3, {"min.insync.replicas": "2"}, seen_by=urls)
    sent: dict[int, list[str]] = {p: [] for p in range(partitions)}
    futures: list[tuple[int, str, Future[Any]]] = []
    stop = threading.Event()
    producer = Producer(",".join(urls), acks="all", linger_ms=2, retry_backoff_ms=50, request_timeout_ms=5000)
    assert producer.idempotent

    def run() -> None:
        i = 0
        while not stop.is_set():
            p = i % partitions
            value = f"p{p}-{i}"
            sent[p].append(value)
            futures.append((p, value, producer.send(TOPIC, value.encode(), partition=p)))
            i += 1
            if i % 50 == 0:
                time.sleep(0.01)
                # At most MAX_UNACKED records outstanding: how many are sent in all follows what the cluster
                # acknowledges, not how long a slow machine takes, so the final flush has a bounded backlog.
                while len(futures) > MAX_UNACKED and not futures[-MAX_UNACKED][2].done() and not stop.is_set():
                    time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        for _round in range(3):
            wait_more_sent(futures, "records in flight before the kill")
            old = leader_of(cluster)
            cluster.kill_broker(old)
            wait_new_leader(cluster, old)
            wait_more_sent(futures, "records sent under the new leader")
            cluster.start_broker(old)
            wait_full_isr(cluster, partitions)
    finally:
        stop.set()
        thread.join(SLOW_MACHINE_S)
        producer.flush(2 * SLOW_MACHINE_S)
        producer.close()
    failed = [(v, f.exception()) for _, v, f in futures if f.exception() is not None]
    assert not failed, failed[:5]
    url = cluster.broker_url(leader_of(cluster))
    for p in range(partitions):
        values = [r["value"] for r in read_all(url, TOPIC, p)]
        values = [v if isinstance(v, str) else str(v) for v in values]
        duplicates = len(values) - len(set(values))
        assert duplicates == 0, f"partition {p}: {duplicates} duplicates"
        assert values == sent[p], f"partition {p}: gaps or reordering"
    offsets = {(p, v): f.result().offset for p, v, f in futures}
    for p in range(partitions):
        assert [offsets[(p, v)] for v in sent[p]] == list(range(len(sent[p])))  # acks name the real offsets
    print(f"sent {len(futures)} records over {partitions} partitions through 3 leader SIGKILLs: "
          "0 duplicates, 0 gaps")


def test_a_duplicate_after_a_leader_change_gets_its_original_offsets_and_gaps_are_refused(
        make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    urls = [cluster.broker_url(b) for b in live(cluster)]
    create_topic(urls[0], TOPIC, 1, 3, {"min.insync.replicas": "2"}, seen_by=urls)
    pid, epoch = init_producer(urls[1])
    assert init_producer(urls[2])[0] != pid  # blocks from ZooKeeper: never shared
    old = leader_of(cluster)
    first = send(cluster.broker_url(old), batch(pid, 0, tag="a"))
    second = send(cluster.broker_url(old), batch(pid, 2, tag="a"))
    assert first[0] == second[0] == 200, (first, second)
    assert (first[1]["base_offset"], second[1]["base_offset"]) == (0, 2)
    cluster.kill_broker(old)
    new = wait_new_leader(cluster, old)
    status, again = send(cluster.broker_url(new), batch(pid, 0, tag="a"))
    assert status == 200 and (again["base_offset"], again["last_offset"]) == (0, 1), again
    status, again = send(cluster.broker_url(new), batch(pid, 2, tag="a"))
    assert status == 200 and again["base_offset"] == 2, again
    status, gap = send(cluster.broker_url(new), batch(pid, 10, tag="a"))
    assert status == 422 and gap["error"] == "OUT_OF_ORDER_SEQUENCE_NUMBER", gap
    status, ok = send(cluster.broker_url(new), batch(pid, 0, epoch=epoch + 1, tag="b"))
    assert status == 200 and ok["base_offset"] == 4, ok
    status, fenced = send(cluster.broker_url(new), batch(pid, 4, epoch=epoch, tag="a"))
    assert status == 409 and fenced["error"] == "INVALID_PRODUCER_EPOCH", fenced
    values = [r["value"] for r in read_all(cluster.broker_url(new), TOPIC)]
    assert len(values) == 6 and len(set(map(str, values))) == 6


def test_producer_state_survives_a_restart(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=1)
    url = cluster.broker_url(1)
    create_topic(url, TOPIC, 1, 1, seen_by=[url])
    pid, _ = init_producer(url)
    for seq in (0, 2, 4):
        assert send(url, batch(pid, seq))[0] == 200
    cluster.stop_broker(1)  # a clean stop writes the snapshot
    log_dir = cluster.cluster.slots[1].data_dir / f"{TOPIC}-0"
    assert sorted(p.name for p in log_dir.glob("*.snapshot")) == [f"{6:020d}.snapshot"]
    cluster.start_broker(1)
    wait_until(lambda: leader_of(cluster) == 1, SLOW_MACHINE_S, "the broker to lead again")
    status, dup = send(url, batch(pid, 2))
    assert status == 200 and dup["base_offset"] == 2, dup
    assert send(url, batch(pid, 6))[0] == 200  # offsets 6-7: past the snapshot
    cluster.kill_broker(1)  # no clean shutdown: the snapshot at 6 plus the log's tail
    cluster.start_broker(1)
    wait_until(lambda: leader_of(cluster) == 1, SLOW_MACHINE_S, "the broker to lead again")
    status, dup = send(url, batch(pid, 6))
    assert status == 200 and dup["base_offset"] == 6, dup
    status, gap = send(url, batch(pid, 9))
    assert status == 422 and gap["error"] == "OUT_OF_ORDER_SEQUENCE_NUMBER", gap
    assert len(read_all(url, TOPIC)) == 8


def test_a_rest_retry_with_an_idempotency_key_is_not_written_twice(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    urls = [cluster.broker_url(b) for b in live(cluster)]
    create_topic(urls[0], TOPIC, 3, 3, seen_by=urls)
    body = json.dumps({"records": [{"value": {"n": i}} for i in range(5)]}).encode()

    def post(url: str, key: str) -> dict[str, Any]:
        req = urllib.request.Request(f"{url}/topics/{TOPIC}?acks=all", data=body, method="POST",
                                     headers={"Content-Type": "application/vnd.kafka.json.v2+json",
                                              "Idempotency-Key": key})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    first = post(urls[0], "order-42")
    again = post(urls[1], "order-42")  # any broker: it forwards to the same leaders with the key
    assert again["offsets"] == first["offsets"]
    other = post(urls[0], "order-43")
    assert other["offsets"] != first["offsets"]
    total = sum(len(read_all(urls[0], TOPIC, p)) for p in range(3))
    assert total == 10
