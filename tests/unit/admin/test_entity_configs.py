"""The entity config admin service's static configs (broker/admin/entity_configs.py): this broker's start-up
settings under Kafka's names, for its own broker entity only."""

from __future__ import annotations

from pathlib import Path

from broker.admin.entity_configs import DEFAULT_ENTITY, EntityConfigAdmin, static_broker_configs
from broker.config import BrokerConfig


def test_only_this_brokers_entity_has_static_configs() -> None:
    config = BrokerConfig(2, "zk:2181", "10.0.0.2", 9092, Path("/data/b2"), rack="r1")
    admin = EntityConfigAdmin(object(), 2, static_broker_configs(config))  # type: ignore[arg-type]
    static = admin.static_configs("2")
    assert static is not None
    assert static["broker.id"] == "2" and static["log.dirs"] == "/data/b2" and static["broker.rack"] == "r1"
    assert static["listeners"] == "HTTP://10.0.0.2:9092" and static["zookeeper.connect"] == "zk:2181"
    assert admin.static_configs("3") is None and admin.static_configs(DEFAULT_ENTITY) is None
    static["broker.id"] = "changed"  # a copy: callers cannot change what the service answers
    assert admin.static_configs("2")["broker.id"] == "2"  # type: ignore[index]
    assert EntityConfigAdmin(object()).static_configs("2") is None  # type: ignore[arg-type]


def test_the_replication_settings_are_described_under_kafkas_names() -> None:
    config = BrokerConfig(2, "zk:2181", "10.0.0.2", 9092, Path("/data/b2"), replica_fetch_transport="kafka",
                          num_replica_fetchers=3)
    static = static_broker_configs(config)
    assert static["odradek.replica.fetch.transport"] == "kafka" and static["num.replica.fetchers"] == "3"
    assert static["replica.fetch.wait.max.ms"] == "500" and static["replica.fetch.max.bytes"] == str(1024 * 1024)
    assert static["inter.broker.listener.name"] == "null"  # no Kafka listener
    assert static["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-256"
    assert static["max.incremental.fetch.session.cache.slots"] == "1000"
