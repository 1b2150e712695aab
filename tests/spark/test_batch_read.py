"""Batch reads through the connector on a real local Spark against a real cluster: what was produced comes back,
offset options select exactly their ranges, splitting changes tasks but not results, bad options fail clearly."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.spark.conftest import bootstrap, new_topic, produce, read_rows

pytestmark = pytest.mark.spark


def _records(n: int, partitions: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append({
            "value": None if i % 17 == 16 else f"value-{i}".encode() * (1 + i % 3),
            "key": None if i % 4 == 0 else f"key-{i}",
            "partition": i % partitions,
            "timestamp_ms": 1_700_000_000_000 + 1000 * i,
            "headers": [("trace", f"t{i}".encode()), ("empty", None)] if i % 5 == 0 else None,
        })
    return out


@pytest.fixture(scope="module")
def produced(cluster: LocalProcessBackend) -> tuple[str, list[Any]]:
    topic = new_topic(cluster, partitions=3, rf=2, prefix="batch")
    return topic, produce(cluster, topic, _records(90, 3))


def test_batch_read_returns_exactly_what_was_produced(spark: Any, cluster: LocalProcessBackend,
                                                       produced: tuple[str, list[Any]]) -> None:
    topic, records = produced
    got = read_rows(spark, cluster, subscribe=topic)
    assert got == sorted(records)
    assert {p for p, *_ in got} == {0, 1, 2}
    assert any(v is None for _, _, _, v, _, _ in got) and any(k is None for _, _, k, _, _, _ in got)

    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", cluster.broker_url(1))
          .option("subscribe", topic).load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int>")
    row = df.where("partition = 1 AND offset = 0").selectExpr("topic", "timestampType",
                                                              "CAST(value AS STRING) v").first()
    assert (row["topic"], row["timestampType"], row["v"]) == (topic, 0, "value-1value-1")


def test_starting_and_ending_offsets_json(spark: Any, cluster: LocalProcessBackend,
                                          produced: tuple[str, list[Any]]) -> None:
    topic, records = produced
    starting = json.dumps({topic: {"0": 3, "1": -2, "2": 10}})
    ending = json.dumps({topic: {"0": 8, "1": 5, "2": -1}})
    got = read_rows(spark, cluster, subscribe=topic, startingOffsets=starting, endingOffsets=ending)
    bounds = {0: (3, 8), 1: (0, 5), 2: (10, 30)}
    assert got == sorted(r for r in records if bounds[r[0]][0] <= r[1] < bounds[r[0]][1])

    got = read_rows(spark, cluster, assign=json.dumps({topic: [2]}), startingOffsets=json.dumps({topic: {"2": 29}}))
    assert [(p, o) for p, o, *_ in got] == [(2, 29)]


def test_starting_timestamp_finds_the_first_record_at_or_after_it(spark: Any, cluster: LocalProcessBackend,
                                                                  produced: tuple[str, list[Any]]) -> None:
    topic, records = produced
    at = 1_700_000_000_000 + 1000 * 45  # record 45: partition 0, offset 15
    got = read_rows(spark, cluster, subscribe=topic, startingTimestamp=str(at))
    assert got == sorted(r for r in records if r[4] >= at)


def test_split_partitions_read_the_same_records(spark: Any, cluster: LocalProcessBackend,
                                                produced: tuple[str, list[Any]]) -> None:
    topic, records = produced
    reader = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster))
              .option("subscribe", topic).option("maxRecordsPerPartition", "7"))
    df = reader.load()
    assert df.rdd.getNumPartitions() == 3 * 5  # 30 offsets per partition in pieces of at most 7
    assert sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()) == \
        sorted((p, o) for p, o, *_ in records)
    assert read_rows(spark, cluster, subscribe=topic, minPartitions="7") == sorted(records)


def test_bad_options_fail_with_a_message_naming_the_option(spark: Any, cluster: LocalProcessBackend,
                                                           produced: tuple[str, list[Any]]) -> None:
    topic, _ = produced
    base = spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster))
    with pytest.raises(Exception, match="exactly one of 'assign', 'subscribe' and 'subscribePattern'"):
        base.load().collect()
    with pytest.raises(Exception, match="startingOffsets' must list every subscribed partition"):
        (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("subscribe", topic)
         .option("startingOffsets", json.dumps({topic: {"0": 1}})).load().collect())
    with pytest.raises(Exception, match=r"bootstrap\.servers' .* is required"):
        spark.read.format("odradek").option("subscribe", topic).load().collect()


def test_subscribe_pattern_reads_every_matching_topic(spark: Any, cluster: LocalProcessBackend) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    a, b = new_topic(cluster, prefix=f"{prefix}-a"), new_topic(cluster, partitions=2, prefix=f"{prefix}-b")
    other = new_topic(cluster, prefix=f"x{prefix}")
    for topic in (a, b, other):
        produce(cluster, topic, [{"value": f"{topic}-{i}"} for i in range(3)])
    df = (spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster))
          .option("subscribePattern", f"{prefix}-.*").load())
    got = sorted((r["topic"], bytes(r["value"]).decode()) for r in df.select("topic", "value").collect())
    assert got == sorted((t, f"{t}-{i}") for t in (a, b) for i in range(3))
