"""Broker dynamic configs and client/user quotas: the service the HTTP API calls (the API never imports zk/).

As broker/admin/topics.py does for topics, this sits between the handlers (broker/api/entity_configs.py) and
the ZooKeeper verbs (zk/configs.py, which validate names, keys and values and write the config node and its
change notification in one multi). It also answers this broker's static configs (its start-up settings under
Kafka's names, what ``kafka-configs --describe --all`` adds to the dynamic ones). Methods that read or write
ZooKeeper block; front doors call them with ``asyncio.to_thread``. ``static_configs`` reads memory only.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.config import BrokerConfig
from broker.replication.leader_endpoint import FetchSettings
from zk.client import ZkClient
from zk.configs import DEFAULT_ENTITY, EntityConfigs

__all__ = ["DEFAULT_ENTITY", "EntityConfigAdmin", "static_broker_configs"]


def static_broker_configs(c: BrokerConfig) -> dict[str, str]:
    """A broker's start-up settings under Kafka's names."""
    fetch = FetchSettings()
    try:
        listener = c.kafka_inter_broker_listener()
    except ValueError:  # a name no listener has: the broker refuses to start with it anyway
        listener = None
    return {
        "broker.id": str(c.broker_id), "zookeeper.connect": c.zk_connect, "log.dirs": str(c.data_dir),
        "listeners": f"HTTP://{c.host}:{c.port}", "broker.rack": c.rack or "null",
        "zookeeper.session.timeout.ms": str(c.zk_session_timeout_ms),
        "replica.lag.time.max.ms": str(c.replica_lag_time_max_ms),
        "log.retention.check.interval.ms": str(c.log_retention_check_interval_ms),
        "auto.leader.rebalance.enable": str(c.auto_leader_rebalance_enable).lower(),
        "leader.imbalance.check.interval.seconds": str(int(c.leader_imbalance_check_interval_s)),
        "leader.imbalance.per.broker.percentage": str(c.leader_imbalance_per_broker_percentage),
        # How followers replicate: Odradek's transport choice, then Kafka's fetcher settings (the fetch settings
        # are fixed today: FetchSettings' defaults, Kafka's own defaults but for the wait).
        "odradek.replica.fetch.transport": c.effective_replica_fetch_transport(),
        "num.replica.fetchers": str(c.num_replica_fetchers),
        "replica.fetch.wait.max.ms": str(fetch.max_wait_ms),
        "replica.fetch.min.bytes": str(fetch.min_bytes),
        "replica.fetch.response.max.bytes": str(fetch.max_bytes),
        "replica.fetch.max.bytes": str(fetch.partition_max_bytes),
        "inter.broker.listener.name": listener.name if listener is not None else "null",
        "sasl.mechanism.inter.broker.protocol": c.sasl_mechanism_inter_broker_protocol,
        "max.incremental.fetch.session.cache.slots": str(c.max_incremental_fetch_session_cache_slots),
        "min.incremental.fetch.session.eviction.ms": str(c.min_incremental_fetch_session_eviction_ms),
    }


class EntityConfigAdmin(EntityConfigs):
    """describe / list_entities / alter of /config/{brokers,clients,users}/<name> (see zk.configs), and this
    broker's static configs. Its reads follow a ZooKeeper ``sync``: an admin request after one made through
    another broker sees it, whichever ZooKeeper server this broker's session reads."""

    fresh_reads = True

    def __init__(self, zk: ZkClient, broker_id: int | None = None, static: Mapping[str, str] | None = None) -> None:
        """``broker_id`` and ``static``: this broker's id and start-up settings (:func:`static_broker_configs`);
        without them no broker has static configs to describe."""
        super().__init__(zk)
        self._broker_id = broker_id
        self._static = dict(static or {})

    def static_configs(self, broker: str) -> dict[str, str] | None:
        """The static configs of the broker entity ``broker`` (an id as the path spells it): this broker's, or
        None for any other broker (and for the ``<default>`` entity), whose settings only that broker knows."""
        if self._broker_id is None or broker != str(self._broker_id):
            return None
        return dict(self._static)
