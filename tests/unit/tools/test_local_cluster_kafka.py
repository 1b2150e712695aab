"""The local cluster's Kafka listeners (odradek_local/cluster.py), without starting anything: PLAINTEXT on a plaintext
cluster, SASL_SSL on a TLS one (the HTTPS listeners' certificates), more listeners on request, and all of it kept
across ``cluster.json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek_local.cluster import ClusterError, LocalCluster


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_a_plaintext_cluster_has_plaintext_kafka_listeners(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2, base_port=18082, kafka_base_port=19092)
    assert flag(cluster.broker_command(2), "--kafka-listeners") == "PLAINTEXT://127.0.0.1:19093"
    assert cluster.kafka_bootstrap == "127.0.0.1:19092,127.0.0.1:19093"


def test_a_tls_cluster_has_sasl_ssl_kafka_listeners_with_the_https_certificates(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=3, base_port=18082, kafka_base_port=19092, tls=True)
    command = cluster.broker_command(1)
    assert flag(command, "--kafka-listeners") == "SASL_SSL://127.0.0.1:19092"
    assert flag(command, "--ssl-certfile").endswith("tls/broker-1.pem")
    assert cluster.kafka_bootstrap_for("SASL_SSL") == cluster.kafka_bootstrap == \
        "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert cluster.kafka_bootstrap_for("PLAINTEXT") is None


def test_more_kafka_listeners_on_request_and_they_survive_a_reload(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2, base_port=18082, kafka_base_port=19092, tls=True,
                           kafka_protocols=("SASL_SSL", "SSL", "SASL_PLAINTEXT"))
    listeners = cluster.slots[2].kafka_listeners
    assert list(listeners) == ["SASL_SSL", "SSL", "SASL_PLAINTEXT"] and listeners["SASL_SSL"] == 19093
    assert len(set(listeners.values())) == 3
    assert flag(cluster.broker_command(2), "--kafka-listeners") == ",".join(
        f"{p}://127.0.0.1:{port}" for p, port in listeners.items())
    cluster.ensemble.save()
    cluster.save()
    again = LocalCluster.load(tmp_path)
    assert again.kafka_protocols == cluster.kafka_protocols
    assert {b: s.kafka_listeners for b, s in again.slots.items()} == {b: s.kafka_listeners
                                                                        for b, s in cluster.slots.items()}


@pytest.mark.parametrize("protocols", [("SSL",), ("SASL_SSL",), ("PLAINTEXT", "PLAINTEXT"), ("TLS",)])
def test_tls_listeners_need_a_tls_cluster_and_protocols_are_kafkas(tmp_path: Path, protocols: tuple[str, ...]) -> None:
    with pytest.raises(ClusterError, match="each protocol once"):
        LocalCluster(tmp_path, brokers=1, kafka_base_port=19092, kafka_protocols=protocols)
