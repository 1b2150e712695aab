"""The connector's ``isolation.level``: read_committed never surfaces an aborted transaction's records, nor those of
a transaction still open (the read ends at the last stable offset); read_uncommitted surfaces both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odradek import Producer
from tests.harness.cluster import LocalProcessBackend
from tests.spark.conftest import await_query, bootstrap, new_topic, read_rows

pytestmark = pytest.mark.spark


def test_read_committed_hides_aborted_and_open_transactions_read_uncommitted_does_not(
        spark: Any, cluster: LocalProcessBackend, tmp_path: Path) -> None:
    topic = new_topic(cluster, partitions=2, rf=3, prefix="txn-spark")
    p = Producer(bootstrap(cluster), transactional_id=f"spark-{topic}", linger_ms=1)
    p.init_transactions()
    p.begin_transaction()
    for i in range(10):
        p.send(topic, f"aborted-{i}".encode(), partition=i % 2)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    for i in range(6):
        p.send(topic, f"committed-{i}".encode(), partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()  # left open while Spark reads: past the last stable offset
    for i in range(4):
        p.send(topic, f"open-{i}".encode(), partition=i % 2)
    p.flush()
    try:
        committed = read_rows(spark, cluster, subscribe=topic, **{"isolation.level": "read_committed"})
        assert sorted(v for *_, v, _, _ in committed) == sorted(f"committed-{i}".encode() for i in range(6))
        kafka_style = read_rows(spark, cluster, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
        assert kafka_style == committed

        everything = [v or b"" for *_, v, _, _ in read_rows(spark, cluster, subscribe=topic)]
        assert len(everything) == 20
        assert sum(v.startswith(b"aborted") for v in everything) == 10
        assert sum(v.startswith(b"open") for v in everything) == 4

        # A streaming query (Trigger.AvailableNow) plans its end offsets from the LSO too.
        name = f"committed_{topic.replace('-', '_')}"
        query = (spark.readStream.format("odradek").option("bootstrap.servers", bootstrap(cluster))
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("isolation.level", "read_committed").load()
                 .selectExpr("value").writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        await_query(query, "the read_committed streaming query")
        assert query.exception() is None, query.exception()
        streamed = sorted(bytes(r["value"]) for r in spark.sql(f"SELECT value FROM {name}").collect())
        assert streamed == sorted(f"committed-{i}".encode() for i in range(6))
    finally:
        p.abort_transaction()
        p.close()
    # Once the open transaction is aborted, read_committed still shows only the committed six.
    after = read_rows(spark, cluster, subscribe=topic, **{"isolation.level": "read_committed"})
    assert sorted(v for *_, v, _, _ in after) == sorted(f"committed-{i}".encode() for i in range(6))


def test_an_exactly_once_batch_write_is_committed_by_the_driver(spark: Any, cluster: LocalProcessBackend) -> None:
    topic = new_topic(cluster, partitions=2, rf=3, prefix="eo-batch")
    df = spark.createDataFrame([(f"v-{i}",) for i in range(30)], "value string").repartition(3)
    df.write.format("odradek").option("bootstrap.servers", bootstrap(cluster)).option("topic", topic) \
        .option("exactlyOnce", "true").mode("append").save()
    got = read_rows(spark, cluster, subscribe=topic, **{"isolation.level": "read_committed"})
    assert sorted(v for *_, v, _, _ in got) == sorted(f"v-{i}".encode() for i in range(30))


def test_an_unknown_isolation_level_is_refused_on_the_driver(spark: Any, cluster: LocalProcessBackend) -> None:
    with pytest.raises(Exception, match=r"isolation\.level"):
        spark.read.format("odradek").option("bootstrap.servers", bootstrap(cluster)) \
            .option("subscribe", "x").option("isolation.level", "serializable").load().collect()
