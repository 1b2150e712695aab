"""A partition leader SIGKILLed while a Spark batch read is fetching from it does not change the result."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from odradek.protocol.records import decode_records, encode_batch
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import partition_state, request
from tests.harness.sockets import ESTABLISHED, socket_inodes, tcp_sockets
from tests.harness.wait import SLOW_MACHINE_S, wait_at_most, wait_until
from tests.spark.conftest import bootstrap, new_topic

pytestmark = pytest.mark.spark

BATCHES = "application/vnd.odradek.batches.v2"
ROUTE = re.compile(r'odradek_http_requests_total\{route="/topics/\{topic\}/partitions/\{partition\}/batches",'
                   r'status="200"\} ([0-9.e+]+)')


def _produce_small_batches(c: LocalProcessBackend, topic: str, partition: int, count: int) -> list[tuple]:
    """Many 25-record batches (acks=all), so a read with a small fetch size needs hundreds of fetches."""
    leader = c.broker_url(partition_state(c.broker_url(1), topic, partition)["leader"])
    for start in range(0, count, 25):
        batch = encode_batch([(b"k%d" % i, b"v%06d-" % i + b"." * 100, 1_700_000_000_000 + i, [])
                              for i in range(start, min(start + 25, count))])
        status, body, _ = request("POST", f"{leader}/topics/{topic}/partitions/{partition}/batches?acks=all",
                                  raw=batch, content_type=BATCHES)
        assert status == 200, body
    out: list[tuple] = []
    offset = 0
    while offset < count:
        status, data, _ = request("GET", f"{leader}/topics/{topic}/partitions/{partition}/batches?offset={offset}")
        assert status == 200
        recs = decode_records(data)
        out.extend((partition, r.offset, r.key, r.value) for r in recs if r.offset >= offset)
        offset = recs[-1].offset + 1
    return out


def _batch_fetches(url: str) -> float:
    _, body, _ = request("GET", f"{url}/metrics")
    text = body.decode() if isinstance(body, bytes) else str(body)
    m = ROUTE.search(text)
    return float(m.group(1)) if m else 0.0


def _request_queued_at(cluster: LocalProcessBackend, broker: int) -> bool:
    """A client that is not a broker (the Spark read) has sent ``broker`` a request it has not read yet."""
    port = cluster.cluster.slots[broker].port
    brokers = set().union(*(socket_inodes(pid) for b in cluster.broker_ids() if (pid := cluster.broker_pid(b))))
    sockets = tcp_sockets()
    clients = {(s.local_port, s.remote_port): s for s in sockets}
    for s in sockets:
        if s.local_port == port and s.state == ESTABLISHED and s.rx_queue > 0:
            client = clients.get((s.remote_port, port))
            if client is not None and client.inode not in brokers:
                return True
    return False


def test_leader_killed_during_batch_read_does_not_change_the_result(spark: Any, make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    topic = new_topic(cluster, partitions=2, rf=3, prefix="failover")
    expected = sorted(_produce_small_batches(cluster, topic, 0, 10_000)
                      + _produce_small_batches(cluster, topic, 1, 2_000))
    leader = partition_state(cluster.broker_url(1), topic, 0)["leader"]
    leader_url = cluster.broker_url(leader)
    survivors = [b for b in cluster.broker_ids() if b != leader]

    df = (spark.read.format("odradek")
          .option("bootstrap.servers", bootstrap(cluster))
          .option("subscribe", topic)
          .option("kafka.max.partition.fetch.bytes", "4096")  # one 25-record batch per fetch: ~400 fetches
          .option("kafka.request.timeout.ms", "5000")
          .option("kafkaConsumer.pollTimeoutMs", "60000")
          .load())
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["rows"] = df.select("partition", "offset", "key", "value").collect()
        except BaseException as exc:
            result["error"] = exc

    reader = threading.Thread(target=run)
    reader.start()
    # Wait until the read is fetching from the leader (followers' fetches tick the same counter, but only a
    # couple of times a second when caught up), freeze it so a fetch is certainly hanging on it, then kill it.
    last = _batch_fetches(leader_url)

    def reading() -> bool:
        nonlocal last
        now = _batch_fetches(leader_url)
        busy, last = now - last >= 5, now
        return busy

    wait_until(reading, SLOW_MACHINE_S, "the read to fetch from the leader", interval=0.03)
    cluster.pause_broker(leader)
    # Evidence that the read hangs on the frozen leader: one of its requests sits there unread. (If the leader
    # froze while handling one, the read already hangs on that one, invisibly: then this waits out its 1 s.)
    wait_at_most(lambda: _request_queued_at(cluster, leader), 1.0)
    assert reader.is_alive(), "the read finished before the leader was killed"
    cluster.kill_broker(leader)
    reader.join(timeout=2 * SLOW_MACHINE_S)  # ZooKeeper expiry, election, the rest of the read
    assert not reader.is_alive(), "the read did not finish after the failover"
    assert "error" not in result, result.get("error")

    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in result["rows"])
    assert got == expected
    state = partition_state(cluster.broker_url(survivors[0]), topic, 0)
    wait_until(lambda: partition_state(cluster.broker_url(survivors[0]), topic, 0)["leader"] in survivors,
               SLOW_MACHINE_S, f"a new leader (was {state})")
