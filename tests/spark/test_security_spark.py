"""The Spark connector on a TLS cluster (docs/security.md, "Spark"): Kafka's security options, a SCRAM user for the
writer and the reader, a client certificate for the reader, and an ACL that keeps a user out."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files
from tests.harness.ports import free_port_block

ZK_DIGEST = "spark-sec:" + uuid.uuid4().hex
ROOT = Path(__file__).resolve().parents[2]


def _tool(cluster: LocalCluster, *args: str) -> None:
    env = dict(os.environ, ODRADEK_ZK_DIGEST=ZK_DIGEST, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "odradek_tools", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def tls_cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("spark-tls"), brokers=2, base_port=free_port_block(2),
                           chroot=f"/spark-tls-{uuid.uuid4().hex[:8]}", ensemble=zk_ensemble, tls=True,
                           zk_digest=ZK_DIGEST)
    try:
        cluster.up(timeout=60)
        _tool(cluster, "configs", "--zookeeper", cluster.zk_connect, "--alter", "--entity-type", "users",
              "--entity-name", "sparky", "--add-config", "SCRAM-SHA-512=[password=spark-pw]")
        for args in (["--topic", "spark-", "--resource-pattern-type", "prefixed"],
                     ["--cluster", "--operation", "IdempotentWrite"]):
            _tool(cluster, "acls", "--zookeeper", cluster.zk_connect, "--add", "--allow-principal", "User:sparky",
                  *args)
        yield cluster
    finally:
        cluster.down()


def test_spark_writes_and_reads_over_tls_with_kafka_options(spark: Any, tls_cluster: LocalCluster) -> None:
    from pyspark.sql import functions as f

    files = admin_files(tls_cluster)
    topic = f"spark-sec-{uuid.uuid4().hex[:6]}"
    from odradek import AdminClient

    with AdminClient(tls_cluster.broker_url(1), **files) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=2)
    scram = {
        "kafka.bootstrap.servers": tls_cluster.broker_url(1),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.location": files["ssl_cafile"],
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="sparky" password="spark-pw";',
    }
    rows = spark.range(100).select(f.col("id").cast("string").alias("key"),
                                   f.concat(f.lit("v"), f.col("id").cast("string")).alias("value"))
    rows.write.format("odradek").options(**scram).option("topic", topic).mode("append").save()

    by_password = spark.read.format("odradek").options(**scram).option("subscribe", topic).load()
    assert sorted(r["value"].decode() for r in by_password.select("value").collect()) == sorted(
        f"v{i}" for i in range(100))
    by_cert = (spark.read.format("odradek").option("kafka.bootstrap.servers", tls_cluster.broker_url(2))
               .option("kafka.security.protocol", "SSL").option("kafka.ssl.cafile", files["ssl_cafile"])
               .option("kafka.ssl.certfile", files["ssl_certfile"]).option("kafka.ssl.keyfile", files["ssl_keyfile"])
               .option("subscribe", topic).load())
    assert by_cert.count() == 100

    denied = {**scram, "kafka.sasl.jaas.config": scram["kafka.sasl.jaas.config"].replace("spark-pw", "wrong")}
    with pytest.raises(Exception, match=r"SASL_AUTHENTICATION_FAILED|authentication failed"):
        spark.read.format("odradek").options(**denied).option("subscribe", topic).load().count()
