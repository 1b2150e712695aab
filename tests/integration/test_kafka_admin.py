"""Cluster administration over Kafka's wire protocol (issue 23), spoken by real clients installed unchanged
(confluent-kafka's AdminClient, kafka-python's KafkaAdminClient; raw kio frames for the client-quota APIs, which
neither exposes), against a real 3-broker cluster; every result is checked against what the HTTP API, the
metrics or the admin scripts (odradek-topics.sh, odradek-configs.sh, odradek-acls.sh) show.

The cluster runs the ACL authorizer with allow.everyone.if.no.acl.found, so ACLs can be created, listed and
deleted, and an ACL on a topic takes effect, while no ACL touches the cluster resource (brokers, on plaintext,
are anonymous too).
"""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, metadata, produce, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="pip install confluent-kafka (the test extra)")
from confluent_kafka import KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)

pytestmark = [pytest.mark.cluster,  # the legacy AlterConfigs is tested on purpose
              pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
TIMEOUT_S = SLOW_MACHINE_S


@pytest.fixture(scope="module")
def cluster(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("kafka-admin"), "kafka-admin", 3,
                             ["--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true"])
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def admin(cluster: LocalProcessBackend) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def name() -> str:
    return f"a-{uuid.uuid4().hex[:8]}"


def cluster_id(c: LocalProcessBackend) -> str:
    status, body, _ = request("GET", f"{c.broker_url(1)}/v3/clusters")
    assert status == 200, body
    return str(body["data"][0]["cluster_id"])


def http_topic(c: LocalProcessBackend, topic: str, broker: int = 1) -> tuple[int, Any]:
    status, body, _ = request("GET", f"{c.broker_url(broker)}/v3/clusters/{cluster_id(c)}/topics/{topic}")
    return status, body


def http_configs(c: LocalProcessBackend, topic: str) -> dict[str, dict[str, Any]]:
    status, body, _ = request("GET", f"{c.broker_url(1)}/v3/clusters/{cluster_id(c)}/topics/{topic}/configs")
    assert status == 200, body
    return {e["name"]: e for e in body["data"]}


def error_code(future: Any) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT_S)
    return int(info.value.args[0].code())


def outcome(future: Any) -> int:
    """The error code a future ended with (0: it succeeded), for polling."""
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def script(tool: str, *args: str) -> str:
    result = subprocess.run([str(SCRIPTS / f"odradek-{tool}.sh"), *args], capture_output=True, text=True,
                            timeout=2 * TIMEOUT_S, env={**os.environ})
    assert result.returncode == 0, result.stderr
    return result.stdout


def controller(c: LocalProcessBackend) -> int:
    """The controller's broker id: librdkafka sends topic changes there, and its metadata has them at once."""
    status, health, _ = request("GET", f"{c.broker_url(1)}/health")
    assert status == 200 and health["controller_id"] is not None, health
    return int(health["controller_id"])


def bootstrap_http(c: LocalProcessBackend) -> str:
    return c.broker_url(2).removeprefix("http://")


# -------------------------------------------------------------------------------------------------- topics


def test_create_topics_is_what_http_and_the_topics_tool_show(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    topic = name()
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=2,
                                            config={"retention.ms": "3600000", "cleanup.policy": "compact"})],
                                  operation_timeout=TIMEOUT_S)
    assert futures[topic].result(timeout=TIMEOUT_S) is None
    status, body = http_topic(cluster, topic, controller(cluster))  # at once, where the answer came from
    assert status == 200, body
    assert (body["partitions_count"], body["replication_factor"]) == (3, 2)
    configs = http_configs(cluster, topic)
    assert configs["retention.ms"]["value"] == "3600000" and configs["retention.ms"]["source"] == \
        "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["value"] == "compact"
    described = script("topics", "--bootstrap-server", bootstrap_http(cluster), "--describe", "--topic", topic)
    first = described.splitlines()[0]
    assert "PartitionCount: 3\tReplicationFactor: 2" in first, first
    assert "cleanup.policy=compact" in first and "retention.ms=3600000" in first, first
    # every broker's HTTP metadata has it, each partition led
    for b in cluster.broker_ids():
        wait_until(lambda b=b: all(p["leader"] >= 0 for p in metadata(cluster.broker_url(b), topic)["partitions"]
                                   or [{"leader": -1}]), TIMEOUT_S, f"broker {b} sees {topic} led")


def test_create_topics_validate_only_exists_and_bad_input(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    dry = name()
    futures = admin.create_topics([NewTopic(dry, num_partitions=2, replication_factor=1)], validate_only=True)
    assert futures[dry].result(timeout=TIMEOUT_S) is None
    assert http_topic(cluster, dry)[0] == 404  # nothing was created
    existing = name()
    create_topic(cluster.broker_url(1), existing, 1, 1)
    assert error_code(admin.create_topics([NewTopic(existing, 1, 1)])[existing]) == KafkaError.TOPIC_ALREADY_EXISTS
    bad = name()
    futures = admin.create_topics([NewTopic(bad, 1, 1, config={"retention.ms": "soon"})], operation_timeout=10)
    assert error_code(futures[bad]) == KafkaError.INVALID_CONFIG
    assert error_code(admin.create_topics([NewTopic(bad, 1, 1, config={"no.such.config": "1"})])[bad]) == \
        KafkaError.INVALID_CONFIG
    assert error_code(admin.create_topics([NewTopic(bad, 1, 4)])[bad]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_code(admin.create_topics([NewTopic(bad, 1001, 1)])[bad]) == KafkaError.POLICY_VIOLATION
    assert error_code(admin.create_topics([NewTopic(bad, 1, replica_assignment=[[1, 1]])])[bad]) == \
        KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert error_code(admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"]) == KafkaError.TOPIC_EXCEPTION
    assert http_topic(cluster, bad)[0] == 404
    pinned = name()
    futures = admin.create_topics([NewTopic(pinned, 2, replica_assignment=[[3, 1], [1, 2]])],
                                  operation_timeout=TIMEOUT_S)
    assert futures[pinned].result(timeout=TIMEOUT_S) is None
    assert [p["replicas"] for p in metadata(cluster.broker_url(controller(cluster)), pinned)["partitions"]] == \
        [[3, 1], [1, 2]]


def test_a_topic_created_over_http_is_deleted_by_the_admin_client(cluster: LocalProcessBackend,
                                                                   admin: AdminClient) -> None:
    topic = name()
    create_topic(cluster.broker_url(2), topic, 2, 2, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert topic in listed and len(listed[topic].partitions) == 2
    assert admin.delete_topics([topic], operation_timeout=TIMEOUT_S)[topic].result(timeout=TIMEOUT_S) is None
    for b in cluster.broker_ids():
        wait_until(lambda b=b: http_topic(cluster, topic, b)[0] == 404, TIMEOUT_S, f"broker {b} forgets {topic}")
    assert error_code(admin.delete_topics([topic])[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_creates_describes_and_deletes_topics(cluster: LocalProcessBackend) -> None:
    """kafka-python negotiates the newest versions (CreateTopics v7 with the configs and id in the answer,
    DescribeConfigs v4, DeleteTopics v6)."""
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    from kafka.admin import ConfigResource as KafkaConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewTopic as KafkaNewTopic

    topic = name()
    client = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        client.create_topics([KafkaNewTopic(topic, 2, 3, topic_configs={"min.insync.replicas": "2"})],
                             timeout_ms=int(TIMEOUT_S * 1000))
        status, body = http_topic(cluster, topic, controller(cluster))
        assert status == 200 and (body["partitions_count"], body["replication_factor"]) == (2, 3), body
        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            client.create_topics([KafkaNewTopic(topic, 1, 1)])
        described = client.describe_configs([KafkaConfigResource(ConfigResourceType.TOPIC, topic)])
        assert "min.insync.replicas" in str(described) and "'2'" in str(described), described
        client.delete_topics([topic], timeout_ms=int(TIMEOUT_S * 1000))
        assert http_topic(cluster, topic, controller(cluster))[0] == 404
    finally:
        client.close()


def test_create_partitions(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    topic = name()
    create_topic(cluster.broker_url(1), topic, 1, 2, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    dry = admin.create_partitions([NewPartitions(topic, 4)], validate_only=True)
    assert dry[topic].result(timeout=TIMEOUT_S) is None
    assert http_topic(cluster, topic)[1]["partitions_count"] == 1
    grown = admin.create_partitions([NewPartitions(topic, 3, replica_assignment=[[2, 3], [3, 1]])],
                                    operation_timeout=TIMEOUT_S)
    assert grown[topic].result(timeout=TIMEOUT_S) is None
    assert http_topic(cluster, topic, controller(cluster))[1]["partitions_count"] == 3
    assert [p["replicas"] for p in metadata(cluster.broker_url(controller(cluster)), topic)["partitions"]][1:] == \
        [[2, 3], [3, 1]]
    assert error_code(admin.create_partitions([NewPartitions(topic, 2)])[topic]) == KafkaError.INVALID_PARTITIONS
    assert error_code(admin.create_partitions([NewPartitions(topic, 5, replica_assignment=[[1, 2]])])[topic]) == \
        KafkaError.INVALID_REPLICA_ASSIGNMENT
    missing = name()
    assert error_code(admin.create_partitions([NewPartitions(missing, 2)])[missing]) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART


# ------------------------------------------------------------------------------------------------- configs


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, Any]:
    return dict(admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S))


def test_topic_configs_describe_alter_and_incremental_alter(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    topic = name()
    create_topic(cluster.broker_url(1), topic, 1, 1, {"retention.ms": "60000"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = _describe(admin, resource)
    http = http_configs(cluster, topic)
    assert set(described) == set(http)
    for key, entry in described.items():
        assert entry.value == http[key]["value"], key
        assert (entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value) == (http[key]["source"] ==
                                                                              "DYNAMIC_TOPIC_CONFIG"), key
        assert not entry.is_read_only and not entry.is_sensitive
    retention = described["retention.ms"]
    assert retention.value == "60000" and retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value), ("log.retention.ms",
                                                                    ConfigSource.DEFAULT_CONFIG.value)]
    assert described["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # AlterConfigs replaces the whole set of overrides
    done = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "2048"})])
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    http = http_configs(cluster, topic)
    assert http["max.message.bytes"]["value"] == "2048" and http["retention.ms"]["source"] == "DEFAULT_CONFIG"

    ops = [ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
           ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)]
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)])
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    http = http_configs(cluster, topic)
    assert http["retention.ms"]["value"] == "120000" and http["max.message.bytes"]["source"] == "DEFAULT_CONFIG"
    assert http["cleanup.policy"]["value"] == "delete,compact"
    tool = script("configs", "--bootstrap-server", bootstrap_http(cluster), "--topic", topic, "--describe")
    assert "  retention.ms=120000 sensitive=false" in tool and "  cleanup.policy=delete,compact" in tool, tool
    ops = [ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)]
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)])
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    assert http_configs(cluster, topic)["cleanup.policy"]["value"] == "compact"

    bad = [ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)]
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=bad)])
    assert error_code(next(iter(done.values()))) == KafkaError.INVALID_REQUEST
    done = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "x"})])
    assert error_code(next(iter(done.values()))) == KafkaError.INVALID_CONFIG
    missing = ConfigResource(ResourceType.TOPIC, name())
    assert error_code(admin.describe_configs([missing])[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET)])], validate_only=True)
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    assert http_configs(cluster, topic)["retention.ms"]["value"] == "120000"


def test_broker_configs_describe_and_alter(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    resource = ConfigResource(ResourceType.BROKER, "2")
    described = _describe(admin, resource)
    assert described["broker.id"].value == "2" and described["broker.id"].is_read_only
    assert described["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    ops = [ConfigEntry("follower.replication.throttled.rate", "5000000",
                       incremental_operation=AlterConfigOpType.SET)]
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "2", incremental_configs=ops)])
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/v3/clusters/{cluster_id(cluster)}/brokers/2/configs")
    assert status == 200, body
    assert {e["name"]: e["value"] for e in body["data"]} == {"follower.replication.throttled.rate": "5000000"}
    entry = _describe(admin, resource)["follower.replication.throttled.rate"]
    assert entry.value == "5000000" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not entry.is_read_only
    tool = script("configs", "--bootstrap-server", bootstrap_http(cluster), "--broker", "2", "--describe")
    assert "follower.replication.throttled.rate=5000000" in tool, tool
    # the cluster-wide default entity (resource name ""; confluent-kafka cannot name it: raw frames)
    alter_cls = load_request_schema(44, 1)
    mod = sys.modules[alter_cls.__module__]
    answer = _kafka_call(cluster.kafka_address(1), 44, 1, alter_cls(resources=(mod.AlterConfigsResource(
        resource_type=4, resource_name="", configs=(mod.AlterableConfig(
            name="leader.replication.throttled.rate", config_operation=0, value="7000000"),)),), validate_only=False))
    assert [int(r.error_code) for r in answer.responses] == [0]
    status, body, _ = request("GET", f"{cluster.broker_url(3)}/v3/clusters/{cluster_id(cluster)}/broker-configs")
    assert {e["name"]: e["value"] for e in body["data"]} == {"leader.replication.throttled.rate": "7000000"}
    describe_cls = load_request_schema(32, 4)
    dmod = sys.modules[describe_cls.__module__]
    answer = _kafka_call(cluster.kafka_address(3), 32, 4, describe_cls(resources=(dmod.DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=None),), include_synonyms=True,
        include_documentation=True))
    [result] = answer.results
    assert [(c.name, c.value, int(c.config_source), c.read_only) for c in result.configs] == [
        ("leader.replication.throttled.rate", "7000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)]
    assert result.configs[0].documentation and int(result.configs[0].config_type) == 5  # LONG
    answer = _kafka_call(cluster.kafka_address(1), 32, 4, describe_cls(resources=(dmod.DescribeConfigsResource(
        resource_type=4, resource_name="3", configuration_keys=None),), include_synonyms=False,
        include_documentation=False))
    assert int(answer.results[0].error_code) == KafkaError.INVALID_REQUEST  # broker 3's configs are broker 3's
    # the legacy AlterConfigs replaces broker 2's set: the throttle goes
    done = admin.alter_configs([ConfigResource(ResourceType.BROKER, "2", set_config={})])
    assert next(iter(done.values())).result(timeout=TIMEOUT_S) is None
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/v3/clusters/{cluster_id(cluster)}/brokers/2/configs")
    assert body["data"] == []
    bad = [ConfigEntry("broker.id", "9", incremental_operation=AlterConfigOpType.SET)]
    done = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "2", incremental_configs=bad)])
    assert error_code(next(iter(done.values()))) == KafkaError.INVALID_CONFIG
    answer = _kafka_call(cluster.kafka_address(2), 44, 1, alter_cls(resources=(mod.AlterConfigsResource(
        resource_type=4, resource_name="", configs=(mod.AlterableConfig(
            name="leader.replication.throttled.rate", config_operation=1, value=None),)),), validate_only=False))
    assert [int(r.error_code) for r in answer.responses] == [0]


# ------------------------------------------------------------------------------------------------- records


def _log_start_offsets(c: LocalProcessBackend, topic: str) -> dict[int, int]:
    """Each broker's log start offset of ``topic``-0, from its /metrics (leader and followers alike)."""
    out: dict[int, int] = {}
    for b in c.broker_ids():
        status, text, _ = request("GET", f"{c.broker_url(b)}/metrics")
        assert status == 200
        for line in (text.decode() if isinstance(text, bytes) else str(text)).splitlines():
            if line.startswith("odradek_partition_log_start_offset{") and f'topic="{topic}"' in line \
                    and 'partition="0"' in line:
                out[b] = int(float(line.rsplit(" ", 1)[1]))
    return out


def test_delete_records_moves_the_log_start_on_every_replica(cluster: LocalProcessBackend,
                                                              admin: AdminClient) -> None:
    topic = name()
    create_topic(cluster.broker_url(1), topic, 1, 3, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    status, body = produce(cluster.broker_url(1), topic, 0, [{"n": i} for i in range(10)])
    assert status == 200, body
    tp = TopicPartition(topic, 0, 6)
    deleted = admin.delete_records([tp], operation_timeout=TIMEOUT_S)
    assert next(iter(deleted.values())).result(timeout=TIMEOUT_S).low_watermark == 6
    status, offsets, _ = request("GET", f"{cluster.broker_url(2)}/topics/{topic}/partitions/0/offsets")
    assert status == 200 and offsets["beginning_offset"] == 6, offsets
    wait_until(lambda: _log_start_offsets(cluster, topic) == {1: 6, 2: 6, 3: 6}, TIMEOUT_S,
               "every replica's log start at 6")
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(timeout=TIMEOUT_S).offset == 6
    # -1: up to the high watermark; beyond it: OFFSET_OUT_OF_RANGE
    deleted = admin.delete_records([TopicPartition(topic, 0, -1)])
    assert next(iter(deleted.values())).result(timeout=TIMEOUT_S).low_watermark == 10
    assert error_code(next(iter(admin.delete_records([TopicPartition(topic, 0, 11)]).values()))) == \
        KafkaError.OFFSET_OUT_OF_RANGE
    missing = TopicPartition(topic, 5, 0)  # librdkafka refuses it from its metadata (the broker's: unit tests)
    assert error_code(next(iter(admin.delete_records([missing]).values()))) in (
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)


# ---------------------------------------------------------------------------------------- cluster, log dirs


def test_describe_cluster(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    described = admin.describe_cluster().result(timeout=TIMEOUT_S)  # librdkafka asks Metadata for it
    status, health, _ = request("GET", f"{cluster.broker_url(1)}/health")
    assert status == 200, health
    expected = {b: cluster.kafka_address(b) for b in cluster.broker_ids()}
    assert described.cluster_id == health["cluster_id"] and described.controller.id == health["controller_id"]
    assert {n.id: f"{n.host}:{n.port}" for n in described.nodes} == expected
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    client = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_address(3))  # asks DescribeCluster
    try:
        answer = client.describe_cluster()
    finally:
        client.close()
    assert answer["cluster_id"] == health["cluster_id"] and answer["controller_id"] == health["controller_id"]
    assert {b["broker_id"]: f"{b['host']}:{b['port']}" for b in answer["brokers"]} == expected
    assert not any(b["is_fenced"] for b in answer["brokers"])
    assert {"DESCRIBE", "ALTER", "CREATE", "ALTER_CONFIGS"} <= set(answer["authorized_operations"]), answer


def test_describe_log_dirs_with_kafka_python(cluster: LocalProcessBackend) -> None:
    kafka = pytest.importorskip("kafka", reason="pip install kafka-python (the test extra)")
    topic = name()
    create_topic(cluster.broker_url(1), topic, 1, 3, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    status, body = produce(cluster.broker_url(1), topic, 0, [{"n": i} for i in range(5)])
    assert status == 200, body
    client = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_address(2))
    try:
        answer = client.describe_log_dirs(topic_partitions={topic: [0]}, brokers=[2])
    finally:
        client.close()
    status, dirs, _ = request("GET", f"{cluster.broker_url(2)}/admin/log_dirs")
    assert status == 200, dirs
    [http_dir] = dirs["log_dirs"]
    [replica] = [r for r in http_dir["replicas"] if r["topic"] == topic]
    [broker] = answer
    assert broker["broker"] == 2
    [log_dir] = broker["log_dirs"]
    assert log_dir["log_dir"] == http_dir["log_dir"] and log_dir["error_code"] == 0
    assert [(t["name"], [(p["partition_index"], p["partition_size"]) for p in t["partitions"]])
            for t in log_dir["topics"]] == [(topic, [(0, replica["size"])])]
    assert replica["size"] > 0


# ---------------------------------------------------------------------------------------------------- ACLs


def test_create_describe_delete_acls_as_the_acl_tool_shows(cluster: LocalProcessBackend, admin: AdminClient) -> None:
    topic, group = name(), name()
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                   AclOperation.DESCRIBE, AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings).values():
        assert f.result(timeout=TIMEOUT_S) is None
    listed = script("acls", "--authorizer-properties", f"zookeeper.connect={cluster.zk_connect}", "--list",
                    "--topic", topic)
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in listed, listed
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed, listed

    any_topic = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)
    found = admin.describe_acls(any_topic).result(timeout=TIMEOUT_S)
    assert found == [bindings[0]]
    matching = AclBindingFilter(ResourceType.GROUP, group + "-x", ResourcePatternType.MATCH, None, None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(matching).result(timeout=TIMEOUT_S) == [bindings[1]]
    deleted = admin.delete_acls([any_topic, matching])
    assert [f.result(timeout=TIMEOUT_S) for f in deleted.values()] == [[bindings[0]], [bindings[1]]]
    assert admin.describe_acls(any_topic).result(timeout=TIMEOUT_S) == []
    assert "alice" not in script("acls", "--authorizer-properties", f"zookeeper.connect={cluster.zk_connect}",
                                 "--list", "--topic", topic)
    bad = AclBinding(ResourceType.BROKER, "1", ResourcePatternType.LITERAL, "User:x", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)
    assert error_code(admin.create_acls([bad])[bad]) == KafkaError.INVALID_REQUEST


def test_a_deny_acl_refuses_topic_deletion_and_record_deletion(cluster: LocalProcessBackend,
                                                               admin: AdminClient) -> None:
    topic = name()
    create_topic(cluster.broker_url(1), topic, 1, 1, seen_by=[cluster.broker_url(b) for b in cluster.broker_ids()])
    # with an ACL on the topic, allow.everyone.if.no.acl.found no longer applies to it: allow all, then deny
    # Delete and Alter (Alter: a harmless probe of when the controller, who gets DeleteTopics, has the ACLs)
    allow = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW)
    denials = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", op,
                          AclPermissionType.DENY) for op in (AclOperation.DELETE, AclOperation.ALTER)]
    for f in admin.create_acls([allow, *denials]).values():
        assert f.result(timeout=TIMEOUT_S) is None
    wait_until(lambda: outcome(admin.create_partitions([NewPartitions(topic, 2)], validate_only=True)[topic]) ==
               KafkaError.TOPIC_AUTHORIZATION_FAILED, TIMEOUT_S, "the controller applies the ACLs")
    # DeleteRecords goes to the leader; below offset 0 it would delete nothing if it were allowed
    wait_until(lambda: outcome(next(iter(admin.delete_records([TopicPartition(topic, 0, 0)]).values()))) ==
               KafkaError.TOPIC_AUTHORIZATION_FAILED, TIMEOUT_S, "the leader applies the ACLs")
    assert error_code(admin.delete_topics([topic])[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert http_topic(cluster, topic)[0] == 200
    deny_filter = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                   AclOperation.ANY, AclPermissionType.ANY)
    [removed] = [f.result(timeout=TIMEOUT_S) for f in admin.delete_acls([deny_filter]).values()]
    assert sorted(map(str, removed)) == sorted(map(str, [allow, *denials]))


# ------------------------------------------------------------------------------------------- client quotas


def _kafka_call(address: str, api_key: int, version: int, body: Any) -> Any:
    """One request on a fresh connection, as raw kio frames (no client library exposes the quota APIs)."""
    host, port = address.rsplit(":", 1)
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7,
                           client_id="quota-test")
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, header)
    entity_writer(type(body))(out, body)
    payload = out.getvalue()
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(s, 4))[0]
        frame = _read(s, size)
    response_cls = load_response_schema(api_key, version)
    _, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    answer, _ = entity_reader(response_cls)(frame, offset)
    return answer


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def test_client_quotas_alter_and_describe_as_the_configs_tool_shows(cluster: LocalProcessBackend) -> None:
    client, user = name(), name()
    alter_cls = load_request_schema(49, 1)
    mod = sys.modules[alter_cls.__module__]
    entries = (
        mod.EntryData(entity=(mod.EntityData(entity_type="client-id", entity_name=client),),
                      ops=(mod.OpData(key="producer_byte_rate", value=1048576.0, remove=False),
                           mod.OpData(key="request_percentage", value=12.5, remove=False))),
        mod.EntryData(entity=(mod.EntityData(entity_type="user", entity_name=user),
                              mod.EntityData(entity_type="client-id", entity_name=None)),
                      ops=(mod.OpData(key="consumer_byte_rate", value=2048.0, remove=False),)),
        mod.EntryData(entity=(mod.EntityData(entity_type="client-id", entity_name=name()),),
                      ops=(mod.OpData(key="producer_byte_rate", value=1.5, remove=False),)),
    )
    answer = _kafka_call(cluster.kafka_address(1), 49, 1, alter_cls(entries=entries, validate_only=False))
    assert [int(e.error_code) for e in answer.entries] == [0, 0, KafkaError.INVALID_REQUEST]
    tool = script("configs", "--bootstrap-server", bootstrap_http(cluster), "--entity-type", "clients",
                  "--entity-name", client, "--describe")
    assert tool == f"Quota configs for client-id '{client}' are producer_byte_rate=1048576,request_percentage=12.5\n"

    describe_cls = load_request_schema(48, 1)
    dmod = sys.modules[describe_cls.__module__]
    exact = describe_cls(components=(dmod.ComponentData(entity_type="client-id", match_type=0, match=client),),
                         strict=True)
    answer = _kafka_call(cluster.kafka_address(2), 48, 1, exact)
    assert int(answer.error_code) == 0
    assert [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in answer.entries] == [([("client-id", client)], {"producer_byte_rate": 1048576.0,
                                                                       "request_percentage": 12.5})]
    by_user = describe_cls(components=(dmod.ComponentData(entity_type="user", match_type=0, match=user),),
                           strict=False)
    answer = _kafka_call(cluster.kafka_address(3), 48, 1, by_user)
    assert [sorted((e.entity_type, e.entity_name) for e in entry.entity) for entry in answer.entries] == [
        [("client-id", None), ("user", user)]]
    status, body, _ = request("GET", f"{cluster.broker_url(1)}/v3/clusters/{cluster_id(cluster)}/users/{user}/configs"
                                     "?client_id=%3Cdefault%3E")
    assert status == 200 and {e["name"]: e["value"] for e in body["data"]} == {"consumer_byte_rate": "2048"}, body
    remove = alter_cls(entries=(mod.EntryData(entity=(mod.EntityData(entity_type="client-id", entity_name=client),),
                                              ops=(mod.OpData(key="producer_byte_rate", value=0.0, remove=True),)),),
                       validate_only=False)
    assert [int(e.error_code) for e in _kafka_call(cluster.kafka_address(1), 49, 1, remove).entries] == [0]
    assert script("configs", "--bootstrap-server", bootstrap_http(cluster), "--entity-type", "clients",
                  "--entity-name", client, "--describe") == \
        f"Quota configs for client-id '{client}' are request_percentage=12.5\n"
