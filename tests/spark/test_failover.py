"""A partition leader SIGKILLed while a Spark batch read is fetching from it does not change the result."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from typing import Any

import pytest

from odradek.protocol.records import decode_records, encode_batch
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import partition_state, request
from tests.harness.sockets import socket_inodes
from tests.harness.wait import SLOW_MACHINE_S, wait_until
from tests.spark.conftest import bootstrap, new_topic

pytestmark = pytest.mark.spark

BATCHES = "application/vnd.odradek.batches.v2"
READ_STARTED_BYTES = 8192
"""What a client connection must have received from the leader to show the read is fetching from it: more than
every planning and metadata answer together (JSON of a few hundred bytes each), two or three of the ~3 KB fetch
answers of partition 0's ~400."""


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


def _received_by_clients(cluster: LocalProcessBackend, broker: int) -> dict[int, int]:
    """Bytes each connection to ``broker`` from a client that is neither a broker nor this process (the Spark
    read's Python workers) has received, by socket inode: the kernel's count (``ss -i``; iproute2, as is the ``ip``
    that ``odradek verify`` needs), not the broker's."""
    port = cluster.cluster.slots[broker].port
    others = set().union(*(socket_inodes(pid) for b in cluster.broker_ids() if (pid := cluster.broker_pid(b))),
                         socket_inodes(os.getpid()))
    out = subprocess.run(["ss", "-tineH", "state", "established", "dport", "=", f":{port}"],
                         capture_output=True, text=True, check=True).stdout
    received: dict[int, int] = {}
    inode = 0
    for line in out.splitlines():  # a socket's line, then its tcp_info on an indented line of its own
        if not line[:1].isspace():
            m = re.search(r"\bino:(\d+)", line)
            inode = int(m.group(1)) if m else 0
        elif inode and inode not in others:
            m = re.search(r"\bbytes_received:(\d+)", line)
            received[inode] = int(m.group(1)) if m else 0  # ss leaves the field out while it is 0
    return received


def test_leader_killed_during_batch_read_does_not_change_the_result(spark: Any, make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    topic = new_topic(cluster, partitions=2, rf=3, prefix="failover")
    expected = sorted(_produce_small_batches(cluster, topic, 0, 10_000)
                      + _produce_small_batches(cluster, topic, 1, 2_000))
    leader = partition_state(cluster.broker_url(1), topic, 0)["leader"]
    survivors = [b for b in cluster.broker_ids() if b != leader]

    df = (spark.read.format("odradek")
          .option("bootstrap.servers", bootstrap(cluster))
          .option("subscribe", topic)
          .option("kafka.max.partition.fetch.bytes", "4096")  # one 25-record batch per fetch: ~400 fetches
          .option("kafka.request.timeout.ms", "5000")
          .option("kafkaConsumer.pollTimeoutMs", str(int(SLOW_MACHINE_S * 1000)))  # the failover's deadline
          .load())
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["rows"] = df.select("partition", "offset", "key", "value").collect()
        except BaseException as exc:
            result["error"] = exc

    # The trigger is a count, not a rate: the read has received a few fetch answers from the leader (bytes on
    # its own connections, which no follower's replication and no planning request can add to), however slowly
    # it goes. The leader is frozen at once: partition 0 needs ~400 fetch answers and at most a poll's worth can
    # arrive between the look and the freeze, so the read is certainly unfinished, and stays so until the kill.
    before = _received_by_clients(cluster, leader)
    reader = threading.Thread(target=run)
    reader.start()

    def fetched_from_leader() -> bool:
        now = _received_by_clients(cluster, leader)
        return any(n - before.get(inode, 0) >= READ_STARTED_BYTES for inode, n in now.items())

    wait_until(lambda: not reader.is_alive() or fetched_from_leader(), SLOW_MACHINE_S,
               "the read to receive fetch answers from the leader", interval=0.01)
    cluster.pause_broker(leader)
    assert reader.is_alive(), f"the read ended before the leader was frozen: {result.get('error')}"
    cluster.kill_broker(leader)
    reader.join(timeout=2 * SLOW_MACHINE_S)  # ZooKeeper expiry, election, the rest of the read
    assert not reader.is_alive(), "the read did not finish after the failover"
    assert "error" not in result, result.get("error")

    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in result["rows"])
    assert got == expected
    state = partition_state(cluster.broker_url(survivors[0]), topic, 0)
    wait_until(lambda: partition_state(cluster.broker_url(survivors[0]), topic, 0)["leader"] in survivors,
               SLOW_MACHINE_S, f"a new leader (was {state})")
