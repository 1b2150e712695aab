"""The admin handlers (broker/kafka/admin_*.py) over stand-in services: authorization as Kafka's KafkaApis,
each version's answer, errors per item. Requests are kio frames decoded by the codec and answers are encoded
and read back with kio, as a client would, so every answer is checked to be well-formed on the wire."""

from __future__ import annotations

import asyncio
import datetime
import io
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.admin.acls import AclBinding, AclFilter
from broker.admin.config_entries import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType
from broker.admin.config_requests import AlterOp, ConfigResource
from broker.admin.topic_requests import CreatedTopic, NewPartitions, NewTopic
from broker.config import BrokerConfig
from broker.kafka import codec
from broker.kafka.admin import API_KEYS
from broker.kafka.admin_acls import AclApis
from broker.kafka.admin_cluster import ClusterApis
from broker.kafka.admin_configs import ConfigApis
from broker.kafka.admin_quotas import QuotaApis
from broker.kafka.admin_topics import TopicApis
from broker.kafka.apis import KafkaApis
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection
from broker.metadata.cache import MetadataCache, topic_uuid
from broker.replication.replica_manager import LogDirInfo, ReplicaLogInfo
from odradek.protocol.errors import (
    InvalidConfigError,
    NotLeaderOrFollowerError,
    OdradekError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)
from odradek.protocol.model import BrokerInfo, KafkaEndpoint, TopicAssignment

PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
CONN = Connection("c", PLAINTEXT, "10.0.0.9", 50000)
MS100 = datetime.timedelta(milliseconds=100)
TOPIC_ID = "EjRWeBI0VniavN7wEjRWeA"  # uuid 12345678-1234-5678-9abc-def012345678, url-safe base64


class Security:
    """The security service's decisions: everything allowed but the (operation, resource type, name) denied."""

    enforce = True

    def __init__(self, *denied: tuple[str, str, str]) -> None:
        self.denied = set(denied)

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        return (operation, resource_type, name) not in self.denied


def auth(*denied: tuple[str, str, str]) -> KafkaAuthorizer:
    return KafkaAuthorizer(Security(*denied))  # type: ignore[arg-type]


def call(handler: Any, api_key: int, version: int, **fields: Any) -> Any:
    """Frame the request, decode it as the broker does, run ``handler``, encode the answer and read it back."""
    request_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=5, client_id="unit"))
    entity_writer(request_cls)(out, codec.make(request_cls, **fields))
    request = codec.decode_request(out.getvalue())
    body = asyncio.run(handler(CONN, request))
    frame = codec.encode_response(api_key, version, 5, body)
    response_cls = load_response_schema(api_key, version)
    _, size = entity_reader(response_cls.__header_schema__)(frame, 4)
    answer, _ = entity_reader(response_cls)(frame, 4 + size)
    return answer


def nested(api_key: int, version: int, entity_class: str, /, **fields: Any) -> Any:
    return codec.make(codec.nested(load_request_schema(api_key, version), entity_class), **fields)


def test_every_admin_api_is_registered_and_advertised() -> None:
    ready = asyncio.Event()
    ready.set()
    apis = KafkaApis(SimpleNamespace(broker_id=1, cluster_id="c", controller_id=1, ready=ready),  # type: ignore
                     MetadataCache(), SimpleNamespace(), KafkaAuthorizer(None),  # type: ignore[arg-type]
                     BrokerConfig(1, "zk", "127.0.0.1", 8082, Path(".")))
    assert set(API_KEYS) <= set(apis._handlers) and set(API_KEYS) <= set(codec.SUPPORTED)


# --------------------------------------------------------------------------------------------------- topics


class Topics:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def create(self, topics: list[NewTopic], *, timeout_ms: int, validate_only: bool = False) -> Any:
        self.calls.append(("create", topics, timeout_ms, validate_only))
        config = ConfigEntry("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False, ConfigType.LONG,
                             None, ())
        return {t.name: (TopicAlreadyExistsError("exists") if t.name == "old" else
                         CreatedTopic(t.name, TOPIC_ID, 3, 2, (config,))) for t in topics}

    async def delete(self, names: list[str], *, timeout_ms: int) -> Any:
        self.calls.append(("delete", names, timeout_ms))
        return {n: RequestTimedOutError("slow") if n == "slow" else None for n in names}

    async def create_partitions(self, requests: list[NewPartitions], *, timeout_ms: int,
                                validate_only: bool = False) -> Any:
        self.calls.append(("partitions", requests, validate_only))
        return {r.name: None for r in requests}


class Records:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        self.calls.append((topic, partition, offset))
        if partition == 1:
            raise NotLeaderOrFollowerError("not here", leader=2)
        return max(offset, 0)


def topic_apis(authorizer: KafkaAuthorizer) -> tuple[TopicApis, Topics, Records]:
    cache = MetadataCache()
    cache.topics = {"t": TopicAssignment({0: [1], 1: [2]}, topic_id=TOPIC_ID), "slow": TopicAssignment({0: [1]})}
    topics, records = Topics(), Records()
    return TopicApis(topics, records, cache, authorizer), topics, records  # type: ignore[arg-type]


def creatable(version: int, name: str, **kw: Any) -> Any:
    fields = {"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": (), "configs": ()}
    return nested(19, version, "CreatableTopic", **{**fields, **kw})


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_create_topics_authorizes_and_renders_each_version(version: int) -> None:
    apis, topics, _ = topic_apis(auth(("Create", "Cluster", "kafka-cluster"), ("Create", "Topic", "denied"),
                                      ("DescribeConfigs", "Topic", "hidden")))
    assignment = nested(19, version, "CreatableReplicaAssignment", partition_index=0, broker_ids=(1, 2))
    config = nested(19, version, "CreatableTopicConfig", name="retention.ms", value="5")
    answer = call(apis.handle_create_topics, 19, version, topics=(
        creatable(version, "new", configs=(config,)), creatable(version, "denied"), creatable(version, "old"),
        creatable(version, "hidden", assignments=(assignment,))), timeout=datetime.timedelta(milliseconds=1500),
        validate_only=True)
    [(_, asked, timeout_ms, validate_only)] = topics.calls
    assert [t.name for t in asked] == ["new", "old", "hidden"] and (timeout_ms, validate_only) == (1500, True)
    assert asked[0].configs == {"retention.ms": "5"} and asked[2].assignment == {0: [1, 2]}
    by_name = {t.name: t for t in answer.topics}
    assert [(n, int(t.error_code)) for n, t in by_name.items()] == [("new", 0), ("denied", 29), ("old", 36),
                                                                     ("hidden", 0)]
    if version >= 5:
        new = by_name["new"]
        assert (new.num_partitions, new.replication_factor, int(new.topic_config_error_code)) == (3, 2, 0)
        assert [(c.name, c.value, int(c.config_source)) for c in new.configs] == [("retention.ms", "5", 1)]
        hidden = by_name["hidden"]
        assert int(hidden.topic_config_error_code) == 29 and hidden.configs is None
        assert by_name["old"].num_partitions == -1
    if version >= 7:
        assert by_name["new"].topic_id == topic_uuid(TOPIC_ID)


def test_delete_topics_by_name_and_by_id() -> None:
    apis, topics, _ = topic_apis(auth(("Delete", "Topic", "slow")))
    answer = call(apis.handle_delete_topics, 20, 1, topic_names=("t", "missing", "slow"), timeout=MS100)
    assert [(r.name, int(r.error_code)) for r in answer.responses] == [("t", 0), ("missing", 3), ("slow", 29)]
    apis, topics, _ = topic_apis(auth())
    state = "DeleteTopicState"
    answer = call(apis.handle_delete_topics, 20, 6, timeout=MS100, topics=(
        nested(20, 6, state, name=None, topic_id=topic_uuid(TOPIC_ID)),
        nested(20, 6, state, name=None, topic_id=uuid.uuid4()),
        nested(20, 6, state, name="t", topic_id=topic_uuid(TOPIC_ID)),
        nested(20, 6, state, name="slow", topic_id=None)))
    assert [(r.name, int(r.error_code)) for r in answer.responses] == [("t", 0), (None, 100), ("t", 42),
                                                                       ("slow", 7)]
    assert topics.calls == [("delete", ["t", "slow"], 100)]


def test_create_partitions_authorizes_alter() -> None:
    apis, topics, _ = topic_apis(auth(("Alter", "Topic", "denied")))
    assignment = nested(37, 3, "CreatePartitionsAssignment", broker_ids=(2, 3))
    answer = call(apis.handle_create_partitions, 37, 3, timeout=MS100, validate_only=False, topics=(
        nested(37, 3, "CreatePartitionsTopic", name="t", count=3, assignments=(assignment,)),
        nested(37, 3, "CreatePartitionsTopic", name="denied", count=3, assignments=None)))
    assert [(r.name, int(r.error_code)) for r in answer.results] == [("t", 0), ("denied", 29)]
    assert topics.calls == [("partitions", [NewPartitions("t", 3, [[2, 3]])], False)]


def test_delete_records_per_partition() -> None:
    apis, _, records = topic_apis(auth(("Delete", "Topic", "slow")))
    part = "DeleteRecordsPartition"
    answer = call(apis.handle_delete_records, 21, 2, timeout=MS100, topics=(
        nested(21, 2, "DeleteRecordsTopic", name="t", partitions=(
            nested(21, 2, part, partition_index=0, offset=7), nested(21, 2, part, partition_index=1, offset=7),
            nested(21, 2, part, partition_index=9, offset=7))),
        nested(21, 2, "DeleteRecordsTopic", name="slow", partitions=(
            nested(21, 2, part, partition_index=0, offset=1),))))
    assert [(t.name, [(p.partition_index, p.low_watermark, int(p.error_code)) for p in t.partitions])
            for t in answer.topics] == [("t", [(0, 7, 0), (1, -1, 6), (9, -1, 3)]), ("slow", [(0, -1, 29)])]
    assert records.calls == [("t", 0, 7), ("t", 1, 7)]


# -------------------------------------------------------------------------------------------------- configs


class Configs:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def describe(self, resource: ConfigResource, keys: Any = None) -> list[ConfigEntry]:
        self.calls.append(("describe", resource, keys))
        if resource.name == "bad":
            raise InvalidConfigError("bad")
        synonym = ConfigSynonym("log.retention.ms", "9", ConfigSource.DEFAULT_CONFIG)
        return [ConfigEntry("retention.ms", "9", ConfigSource.DEFAULT_CONFIG, False, False, ConfigType.LONG,
                            "How long.", (synonym,))]

    async def alter(self, resource: ConfigResource, configs: Any, *, validate_only: bool = False) -> None:
        self.calls.append(("alter", resource, dict(configs), validate_only))

    async def incremental_alter(self, resource: ConfigResource, ops: Any, *, validate_only: bool = False) -> None:
        self.calls.append(("incremental", resource, list(ops), validate_only))
        if resource.name == "bad":
            raise InvalidConfigError("bad")


def describe_resource(version: int, rtype: int, name: str) -> Any:
    return nested(32, version, "DescribeConfigsResource", resource_type=rtype, resource_name=name,
                  configuration_keys=None)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_configs_authorizes_each_resource_and_renders_flags(version: int) -> None:
    service = Configs()
    apis = ConfigApis(service, auth(("DescribeConfigs", "Topic", "hidden"),  # type: ignore[arg-type]
                                    ("DescribeConfigs", "Cluster", "kafka-cluster")))
    answer = call(apis.handle_describe_configs, 32, version, include_synonyms=True, include_documentation=True,
                  resources=(describe_resource(version, 2, "t"), describe_resource(version, 2, "hidden"),
                             describe_resource(version, 4, "1"), describe_resource(version, 2, "bad"),
                             describe_resource(version, 99, "x")))
    assert [(r.resource_name, int(r.error_code)) for r in answer.results] == [
        ("t", 0), ("hidden", 29), ("1", 31), ("bad", 40), ("x", 42)]
    [entry] = answer.results[0].configs
    assert (entry.name, entry.value, int(entry.config_source)) == ("retention.ms", "9", 5)
    assert [(s.name, int(s.source)) for s in entry.synonyms] == [("log.retention.ms", 5)]
    if version >= 3:
        assert entry.documentation == "How long." and int(entry.config_type) == 5
    answer = call(apis.handle_describe_configs, 32, version, include_synonyms=False, include_documentation=False,
                  resources=(describe_resource(version, 2, "t"),))
    assert answer.results[0].configs[0].synonyms == ()
    if version >= 3:
        assert answer.results[0].configs[0].documentation is None


def test_alter_and_incremental_alter_configs() -> None:
    service = Configs()
    apis = ConfigApis(service, auth(("AlterConfigs", "Cluster", "kafka-cluster")))  # type: ignore[arg-type]
    answer = call(apis.handle_alter_configs, 33, 2, validate_only=True, resources=(
        nested(33, 2, "AlterConfigsResource", resource_type=2, resource_name="t", configs=(
            nested(33, 2, "AlterableConfig", name="retention.ms", value="1"),)),
        nested(33, 2, "AlterConfigsResource", resource_type=4, resource_name="1", configs=())))
    assert [(r.resource_name, int(r.error_code)) for r in answer.responses] == [("t", 0), ("1", 31)]
    assert service.calls == [("alter", ConfigResource(2, "t"), {"retention.ms": "1"}, True)]
    answer = call(apis.handle_incremental_alter_configs, 44, 1, validate_only=False, resources=(
        nested(44, 1, "AlterConfigsResource", resource_type=2, resource_name="bad", configs=(
            nested(44, 1, "AlterableConfig", name="cleanup.policy", config_operation=2, value="compact"),)),))
    assert [(r.resource_name, int(r.error_code), r.error_message) for r in answer.responses] == [("bad", 40, "bad")]
    assert service.calls[-1] == ("incremental", ConfigResource(2, "bad"), [AlterOp("cleanup.policy", 2, "compact")],
                                 False)


# ---------------------------------------------------------------------------------------- cluster, log dirs


def cluster_apis(authorizer: KafkaAuthorizer) -> ClusterApis:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 8081 + b, rack=f"r{b}", kafka_endpoints=(
        KafkaEndpoint("PLAINTEXT" if b < 3 else "OTHER", f"b{b}", 9091 + b, "PLAINTEXT"),)) for b in (1, 2, 3)}
    dirs = SimpleNamespace(describe_log_dirs=lambda: [LogDirInfo("/data", (
        ReplicaLogInfo("t", 0, 100, 10), ReplicaLogInfo("t", 1, 50, 5), ReplicaLogInfo("u", 0, 7, 1)))])
    view = SimpleNamespace(broker_id=1, cluster_id="cid", controller_id=2)
    return ClusterApis(view, cache, dirs, authorizer)  # type: ignore[arg-type]


def test_describe_cluster() -> None:
    apis = cluster_apis(auth(("Alter", "Cluster", "kafka-cluster")))
    answer = call(apis.handle_describe_cluster, 60, 2, include_cluster_authorized_operations=True, endpoint_type=1,
                  include_fenced_brokers=True)
    assert (answer.cluster_id, answer.controller_id, int(answer.error_code)) == ("cid", 2, 0)
    assert [(b.broker_id, b.host, b.port, b.rack, b.is_fenced) for b in answer.brokers] == [
        (1, "b1", 9092, "r1", False), (2, "b2", 9093, "r2", False)]  # broker 3 has no PLAINTEXT listener
    ops = answer.cluster_authorized_operations
    assert ops & (1 << 8) and ops & (1 << 11) and not ops & (1 << 7)  # Describe, AlterConfigs; not Alter
    answer = call(apis.handle_describe_cluster, 60, 0, include_cluster_authorized_operations=False)
    assert answer.cluster_authorized_operations == -2147483648
    answer = call(apis.handle_describe_cluster, 60, 1, include_cluster_authorized_operations=False, endpoint_type=2)
    assert int(answer.error_code) == 114 and answer.brokers == ()
    denied = cluster_apis(auth(("Describe", "Cluster", "kafka-cluster")))
    answer = call(denied.handle_describe_cluster, 60, 0, include_cluster_authorized_operations=True)
    assert answer.cluster_authorized_operations == 0 and len(answer.brokers) == 2


@pytest.mark.parametrize("version", [1, 4, 5])
def test_describe_log_dirs(version: int) -> None:
    apis = cluster_apis(auth())
    topic = nested(35, version, "DescribableLogDirTopic", topic="t", partitions=(1,))
    answer = call(apis.handle_describe_log_dirs, 35, version, topics=(topic,))
    [result] = answer.results
    assert result.log_dir == "/data" and int(result.error_code) == 0
    assert [(t.name, [(p.partition_index, p.partition_size) for p in t.partitions]) for t in result.topics] == [
        ("t", [(1, 50)])]
    everything = call(apis.handle_describe_log_dirs, 35, version, topics=None)
    assert sum(len(t.partitions) for t in everything.results[0].topics) == 3
    denied = cluster_apis(auth(("Describe", "Cluster", "kafka-cluster")))
    answer = call(denied.handle_describe_log_dirs, 35, version, topics=None)
    assert answer.results == ()
    if version >= 3:
        assert int(answer.error_code) == 31


# ----------------------------------------------------------------------------------------------------- ACLs


class Acls:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.stored = [AclBinding("Topic", "t", "LITERAL", "User:a", "*", "Read", "Allow"),
                       AclBinding("Topic", "t", "LITERAL", "User:b", "*", "Write", "Deny"),
                       AclBinding("Group", "g", "PREFIXED", "User:a", "*", "Read", "Allow")]

    async def describe(self, f: AclFilter) -> list[AclBinding]:
        self.calls.append(("describe", f))
        return [b for b in self.stored if f.matches(b)]

    async def create(self, bindings: list[AclBinding]) -> list[OdradekError | None]:
        self.calls.append(("create", bindings))
        return [None for _ in bindings]

    async def delete(self, filters: list[AclFilter]) -> list[Any]:
        self.calls.append(("delete", filters))
        return [[b for b in self.stored if f.matches(b)] for f in filters]


def describe_filter(**kw: Any) -> dict[str, Any]:
    fields = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
              "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    return {**fields, **kw}


def test_acl_apis_need_an_authorizer_and_cluster_rights() -> None:
    open_cluster = AclApis(Acls(), KafkaAuthorizer(None))  # type: ignore[arg-type]
    answer = call(open_cluster.handle_describe_acls, 29, 1, **describe_filter())
    assert int(answer.error_code) == 54 and answer.resources == ()
    creation = nested(30, 1, "AclCreation", resource_type=2, resource_name="t", resource_pattern_type=3,
                      principal="User:a", host="*", operation=3, permission_type=3)
    answer = call(open_cluster.handle_create_acls, 30, 1, creations=(creation,))
    assert [int(r.error_code) for r in answer.results] == [54]
    denied = AclApis(Acls(), auth(("Alter", "Cluster", "kafka-cluster")))  # type: ignore[arg-type]
    answer = call(denied.handle_create_acls, 30, 3, creations=(creation,))
    assert [int(r.error_code) for r in answer.results] == [31]
    assert int(call(denied.handle_describe_acls, 29, 3, **describe_filter()).error_code) == 0


def test_acls_are_described_grouped_created_and_deleted() -> None:
    store = Acls()
    apis = AclApis(store, auth())  # type: ignore[arg-type]
    answer = call(apis.handle_describe_acls, 29, 2, **describe_filter(resource_type_filter=2))
    assert [(r.resource_type, r.resource_name, r.pattern_type,
             [(a.principal, a.operation, a.permission_type) for a in r.acls]) for r in answer.resources] == [
        (2, "t", 3, [("User:a", 3, 3), ("User:b", 4, 2)])]
    assert int(call(apis.handle_describe_acls, 29, 2, **describe_filter(pattern_type_filter=0)).error_code) == 42
    good = nested(30, 2, "AclCreation", resource_type=3, resource_name="g", resource_pattern_type=4,
                  principal="User:a", host="*", operation=10, permission_type=3)
    bad = nested(30, 2, "AclCreation", resource_type=7, resource_name="u", resource_pattern_type=3,
                 principal="User:a", host="*", operation=3, permission_type=3)  # USER resources: not stored
    answer = call(apis.handle_create_acls, 30, 2, creations=(bad, good))
    assert [int(r.error_code) for r in answer.results] == [42, 0]
    assert store.calls[-1] == ("create", [AclBinding("Group", "g", "PREFIXED", "User:a", "*", "DescribeConfigs",
                                                     "Allow")])
    answer = call(apis.handle_delete_acls, 31, 1, filters=(
        nested(31, 1, "DeleteAclsFilter", **describe_filter(principal_filter="User:b")),
        nested(31, 1, "DeleteAclsFilter", **describe_filter(operation=0))))
    first, second = answer.filter_results
    assert [(m.resource_name, m.principal, m.operation) for m in first.matching_acls] == [("t", "User:b", 4)]
    assert int(second.error_code) == 42


# ------------------------------------------------------------------------------------------- client quotas


class Quotas:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def describe(self, components: Any, strict: bool = False) -> Any:
        self.calls.append(("describe", list(components), strict))
        return {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 10.0}}

    async def alter(self, entries: Any, *, validate_only: bool = False) -> list[OdradekError | None]:
        self.calls.append(("alter", list(entries), validate_only))
        return [None for _ in entries]


def test_client_quota_apis() -> None:
    service = Quotas()
    apis = QuotaApis(service, auth())  # type: ignore[arg-type]
    component = nested(48, 1, "ComponentData", entity_type="user", match_type=0, match="alice")
    answer = call(apis.handle_describe_client_quotas, 48, 1, components=(component,), strict=False)
    [entry] = answer.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", None), ("user", "alice")]
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 10.0)]
    op = nested(49, 1, "OpData", key="producer_byte_rate", value=5.0, remove=False)
    entity = nested(49, 1, "EntityData", entity_type="client-id", entity_name=None)
    answer = call(apis.handle_alter_client_quotas, 49, 0, entries=(
        nested(49, 0, "EntryData", entity=(entity,), ops=(op,)),), validate_only=True)
    assert [(int(e.error_code), [(d.entity_type, d.entity_name) for d in e.entity]) for e in answer.entries] == [
        (0, [("client-id", None)])]
    assert service.calls[-1][2] is True
    denied = QuotaApis(Quotas(), auth(("DescribeConfigs", "Cluster", "kafka-cluster"),  # type: ignore[arg-type]
                                      ("AlterConfigs", "Cluster", "kafka-cluster")))
    assert int(call(denied.handle_describe_client_quotas, 48, 0, components=(), strict=False).error_code) == 31
    answer = call(denied.handle_alter_client_quotas, 49, 1, entries=(
        nested(49, 1, "EntryData", entity=(entity,), ops=(op,)),), validate_only=False)
    assert [int(e.error_code) for e in answer.entries] == [31]
