"""A Spark batch read through the connector on either cluster backend (``--backend`` / ODRADEK_TEST_BACKEND):
on the containers backend, Spark on the host reads from broker containers at the URLs they advertise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.cluster import ClusterBackend
from tests.spark.conftest import new_topic, produce, read_rows

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.backend]


def test_spark_batch_read_returns_what_was_produced(spark: Any,
                                                    make_backend_cluster: Callable[..., ClusterBackend]) -> None:
    cluster = make_backend_cluster(brokers=3)
    topic = new_topic(cluster, partitions=2, rf=2, prefix="backend")  # type: ignore[arg-type]
    records = [{"value": f"v{i}".encode(), "key": f"k{i}", "partition": i % 2, "timestamp_ms": 1_700_000_000_000 + i,
                "headers": [("n", str(i).encode())]} for i in range(40)]
    produced = produce(cluster, topic, records)  # type: ignore[arg-type]
    got = read_rows(spark, cluster, subscribe=topic)  # type: ignore[arg-type]
    assert got == sorted(produced)
    assert {p for p, *_ in got} == {0, 1}
