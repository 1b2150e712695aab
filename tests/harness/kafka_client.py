"""Reading a partition with confluent-kafka (librdkafka) from a cluster's Kafka listener, for the tests that check
what a Kafka client sees of records written another way (the REST Proxy, Spark)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.harness.cluster import LocalProcessBackend
from tests.harness.wait import SLOW_MACHINE_S


def kafka_values(c: LocalProcessBackend, topic: str, n: int,
                 decode: Callable[[bytes], Any] = lambda v: v) -> list[Any]:
    """The first ``n`` values of ``topic``'s partition 0 through confluent-kafka's Consumer, each passed through
    ``decode`` (a Confluent deserializer, say), within a slow machine's deadline."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + SLOW_MACHINE_S
        while len(got) < n:
            assert time.monotonic() < deadline, f"read {len(got)} of {n} records"
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(decode(m.value()))
    finally:
        consumer.close()
    return got
