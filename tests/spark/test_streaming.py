"""Structured Streaming through the connector: exactly-once output into a file sink across a restart (including
the replay of a micro-batch that was planned but not committed), maxOffsetsPerTrigger, Trigger.AvailableNow and
partitions added while a query runs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AdminClient
from tests.harness.cluster import LocalProcessBackend, wait_until
from tests.harness.wait import SLOW_MACHINE_S
from tests.spark.conftest import await_query, bootstrap, new_topic, produce

pytestmark = pytest.mark.spark


def _stream(spark: Any, c: LocalProcessBackend, topic: str, **options: str) -> Any:
    reader = (spark.readStream.format("odradek").option("bootstrap.servers", bootstrap(c))
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _progress(query: Any) -> list[tuple[int, int]]:
    """(batch id, rows) of every micro-batch that read something."""
    return [(p.batchId, p.numInputRows) for p in query.recentProgress if p.numInputRows]


def test_file_sink_restarted_from_checkpoint_writes_each_record_once(spark: Any, cluster: LocalProcessBackend,
                                                                     tmp_path: Path) -> None:
    topic = new_topic(cluster, partitions=2, prefix="stream-file")
    records = produce(cluster, topic, [{"value": f"a{i}", "partition": i % 2} for i in range(40)])
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def run() -> Any:
        query = (_stream(spark, cluster, topic, maxOffsetsPerTrigger="15")
                 .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        await_query(query, "the file-sink query")
        assert query.exception() is None, query.exception()
        return query

    first = _progress(run())
    assert [n for _, n in first] == [15, 15, 10]
    last_batch, last_rows = max(first)

    # A crash after the last micro-batch was planned (offsets/N written) but before it committed: Spark must
    # re-run batch N over the same offset range, and the source must return the same records for it.
    for path in (checkpoint / "commits" / str(last_batch), out / "_spark_metadata" / str(last_batch)):
        path.unlink()
        (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    records += produce(cluster, topic, [{"value": f"b{i}", "partition": i % 2} for i in range(25)])

    second = _progress(run())
    assert second[0] == (last_batch, last_rows), second  # the replayed batch, same size
    assert sum(n for _, n in second) == last_rows + 25

    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r["partition"], r["offset"], r["value"]) for r in rows)
    assert got == sorted((p, o, (v or b"").decode()) for p, o, _, v, _, _ in records)  # each record exactly once


def test_max_offsets_per_trigger_holds_with_available_now(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=3, prefix="stream-limit")
    produce(cluster, topic, [{"value": f"v{i}", "partition": 0 if i < 25 else 1 + i % 2} for i in range(37)])
    name = f"limit_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, cluster, topic, maxOffsetsPerTrigger="8")
             .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    await_query(query, "the maxOffsetsPerTrigger query")
    assert query.exception() is None, query.exception()
    sizes = [n for _, n in _progress(query)]
    assert sizes and all(n <= 8 for n in sizes), sizes
    assert sum(sizes) == 37 and len(sizes) == 5, sizes
    assert spark.sql(f"SELECT count(DISTINCT partition, offset) AS n FROM {name}").first()["n"] == 37


def test_partitions_added_while_a_query_runs_are_picked_up(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=1, prefix="stream-grow")
    produce(cluster, topic, [{"value": f"v{i}"} for i in range(5)])
    name = f"grow_{uuid.uuid4().hex[:8]}"
    query = (_stream(spark, cluster, topic).selectExpr("partition", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName(name).trigger(processingTime="300 milliseconds").start())
    try:
        def rows() -> list[tuple[int, str]]:
            return sorted((r["partition"], r["value"]) for r in spark.sql(f"SELECT * FROM {name}").collect())

        wait_until(lambda: len(rows()) == 5, SLOW_MACHINE_S, "the first records")
        with AdminClient(bootstrap(cluster)) as admin:
            admin.add_partitions(topic, 3)
        urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
        from tests.harness.http import metadata

        wait_until(lambda: all(len(metadata(u, topic)["partitions"]) == 3 and
                               all(p["leader"] >= 0 for p in metadata(u, topic)["partitions"]) for u in urls),
                   SLOW_MACHINE_S, "the new partitions")
        produce(cluster, topic, [{"value": f"new{p}", "partition": p} for p in (1, 2)])
        wait_until(lambda: len(rows()) == 7, SLOW_MACHINE_S, "records of the new partitions")
        assert rows()[-2:] == [(1, "new1"), (2, "new2")]
        assert query.exception() is None
    finally:
        query.stop()
