"""Fixtures for the Spark connector tests: one real local SparkSession and one real 3-broker cluster per session.

Why one of each: a SparkSession costs about 5 s to start and its first Python data-source action another 5 s,
and a cluster a few seconds more, so every test shares them and uses topics of its own. The environment
variables must be set before the JVM starts: PYSPARK_PYTHON makes the Python workers run this venv (which has
pyarrow and the project installed in editable mode), SPARK_LOCAL_IP keeps Spark on the loopback interface.
Tests that break the cluster (SIGKILL a broker) take a cluster of their own from ``make_cluster``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic
from tests.harness.wait import SLOW_MACHINE_S

SPARK_QUERY_S = 3 * SLOW_MACHINE_S
"""The deadline for a Trigger.AvailableNow query to run to its end: a few micro-batches, each a Spark job with
planning, Python workers and a commit to the checkpoint, so several times what one step of the system gets."""


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # No odradek_spark.register(session): Spark finds the source by itself (pyspark_odradek, SPARK-45917).
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """Three brokers shared by the Spark tests that leave it intact (each uses topics of its own)."""
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("spark-cluster"), "spark", 3)
    yield backend
    backend.close()


def await_query(query: Any, what: str) -> None:
    """Wait up to :data:`SPARK_QUERY_S` for a streaming ``query`` to terminate; its failure is raised as is.

    A query still running at the deadline is stopped (the SparkSession is shared, so it must not go on into the
    next test) and the test fails naming ``what``: otherwise a timeout would surface as wrong counts later on.
    """
    if not query.awaitTermination(SPARK_QUERY_S):  # a bool when given a timeout: whether it terminated
        query.stop()
        raise AssertionError(f"timed out after {SPARK_QUERY_S:.0f} s waiting for {what} to terminate")


def bootstrap(c: LocalProcessBackend) -> str:
    """Every broker's address, as a user would pass bootstrap.servers."""
    return ",".join(c.broker_url(b) for b in c.broker_ids())


def new_topic(c: LocalProcessBackend, partitions: int = 1, rf: int = 1, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    urls = [c.broker_url(b) for b in c.broker_ids()]
    create_topic(urls[0], name, partitions, rf, seen_by=urls)
    return name


Produced = tuple[int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def produce(c: LocalProcessBackend, topic: str, records: list[dict[str, Any]]) -> list[Produced]:
    """Send records with the client's Producer; return (partition, offset, key, value, timestamp, headers) each.

    A record is a dict of Producer.send keyword arguments (``value``, ``key``, ``partition``, ``timestamp_ms``,
    ``headers``).
    """
    from odradek.client import Producer

    with Producer(bootstrap(c), linger_ms=1) as producer:
        futures = [producer.send(topic, **r) for r in records]
        producer.flush(120)  # a hang becomes a TimeoutError the caller reports
        out = []
        for r, fut in zip(records, futures, strict=True):
            meta = fut.result(timeout=30)
            key = r.get("key")
            value = r.get("value")
            out.append((meta.partition, meta.offset, key.encode() if isinstance(key, str) else key,
                        value.encode() if isinstance(value, str) else value, meta.timestamp,
                        tuple(r.get("headers") or ())))
    return out


def read_rows(spark: Any, c: LocalProcessBackend, **options: str) -> list[Produced]:
    """A batch read through the connector, as the same tuples :func:`produce` returns, sorted."""
    reader = spark.read.format("odradek").option("bootstrap.servers", bootstrap(c)).option("includeHeaders", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load().selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ts",
                                    "headers", "timestampType", "topic").collect()
    return sorted(
        (r["partition"], r["offset"], r["key"] and bytes(r["key"]), r["value"] and bytes(r["value"]), r["ts"],
         tuple((h["key"], h["value"] and bytes(h["value"])) for h in r["headers"] or ()))
        for r in rows
    )
