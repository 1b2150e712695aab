"""Spark finds the connector by itself after ``pip install`` (SPARK-45917), with no ``register`` call.

PySpark 4 discovers top-level ``pyspark_<name>`` modules whose ``DefaultSource`` is a ``DataSource``
(pyspark/sql/worker/lookup_data_sources.py). The discovery runs once per JVM, so the check runs in a fresh
Python and JVM that never import ``odradek_spark`` or ``pyspark_odradek`` in the driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.harness.cluster import LocalProcessBackend
from tests.spark.conftest import bootstrap, new_topic, produce

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    servers, source, sink = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("odradek").option("bootstrap.servers", servers).option("subscribe", source).load()
    values = sorted(bytes(r["value"]).decode() for r in df.select("value").collect())
    df.selectExpr("upper(cast(value AS string)) AS value").write.format("odradek") \\
        .option("bootstrap.servers", servers).option("topic", sink).mode("append").save()
    back = spark.read.format("odradek").option("bootstrap.servers", servers).option("subscribe", sink).load()
    written = sorted(bytes(r["value"]).decode() for r in back.select("value").collect())
    assert "odradek_spark" not in sys.modules and "pyspark_odradek" not in sys.modules
    print(json.dumps({"read": values, "written": written}))
    spark.stop()
    """
)


def test_a_session_that_never_registers_reads_and_writes(cluster: LocalProcessBackend) -> None:
    source, sink = new_topic(cluster, partitions=2, prefix="auto-src"), new_topic(cluster, prefix="auto-sink")
    produce(cluster, source, [{"value": f"v{i}"} for i in range(20)])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, "-c", SCRIPT, bootstrap(cluster), source, sink], env=env,
                          capture_output=True, text=True, timeout=240, cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["read"] == sorted(f"v{i}" for i in range(20))
    assert result["written"] == sorted(f"V{i}" for i in range(20))
