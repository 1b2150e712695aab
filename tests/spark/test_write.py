"""Writing DataFrames through the connector (batch and streaming) and reading them back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.partitioner import murmur2, to_positive
from tests.harness.cluster import LocalProcessBackend
from tests.spark.conftest import await_query, bootstrap, new_topic, read_rows

pytestmark = pytest.mark.spark

SCHEMA = "key string, value binary, partition int, headers array<struct<key: string, value: binary>>"


def test_dataframe_written_and_read_back_is_the_same(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=3, prefix="write")
    rows = []
    for i in range(60):
        key = None if i % 3 == 0 else f"user-{i % 7}"
        partition = i % 3 if i % 5 == 0 else None
        headers = [("source", b"spark"), ("n", str(i).encode())] if i % 4 == 0 else []
        rows.append((key, b"payload-%d" % i, partition, headers))
    df = spark.createDataFrame(rows, SCHEMA).repartition(2)
    df.write.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("topic", topic) \
        .mode("append").save()

    got = read_rows(spark, cluster, subscribe=topic)
    assert len(got) == len(rows)
    by_value = {v: (p, k, h) for p, _, k, v, _, h in got}
    for key, value, partition, headers in rows:
        p, k, h = by_value[value]
        assert k == (key.encode() if key is not None else None)
        assert h == tuple(headers)
        if partition is not None:
            assert p == partition
        elif key is not None:  # the producer's partitioner: Kafka's murmur2, so keys land where Kafka puts them
            assert p == to_positive(murmur2(key.encode())) % 3
    # per-key order is kept: one key, one partition, offsets in write order within a task
    assert len({p for p, _, k, *_ in got if k == b"user-1"}) == 1


def test_topic_column_routes_rows_and_missing_value_fails_clearly(spark: Any, cluster: LocalProcessBackend) -> None:
    a, b = new_topic(cluster, prefix="route-a"), new_topic(cluster, prefix="route-b")
    df = spark.createDataFrame([(a, "x"), (b, "y"), (a, "z")], "topic string, value string")
    df.write.format("odradek").option("bootstrap.servers", bootstrap(cluster)).mode("append").save()
    assert sorted(v or b"" for *_, v, _, _ in read_rows(spark, cluster, subscribe=a)) == [b"x", b"z"]
    assert [v for *_, v, _, _ in read_rows(spark, cluster, subscribe=b)] == [b"y"]

    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([("k",)], "key string").write.format("odradek") \
            .option("bootstrap.servers", bootstrap(cluster)).option("topic", a).mode("append").save()


def test_streaming_write_copies_a_topic(spark: Any, cluster: LocalProcessBackend, tmp_path: Path) -> None:
    source, sink = new_topic(cluster, partitions=2, prefix="copy-src"), new_topic(cluster, prefix="copy-dst")
    df = spark.createDataFrame([(f"k{i}", f"event-{i}") for i in range(30)], "key string, value string")
    df.write.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("topic", source) \
        .mode("append").save()

    query = (spark.readStream.format("odradek").option("bootstrap.servers", bootstrap(cluster))
             .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "12")
             .load().selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    await_query(query, "the availableNow stream into the sink topic")
    assert query.exception() is None, query.exception()
    got = sorted((k.decode(), v.decode()) for _, _, k, v, _, _ in read_rows(spark, cluster, subscribe=sink)
                 if k is not None and v is not None)
    assert got == sorted((f"k{i}", f"EVENT-{i}") for i in range(30))
