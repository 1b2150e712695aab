"""Cluster administration over Kafka's wire protocol: the admin APIs' handlers, built over the
broker's admin services and registered with ``KafkaApis`` as one table.

One module per concept: topics and records (admin_topics.py), configs (admin_configs.py), the cluster and its
log dirs (admin_cluster.py), ACLs (admin_acls.py), client quotas (admin_quotas.py). Every handler decodes,
authorizes with the broker's authorizer (Kafka's operations), calls one service and renders the version asked;
the services (broker/admin/, the replica manager) hold every rule and every ZooKeeper or storage step, and are
the ones the HTTP API calls, so what one front door changes the other shows at once.

The handlers are built on the first admin request, over the broker's services as they are then: the broker
builds its Kafka door before it runs, and ``KafkaApis`` is also built over stand-ins that have none of them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.admin.acls import AclAdmin
from broker.admin.client_quotas import ClientQuotaAdmin
from broker.admin.config_requests import ConfigRequests
from broker.admin.topic_requests import TopicRequests
from broker.kafka import admin_acls, admin_cluster, admin_configs, admin_quotas, admin_topics
from broker.kafka.admin_acls import AclApis
from broker.kafka.admin_cluster import ClusterApis
from broker.kafka.admin_configs import ConfigApis
from broker.kafka.admin_quotas import QuotaApis
from broker.kafka.admin_topics import TopicApis
from broker.kafka.apis import Handler
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.codec import Request
from broker.kafka.network import Connection

if TYPE_CHECKING:
    from broker.admin.entity_configs import EntityConfigAdmin
    from broker.admin.topics import TopicAdmin
    from broker.config import BrokerConfig
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import ReplicaManager

API_KEYS = (
    admin_topics.CREATE_TOPICS, admin_topics.DELETE_TOPICS, admin_topics.DELETE_RECORDS,
    admin_topics.CREATE_PARTITIONS, admin_configs.DESCRIBE_CONFIGS, admin_configs.ALTER_CONFIGS,
    admin_configs.INCREMENTAL_ALTER_CONFIGS, admin_cluster.DESCRIBE_CLUSTER, admin_cluster.DESCRIBE_LOG_DIRS,
    admin_acls.DESCRIBE_ACLS, admin_acls.CREATE_ACLS, admin_acls.DELETE_ACLS,
    admin_quotas.DESCRIBE_CLIENT_QUOTAS, admin_quotas.ALTER_CLIENT_QUOTAS,
)


class MetadataChanges(Protocol):
    def changed(self, timeout: float) -> Awaitable[None]: ...


class AdminBroker(Protocol):
    """What the admin handlers use of the broker (``broker.server.Broker`` is one)."""

    broker_id: int
    cluster_id: str | None
    controller_id: int | None
    config: BrokerConfig
    cache: MetadataCache
    admin: TopicAdmin
    entity_configs: EntityConfigAdmin
    replicas: ReplicaManager
    metadata: MetadataChanges
    zk: Any  # the broker's ZooKeeper session, handed to the ACL service (this door imports nothing of zk)


class AdminApis:
    def __init__(self, broker: Any, authorizer: KafkaAuthorizer) -> None:
        """``broker``: an ``AdminBroker``, read on the first admin request."""
        self._broker = broker
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {key: functools.partial(self._handle, key) for key in API_KEYS}

    async def _handle(self, api_key: int, conn: Connection, request: Request) -> Any:
        return await self._table[api_key](conn, request)

    @functools.cached_property
    def _table(self) -> dict[int, Callable[[Connection, Request], Awaitable[Any]]]:
        broker: AdminBroker = self._broker
        auth = self._auth
        config = broker.config
        topics = TopicRequests(broker.admin, broker.cache, broker.metadata.changed, config)
        configs = ConfigRequests(broker.admin, broker.entity_configs, broker.broker_id,
                                 config.max_config_value_bytes)
        parts = (
            TopicApis(topics, broker.replicas, broker.cache, auth),
            ConfigApis(configs, auth),
            ClusterApis(broker, broker.cache, broker.replicas, auth),
            AclApis(AclAdmin(broker.zk), auth),
            QuotaApis(ClientQuotaAdmin(broker.entity_configs), auth),
        )
        table: dict[int, Handler] = {}
        for part in parts:
            table.update(part.handlers())
        assert sorted(table) == sorted(API_KEYS), "API_KEYS and the admin handlers disagree"
        return table
