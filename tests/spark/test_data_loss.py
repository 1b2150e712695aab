"""failOnDataLoss: offsets a query planned to read that the cluster no longer has (or never gets) fail the query by
default, and are skipped with a warning when the option is false."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AdminClient
from tests.harness.cluster import LocalProcessBackend, wait_until
from tests.harness.http import create_topic, metadata
from tests.harness.wait import SLOW_MACHINE_S
from tests.spark.conftest import await_query, bootstrap, new_topic, produce, read_rows

pytestmark = pytest.mark.spark


def test_planned_offsets_that_never_arrive_are_data_loss(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, prefix="loss-end")
    produce(cluster, topic, [{"value": f"v{i}"} for i in range(6)])
    options = {"subscribe": topic, "endingOffsets": json.dumps({topic: {"0": 9}}),
               "kafkaConsumer.pollTimeoutMs": "1500"}
    with pytest.raises(Exception, match="failOnDataLoss"):
        read_rows(spark, cluster, **options)
    assert [o for _, o, *_ in read_rows(spark, cluster, failOnDataLoss="false", **options)] == list(range(6))


def test_topic_recreated_under_a_streaming_query(spark: Any, cluster: LocalProcessBackend, tmp_path: Path) -> None:
    topic = new_topic(cluster, prefix="loss-recreate")
    produce(cluster, topic, [{"value": f"old{i}"} for i in range(8)])
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def run(fail_on_data_loss: str) -> BaseException | None:
        """One Trigger.AvailableNow run from the checkpoint; the query's failure, if any."""
        query = (spark.readStream.format("odradek").option("bootstrap.servers", bootstrap(cluster))
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("failOnDataLoss", fail_on_data_loss).load()
                 .selectExpr("offset", "CAST(value AS STRING) AS value")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        from pyspark.errors import StreamingQueryException

        try:
            await_query(query, f"the failOnDataLoss={fail_on_data_loss} run")
        except StreamingQueryException as exc:  # the query failed (a timeout is the test's failure, not this)
            return exc
        return query.exception()

    assert run("true") is None

    # The topic goes away and comes back shorter: offsets 3..7 the checkpoint has read past are gone.
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    with AdminClient(bootstrap(cluster)) as admin:
        admin.delete_topic(topic)
    wait_until(lambda: all(metadata(u, topic)["error"] == "UNKNOWN_TOPIC" for u in urls), SLOW_MACHINE_S,
               "the topic to go")
    create_topic(urls[0], topic, 1, 1, seen_by=urls)
    produce(cluster, topic, [{"value": f"new{i}"} for i in range(3)])

    failed = run("true")
    assert failed is not None
    assert "went back from 8 to 3" in str(failed) and "failOnDataLoss" in str(failed)

    assert run("false") is None  # goes on from the new end instead
    produce(cluster, topic, [{"value": "after"}])
    assert run("false") is None
    values = sorted(r["value"] for r in spark.read.parquet(str(out)).collect())
    assert values == sorted([f"old{i}" for i in range(8)] + ["after"])
