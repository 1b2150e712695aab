"""A consumer at the tail never goes back while the partition's leader is SIGKILLed again and again.

A fault run's group member rewound partition 1 from offset 14222 to 0 within one generation: the new leader's
high watermark lagged the old leader's, it called the consumer's position OFFSET_OUT_OF_RANGE, and the consumer
applied auto_offset_reset="earliest". Here a producer writes continuously (acks=all, RF 3, min.insync.replicas=2)
while a consumer reads at the tail and the leader is killed (and restarted) three times; every record the
consumer is handed must come after the one before (positions move back only by an explicit seek, and there is
none), and in the end it must have read everything acknowledged.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from odradek import AdminClient, Consumer, Producer, TopicPartition
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import partition_state
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

KILLS = 3


def live_url(cluster: LocalProcessBackend) -> str:
    return next(cluster.broker_url(b) for b in cluster.broker_ids() if cluster.broker_pid(b) is not None)


class Writer(threading.Thread):
    """Sends v0, v1, ... as fast as acks=all allows; records what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50, request_timeout_ms=5000)
        self.topic, self.stop, self.acked, self.sent = topic, stop, [], 0

    def run(self) -> None:
        while not self.stop.is_set():
            futures = [self.producer.send(self.topic, f"v{self.sent + i}", partition=0) for i in range(20)]
            self.sent += 20
            for f in futures:
                with contextlib.suppress(Exception):  # a failed send is fine here: only reads are checked
                    self.acked.append(f.result(timeout=60).offset)
            time.sleep(0.005)


def test_a_tail_consumer_never_rewinds_across_leader_kills(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(brokers=3)
    bootstrap = ",".join(cluster.broker_url(b) for b in cluster.broker_ids())
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
    tp = TopicPartition(topic, 0)
    stop = threading.Event()
    writer = Writer(bootstrap, topic, stop)
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100, retry_backoff_ms=50)
    consumer.assign([tp])
    seen: list[int] = []
    rewinds: list[tuple[int, int]] = []

    def consume_once() -> None:
        for records in consumer.poll(timeout_ms=100).values():
            for r in records:
                if seen and r.offset <= seen[-1]:
                    rewinds.append((seen[-1], r.offset))
                seen.append(r.offset)

    def consume_until(done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + SLOW_MACHINE_S
        while not done():
            assert time.monotonic() < deadline, f"timed out after {SLOW_MACHINE_S:.0f} s waiting for {what}"
            consume_once()

    def catch_up(what: str) -> None:
        """Read, until the writer has had records acknowledged since now and the consumer has read up to them:
        the consumer is then at the tail, whatever the machine's speed."""
        before = len(writer.acked)
        consume_until(lambda: len(writer.acked) > before, f"records acknowledged {what}")
        target = max(writer.acked)
        consume_until(lambda: bool(seen) and seen[-1] >= target, f"the consumer to reach offset {target} {what}")

    writer.start()
    try:
        catch_up("before the first kill")
        for _ in range(KILLS):
            leader = int(partition_state(live_url(cluster), topic)["leader"])
            cluster.kill_broker(leader)
            wait_until(lambda dead=leader: int(partition_state(live_url(cluster), topic)["leader"]) not in (-1, dead),
                       SLOW_MACHINE_S, "a new leader")
            catch_up("by the new leader")  # at the tail, against the new leader whose high watermark may lag
            cluster.start_broker(leader)
            wait_until(lambda: len(partition_state(live_url(cluster), topic)["isr"]) == 3, SLOW_MACHINE_S,
                       "the ISR full again")
            catch_up("with the ISR full again")
        stop.set()
        writer.join(3 * SLOW_MACHINE_S)  # its last round: 20 sends, each awaited for up to 60 s
        writer.producer.close(timeout=SLOW_MACHINE_S)
        final = max(writer.acked) if writer.acked else -1
        deadline = time.monotonic() + SLOW_MACHINE_S
        while (not seen or seen[-1] < final) and time.monotonic() < deadline:
            consume_once()
    finally:
        stop.set()
        consumer.close()
    assert not rewinds, f"the consumer went back (from, to): {rewinds[:5]}"
    assert writer.acked and seen and seen[-1] >= max(writer.acked), "the consumer did not reach the acknowledged end"
    assert set(writer.acked) <= set(seen)
