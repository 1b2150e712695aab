"""DescribeCluster and DescribeLogDirs over Kafka's wire protocol.

DescribeCluster reads the metadata cache as Metadata does (brokers named by their address on the listener the
request came in on; a broker without it is left out) and needs no ACL; with
``include_cluster_authorized_operations`` it says which cluster operations the caller may perform (0 without
Describe on the cluster), as Kafka does. ZooKeeper-era brokers are never fenced, and have no controller
listeners to describe (``endpoint_type`` CONTROLLER is MISMATCHED_ENDPOINT_TYPE).

DescribeLogDirs lists this broker's replicas from the replica manager (``describe_log_dirs``: one log dir, each
replica's size), narrowed to the topics and partitions asked; it needs Describe on the cluster (an empty answer,
CLUSTER_AUTHORIZATION_FAILED from v3, otherwise). The log dir's total and usable bytes are not measured: -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from broker.kafka import codec
from broker.kafka.admin_acls import OPERATIONS
from broker.kafka.apis import NO_THROTTLE, NONE, ClusterView, Handler, code
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    ClusterAuthorizationFailedError,
    KafkaStorageError,
    MismatchedEndpointTypeError,
    OdradekError,
)

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import LogDirInfo

DESCRIBE_LOG_DIRS = 35
DESCRIBE_CLUSTER = 60
BROKER_ENDPOINTS = 1  # KIP-919's endpoint_type: 1 brokers, 2 controllers
UNAUTHORIZED_OPERATIONS = -2147483648  # Kafka's "not asked for"
CLUSTER_OPERATIONS = ("Create", "Alter", "Describe", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                      "IdempotentWrite")


class DescribesLogDirs(Protocol):
    """What DescribeLogDirs needs of the replica manager (``ReplicaManager`` is one)."""

    def describe_log_dirs(self) -> list[LogDirInfo]: ...


class ClusterApis:
    def __init__(self, cluster: ClusterView, cache: MetadataCache, log_dirs: DescribesLogDirs,
                 authorizer: KafkaAuthorizer) -> None:
        self._cluster = cluster
        self._cache = cache
        self._log_dirs = log_dirs
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {DESCRIBE_CLUSTER: self.handle_describe_cluster, DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs}

    # --------------------------------------------------------------------------------------- DescribeCluster

    async def handle_describe_cluster(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(DESCRIBE_CLUSTER, request.header.api_version)
        endpoint_type = int(getattr(body, "endpoint_type", BROKER_ENDPOINTS))
        controller = self._cluster.controller_id
        if endpoint_type != BROKER_ENDPOINTS:
            error: OdradekError = MismatchedEndpointTypeError(
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), error_message=error.message,
                        endpoint_type=endpoint_type, cluster_id=self._cluster.cluster_id or "", controller_id=-1,
                        brokers=(), cluster_authorized_operations=UNAUTHORIZED_OPERATIONS)
        operations = UNAUTHORIZED_OPERATIONS
        if body.include_cluster_authorized_operations:
            operations = 0
            if self._auth.allowed(conn, "Describe", CLUSTER, CLUSTER_NAME):
                by_name = {name: c for c, name in OPERATIONS.items()}
                for op in CLUSTER_OPERATIONS:
                    if self._auth.allowed(conn, op, CLUSTER, CLUSTER_NAME):
                        operations |= 1 << by_name[op]
        broker_cls = nested(cls, "DescribeClusterBroker")
        brokers = []
        for b in sorted(self._cache.brokers.values(), key=lambda b: b.broker_id):
            endpoint = next((e for e in b.kafka_endpoints if e.listener == conn.listener.name), None)
            if endpoint is not None:
                brokers.append(make(broker_cls, broker_id=b.broker_id, host=endpoint.host, port=endpoint.port,
                                    rack=b.rack, is_fenced=False))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, error_message=None,
                    endpoint_type=BROKER_ENDPOINTS, cluster_id=self._cluster.cluster_id or "",
                    controller_id=-1 if controller is None else controller, brokers=tuple(brokers),
                    cluster_authorized_operations=operations)

    # --------------------------------------------------------------------------------------- DescribeLogDirs

    async def handle_describe_log_dirs(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(DESCRIBE_LOG_DIRS, request.header.api_version)
        if not self._auth.allowed(conn, "Describe", CLUSTER, CLUSTER_NAME):
            error = ClusterAuthorizationFailedError(f"{self._auth.principal(conn)} may not Describe the cluster")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), results=())
        wanted: dict[str, set[int]] | None = None
        if body.topics is not None:
            wanted = {}
            for t in body.topics:
                wanted.setdefault(str(t.topic), set()).update(int(p) for p in t.partitions)
        result_cls = nested(cls, "DescribeLogDirsResult")
        topic_cls = nested(cls, "DescribeLogDirsTopic")
        part_cls = nested(cls, "DescribeLogDirsPartition")
        results = []
        for d in self._log_dirs.describe_log_dirs():
            by_topic: dict[str, list[Any]] = {}
            for r in d.replicas:
                if wanted is not None and r.partition not in wanted.get(r.topic, ()):
                    continue
                by_topic.setdefault(r.topic, []).append(make(
                    part_cls, partition_index=r.partition, partition_size=r.size, offset_lag=r.offset_lag,
                    is_future_key=r.is_future))
            failed = None if d.error is None else KafkaStorageError(d.error)
            results.append(make(result_cls, error_code=code(failed), log_dir=d.path, topics=tuple(
                make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                total_bytes=-1, usable_bytes=-1, is_cordoned=False))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, results=tuple(results))
