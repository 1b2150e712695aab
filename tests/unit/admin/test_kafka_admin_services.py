"""The admin services behind Kafka's admin APIs (broker/admin/topic_requests.py, config_requests.py,
config_entries.py, acls.py, client_quotas.py): Kafka's rules, over an in-memory ZooKeeper facade and stand-in
config stores; the metadata cache is a real one the test fills as the controller would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.admin.acls import AclAdmin, AclBinding, AclFilter, check_binding
from broker.admin.client_quotas import ClientQuotaAdmin, MatchType, QuotaComponent, QuotaOp
from broker.admin.config_entries import ConfigSource, broker_entries, topic_entries
from broker.admin.config_requests import AlterOp, ConfigRequests, ConfigResource, OpType, ResourceType
from broker.admin.entity_configs import DEFAULT_ENTITY
from broker.admin.topic_requests import CreatedTopic, NewPartitions, NewTopic, TopicRequests
from broker.admin.topics import TopicAdmin
from broker.config import BrokerConfig
from broker.metadata.cache import MetadataCache, PartitionInfo
from odradek.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    ReassignmentInProgressError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicError,
)
from odradek.protocol.model import TopicAssignment
from tests.unit.fakes.kazoo import fake_client
from tests.unit.fakes.zk import FakeZk
from zk.configs import validate_alter

# --------------------------------------------------------------------------------------------------- topics


class AdminZk(FakeZk):
    """The verbs TopicAdmin writes with, besides those the controller's fake has."""

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment) -> None:
        self.assignments[topic] = assignment

    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        assert entity_type == "topics"
        self.configs[name] = dict(config)

    def mark_topic_for_deletion(self, topic: str) -> None:
        if topic not in self.assignments:
            raise UnknownTopicError(f"topic '{topic}' to delete does not exist")
        self.to_delete.add(topic)


class Controller:
    """Plays the controller: on each wait, whatever ZooKeeper holds reaches the cache (``lag`` waits later)."""

    def __init__(self, zk: AdminZk, cache: MetadataCache, lag: int = 0) -> None:
        self.zk, self.cache, self.lag = zk, cache, lag
        self.waits = 0

    async def changed(self, timeout: float) -> None:
        self.waits += 1
        await asyncio.sleep(0)
        if self.waits <= self.lag:
            raise TimeoutError
        for topic in self.zk.to_delete:
            self.cache.topics.pop(topic, None)
        for topic, assignment in self.zk.assignments.items():
            if topic in self.zk.to_delete:
                continue
            self.cache.topics[topic] = assignment
            for p, replicas in assignment.partitions.items():
                self.cache.partitions[(topic, p)] = PartitionInfo(topic, p, tuple(replicas), replicas[0], 0,
                                                                  tuple(replicas), 1, 0)


def services(limits: BrokerConfig | None = None, lag: int = 0) -> tuple[TopicRequests, AdminZk, MetadataCache]:
    zk = AdminZk()
    for b in (1, 2, 3):
        zk.add_broker(b)
    cache = MetadataCache()
    controller = Controller(zk, cache, lag)
    config = limits or BrokerConfig(1, "zk:2181", "127.0.0.1", 8082, Path("/tmp/unused"))
    return TopicRequests(TopicAdmin(zk), cache, controller.changed, config), zk, cache  # type: ignore[arg-type]


def test_create_topics_writes_waits_and_answers_each_topic_on_its_own() -> None:
    async def main() -> None:
        topics, zk, cache = services()
        out = await topics.create([
            NewTopic("a", 3, 2, configs={"retention.ms": "1000"}),
            NewTopic("b", assignment={0: [3, 1], 1: [1, 2]}),
            NewTopic("dup"), NewTopic("dup"),
            NewTopic("nulls", configs={"retention.ms": None}),
            NewTopic("both", 2, assignment={0: [1]}),
            NewTopic("badconf", configs={"retention.ms": "soon"}),
            NewTopic("rf", 1, 4),
            NewTopic("twice", assignment={0: [1, 1]}),
        ], timeout_ms=5000)
        a = out["a"]
        assert isinstance(a, CreatedTopic) and (a.num_partitions, a.replication_factor) == (3, 2)
        assert a.topic_id is not None
        retention = next(e for e in a.configs if e.name == "retention.ms")
        assert retention.value == "1000" and retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert zk.assignments["b"].partitions == {0: [3, 1], 1: [1, 2]} and "b" in cache.topics
        assert isinstance(out["dup"], InvalidRequestError) and "dup" not in zk.assignments
        assert isinstance(out["nulls"], InvalidRequestError) and isinstance(out["both"], InvalidRequestError)
        assert isinstance(out["badconf"], InvalidConfigError)
        assert isinstance(out["rf"], InvalidReplicationFactorError)
        assert isinstance(out["twice"], InvalidReplicaAssignmentError)
        again = await topics.create([NewTopic("a")], timeout_ms=5000)
        assert isinstance(again["a"], TopicAlreadyExistsError)

    asyncio.run(main())


def test_validate_only_writes_nothing_and_timeouts_are_kafkas() -> None:
    async def main() -> None:
        topics, zk, cache = services(lag=10**6)
        dry = await topics.create([NewTopic("dry", 2, 1)], timeout_ms=5000, validate_only=True)
        assert isinstance(dry["dry"], CreatedTopic) and dry["dry"].topic_id is None and not zk.assignments
        # timeout 0: written, answered at once with REQUEST_TIMED_OUT (Kafka's "started")
        out = await topics.create([NewTopic("now")], timeout_ms=0)
        assert isinstance(out["now"], RequestTimedOutError) and "now" in zk.assignments
        # a controller that never acts: REQUEST_TIMED_OUT after the timeout
        out = await topics.create([NewTopic("late")], timeout_ms=50)
        assert isinstance(out["late"], RequestTimedOutError) and "late" in zk.assignments and not cache.topics

    asyncio.run(main())


def test_partition_and_config_limits_are_policy_violations() -> None:
    async def main() -> None:
        limits = BrokerConfig(1, "zk:2181", "127.0.0.1", 8082, Path("/tmp/unused"), max_partitions_per_topic=4,
                              max_partitions=6, max_config_value_bytes=10)
        topics, zk, _ = services(limits)
        out = await topics.create([NewTopic("big", 5), NewTopic("ok", 4), NewTopic("long", configs={
            "compression.type": "x" * 11})], timeout_ms=5000)
        assert isinstance(out["big"], PolicyViolationError) and isinstance(out["long"], PolicyViolationError)
        assert isinstance(out["ok"], CreatedTopic)
        out = await topics.create([NewTopic("more", 3)], timeout_ms=5000)  # 4 + 3 > max.partitions
        assert isinstance(out["more"], PolicyViolationError) and set(zk.assignments) == {"ok"}

    asyncio.run(main())


def test_delete_topics_waits_until_the_topic_is_gone() -> None:
    async def main() -> None:
        topics, zk, cache = services()
        await topics.create([NewTopic("gone", 1)], timeout_ms=5000)
        out = await topics.delete(["gone", "never"], timeout_ms=5000)
        assert out["gone"] is None and "gone" not in cache.topics and zk.to_delete == {"gone"}
        assert isinstance(out["never"], UnknownTopicError)

    asyncio.run(main())


def test_create_partitions_rules() -> None:
    async def main() -> None:
        topics, zk, cache = services()
        await topics.create([NewTopic("t", 2, 2)], timeout_ms=5000)
        out = await topics.create_partitions([NewPartitions("t", 4, [[1, 2], [2, 3]])], timeout_ms=5000)
        assert out == {"t": None} and zk.assignments["t"].partitions[3] == [2, 3] and ("t", 3) in cache.partitions
        out = await topics.create_partitions([
            NewPartitions("t", 3), NewPartitions("missing", 2), NewPartitions("d", 2), NewPartitions("d", 3),
        ], timeout_ms=5000)
        assert isinstance(out["t"], InvalidPartitionsError) and isinstance(out["missing"], UnknownTopicError)
        assert isinstance(out["d"], InvalidRequestError)
        for bad in ([[1, 2]], [[1, 9], [1, 2]], [[1], [2]], [[1, 1], [2, 3]]):
            out = await topics.create_partitions([NewPartitions("t", 6, bad)], timeout_ms=5000)
            assert isinstance(out["t"], InvalidReplicaAssignmentError), bad
        out = await topics.create_partitions([NewPartitions("t", 6)], timeout_ms=5000, validate_only=True)
        assert out == {"t": None} and len(zk.assignments["t"].partitions) == 4
        current = zk.assignments["t"]
        zk.assignments["t"] = TopicAssignment(current.partitions, current.topic_id, {0: [3]}, {})
        out = await topics.create_partitions([NewPartitions("t", 6)], timeout_ms=5000)
        assert isinstance(out["t"], ReassignmentInProgressError)
        zk.assignments["t"] = current
        zk.to_delete.add("t")
        out = await topics.create_partitions([NewPartitions("t", 6)], timeout_ms=5000)
        assert isinstance(out["t"], InvalidTopicError)

    asyncio.run(main())


# -------------------------------------------------------------------------------------------------- configs


class Entities:
    """EntityConfigAdmin's verbs over a dict, with zk/configs.py's validation."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, str]] = {}
        self.writes = 0

    def describe(self, entity_type: str, name: str) -> dict[str, str]:
        return dict(self.store.get((entity_type, name), {}))

    def alter(self, entity_type: str, name: str, set_: dict[str, str], delete: list[str]) -> dict[str, str]:
        clean, gone = validate_alter(entity_type, set_, delete)
        current = self.store.setdefault((entity_type, name), {})
        missing = [k for k in gone if k not in current]
        if missing:
            raise InvalidConfigError(f"Invalid config(s): {missing}")
        for k in gone:
            del current[k]
        current.update(clean)
        self.writes += 1
        return dict(current)

    def describe_user_client(self, user: str, client: str) -> dict[str, str]:
        return self.describe(f"users/{user}/clients", client)

    def alter_user_client(self, user: str, client: str, set_: dict[str, str], delete: list[str]) -> dict[str, str]:
        validate_alter("users/clients", set_, delete)
        current = self.store.setdefault((f"users/{user}/clients", client), {})
        for k in delete:
            del current[k]
        current.update(set_)
        self.writes += 1
        return dict(current)

    def list_entities(self, entity_type: str) -> dict[str, dict[str, str]]:
        return {n: dict(c) for (t, n), c in self.store.items() if t == entity_type and c}

    def list_user_clients(self) -> dict[tuple[str, str], dict[str, str]]:
        return {(t[6:-8], n): dict(c) for (t, n), c in self.store.items() if t.startswith("users/") and c}

    def static_configs(self, broker: str) -> dict[str, str] | None:
        return {"broker.id": "1", "log.dirs": "/data"} if broker == "1" else None


def configs() -> tuple[ConfigRequests, AdminZk, Entities]:
    zk = AdminZk()
    zk.add_broker(1)
    zk.add_topic("t", {0: [1]}, {"retention.ms": "1000"})
    entities = Entities()
    return ConfigRequests(TopicAdmin(zk), entities, 1, 100), zk, entities  # type: ignore[arg-type]


def test_describe_topic_and_broker_configs() -> None:
    async def main() -> None:
        service, _, entities = configs()
        entries = {e.name: e for e in await service.describe(ConfigResource(ResourceType.TOPIC, "t"))}
        assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert [(s.name, s.source) for s in entries["retention.ms"].synonyms] == [
            ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG), ("log.retention.ms", ConfigSource.DEFAULT_CONFIG)]
        assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG
        only = await service.describe(ConfigResource(ResourceType.TOPIC, "t"), ["retention.ms", "nope"])
        assert [e.name for e in only] == ["retention.ms"]
        with pytest.raises(UnknownTopicError):
            await service.describe(ConfigResource(ResourceType.TOPIC, "missing"))
        entities.store[("brokers", "1")] = {"follower.replication.throttled.rate": "10"}
        entities.store[("brokers", DEFAULT_ENTITY)] = {"follower.replication.throttled.rate": "20",
                                                       "leader.replication.throttled.rate": "30"}
        broker = {e.name: e for e in await service.describe(ConfigResource(ResourceType.BROKER, "1"))}
        assert broker["broker.id"].read_only and broker["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG
        rate = broker["follower.replication.throttled.rate"]
        assert (rate.value, rate.source, rate.read_only) == ("10", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
        assert [s.source for s in rate.synonyms] == [ConfigSource.DYNAMIC_BROKER_CONFIG,
                                                     ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        assert broker["leader.replication.throttled.rate"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        default = await service.describe(ConfigResource(ResourceType.BROKER, ""))
        assert [(e.name, e.value) for e in default] == [("follower.replication.throttled.rate", "20"),
                                                        ("leader.replication.throttled.rate", "30")]
        for name in ("2", "x"):
            with pytest.raises(InvalidRequestError):
                await service.describe(ConfigResource(ResourceType.BROKER, name))
        with pytest.raises(InvalidRequestError):
            await service.describe(ConfigResource(ResourceType.BROKER_LOGGER, "1"))

    asyncio.run(main())


def test_incremental_alter_applies_kafkas_four_operations() -> None:
    async def main() -> None:
        service, zk, entities = configs()
        topic = ConfigResource(ResourceType.TOPIC, "t")
        await service.incremental_alter(topic, [AlterOp("cleanup.policy", OpType.APPEND, "compact"),
                                                AlterOp("retention.ms", OpType.DELETE, None),
                                                AlterOp("max.message.bytes", OpType.SET, "2048")])
        assert zk.configs["t"] == {"cleanup.policy": "delete,compact", "max.message.bytes": "2048"}
        await service.incremental_alter(topic, [AlterOp("cleanup.policy", OpType.SUBTRACT, "delete"),
                                                AlterOp("segment.ms", OpType.DELETE, None)])  # absent: fine
        assert zk.configs["t"]["cleanup.policy"] == "compact"
        await service.incremental_alter(topic, [AlterOp("max.message.bytes", OpType.SET, "1")], validate_only=True)
        assert zk.configs["t"]["max.message.bytes"] == "2048"
        for ops, error in (
            ([AlterOp("retention.ms", OpType.APPEND, "1")], InvalidRequestError),
            ([AlterOp("no.such", OpType.APPEND, "1")], InvalidConfigError),
            ([AlterOp("retention.ms", OpType.SET, "1"), AlterOp("retention.ms", OpType.DELETE, None)],
             InvalidRequestError),
            ([AlterOp("retention.ms", OpType.SET, None)], InvalidRequestError),
            ([AlterOp("retention.ms", 7, "1")], InvalidRequestError),
            ([AlterOp("retention.ms", OpType.SET, "x" * 101)], PolicyViolationError),
            ([AlterOp("retention.ms", OpType.SET, "soon")], InvalidConfigError),
        ):
            with pytest.raises(error):
                await service.incremental_alter(topic, ops)
        broker = ConfigResource(ResourceType.BROKER, "1")
        await service.incremental_alter(broker, [AlterOp("log.cleanup.policy", OpType.APPEND, "compact")])
        assert entities.store[("brokers", "1")] == {"log.cleanup.policy": "delete,compact"}
        with pytest.raises(InvalidConfigError):
            await service.incremental_alter(broker, [AlterOp("broker.id", OpType.SET, "2")])
        writes = entities.writes
        await service.incremental_alter(broker, [AlterOp("message.max.bytes", OpType.DELETE, None)])
        assert entities.writes == writes  # nothing to change, nothing written

    asyncio.run(main())


def test_alter_configs_replaces_the_whole_set() -> None:
    async def main() -> None:
        service, zk, entities = configs()
        await service.alter(ConfigResource(ResourceType.TOPIC, "t"), {"segment.ms": "5000"})
        assert zk.configs["t"] == {"segment.ms": "5000"}
        with pytest.raises(InvalidRequestError):
            await service.alter(ConfigResource(ResourceType.TOPIC, "t"), {"segment.ms": None})
        entities.store[("brokers", DEFAULT_ENTITY)] = {"message.max.bytes": "100"}
        await service.alter(ConfigResource(ResourceType.BROKER, ""), {"min.insync.replicas": "2"})
        assert entities.store[("brokers", DEFAULT_ENTITY)] == {"min.insync.replicas": "2"}
        await service.alter(ConfigResource(ResourceType.BROKER, ""), {}, validate_only=True)
        assert entities.store[("brokers", DEFAULT_ENTITY)] == {"min.insync.replicas": "2"}

    asyncio.run(main())


def test_config_entries_without_overrides_are_defaults() -> None:
    entries = topic_entries({}, {"retention.ms": "604800000", "min.insync.replicas": "1"})
    assert all(e.source == ConfigSource.DEFAULT_CONFIG and not e.read_only for e in entries)
    default = broker_entries({"broker.id": "1"}, {"a": "1"}, {"b": "2"}, ["a", "b"], per_broker=False)
    assert [(e.name, e.source) for e in default] == [("b", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


# ----------------------------------------------------------------------------------------------------- ACLs


def binding(name: str = "orders", pattern: str = "LITERAL", **kw: str) -> AclBinding:
    fields = {"resource_type": "Topic", "name": name, "pattern": pattern, "principal": "User:alice", "host": "*",
              "operation": "Read", "permission": "Allow", **kw}
    return AclBinding(**fields)


def test_acl_filters_match_as_kafkas() -> None:
    literal, prefixed, wildcard = binding(), binding("ord", "PREFIXED"), binding("*")
    match = AclFilter(name="orders", pattern="MATCH")
    assert [b for b in (literal, prefixed, wildcard, binding("other")) if match.matches(b)] == [
        literal, prefixed, wildcard]
    assert [b for b in (literal, prefixed) if AclFilter(name="ord").matches(b)] == [prefixed]  # ANY: exact name
    assert not AclFilter(name="orders", pattern="PREFIXED").matches(literal)
    assert AclFilter().matches(literal) and not AclFilter(resource_type="Group").matches(literal)
    assert not AclFilter(operation="Write").matches(literal) and AclFilter(permission="Allow").matches(literal)
    assert not AclFilter(principal="User:bob").matches(literal) and AclFilter(host="*").matches(literal)


def test_acl_bindings_are_checked_as_kafka_checks_them() -> None:
    check_binding(binding())
    for bad in (binding(resource_type="User"), binding(pattern="MATCH"), binding(""), binding("a/b"),
                binding(resource_type="Cluster", name="other"), binding(principal="alice"), binding(host=""),
                binding(operation="Fly"), binding(permission="Maybe")):
        with pytest.raises(InvalidRequestError):
            check_binding(bad)


def test_acl_admin_creates_lists_and_deletes() -> None:
    async def main() -> None:
        admin = AclAdmin(fake_client()[0])  # the real store, over an in-memory kazoo
        a, b = binding(), binding("ord", "PREFIXED", operation="Write", permission="Deny")
        created = await admin.create([a, b, binding("")])
        assert created[:2] == [None, None] and isinstance(created[2], InvalidRequestError)
        assert await admin.describe(AclFilter(name="orders", pattern="MATCH")) == sorted([a, b])
        removed = await admin.delete([AclFilter(pattern="PREFIXED"), AclFilter(operation="Read")])
        assert removed == [[b], [a]] and await admin.describe(AclFilter()) == []

    asyncio.run(main())


# ------------------------------------------------------------------------------------------- client quotas


def test_client_quotas_describe_matches_as_kafka() -> None:
    async def main() -> None:
        entities = Entities()
        entities.store[("clients", "app")] = {"producer_byte_rate": "100"}
        entities.store[("clients", DEFAULT_ENTITY)] = {"consumer_byte_rate": "200"}
        entities.store[("users", "alice")] = {"request_percentage": "12.5", "SCRAM-SHA-256": "secret"}
        entities.store[("users/alice/clients", "app")] = {"producer_byte_rate": "300"}
        entities.store[("users", "bob")] = {"SCRAM-SHA-256": "secret"}  # credentials only: not a quota entity
        quotas = ClientQuotaAdmin(entities)  # type: ignore[arg-type]
        everything = await quotas.describe([])
        assert everything == {
            (("client-id", "app"),): {"producer_byte_rate": 100.0},
            (("client-id", None),): {"consumer_byte_rate": 200.0},
            (("user", "alice"),): {"request_percentage": 12.5},
            (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 300.0},
        }
        exact = await quotas.describe([QuotaComponent("client-id", MatchType.EXACT, "app")])
        assert set(exact) == {(("client-id", "app"),), (("client-id", "app"), ("user", "alice"))}
        strict = await quotas.describe([QuotaComponent("client-id", MatchType.EXACT, "app")], strict=True)
        assert set(strict) == {(("client-id", "app"),)}
        assert set(await quotas.describe([QuotaComponent("client-id", MatchType.DEFAULT)])) == {
            (("client-id", None),)}
        assert len(await quotas.describe([QuotaComponent("user", MatchType.SPECIFIED)])) == 2
        assert await quotas.describe([QuotaComponent("ip", MatchType.SPECIFIED)]) == {}
        for bad in ([QuotaComponent("user", 0, "a"), QuotaComponent("user", 0, "b")], [QuotaComponent("x", 2)],
                    [QuotaComponent("ip", 2), QuotaComponent("user", 2)], [QuotaComponent("user", 0)],
                    [QuotaComponent("user", 9)]):
            with pytest.raises(InvalidRequestError):
                await quotas.describe(bad)

    asyncio.run(main())


def test_client_quotas_alter() -> None:
    async def main() -> None:
        entities = Entities()
        quotas = ClientQuotaAdmin(entities)  # type: ignore[arg-type]
        out = await quotas.alter([
            ([("client-id", "app")], [QuotaOp("producer_byte_rate", 1024.0), QuotaOp("request_percentage", 2.5)]),
            ([("user", "alice"), ("client-id", None)], [QuotaOp("consumer_byte_rate", 10.0)]),
            ([("user", None)], [QuotaOp("consumer_byte_rate", 0.0, remove=True)]),  # absent: fine
            ([("client-id", "x")], [QuotaOp("producer_byte_rate", 1.5)]),
            ([("client-id", "x")], [QuotaOp("SCRAM-SHA-256", 1.0)]),
            ([("ip", "10.0.0.1")], [QuotaOp("connection_creation_rate", 1.0)]),
            ([("client-id", "")], [QuotaOp("producer_byte_rate", 1.0)]),
            ([], [QuotaOp("producer_byte_rate", 1.0)]),
            ([("client-id", "x")], [QuotaOp("producer_byte_rate", 0.0)]),
        ])
        assert out[:3] == [None, None, None]
        assert [type(e) for e in out[3:]] == [InvalidRequestError] * 5 + [InvalidConfigError]
        assert entities.store[("clients", "app")] == {"producer_byte_rate": "1024", "request_percentage": "2.5"}
        assert entities.store[("users/alice/clients", DEFAULT_ENTITY)] == {"consumer_byte_rate": "10"}
        out = await quotas.alter([([("client-id", "app")], [QuotaOp("producer_byte_rate", 0.0, remove=True)])])
        assert out == [None] and entities.store[("clients", "app")] == {"request_percentage": "2.5"}
        await quotas.alter([([("client-id", "app")], [QuotaOp("request_percentage", 9.0)])], validate_only=True)
        assert entities.store[("clients", "app")] == {"request_percentage": "2.5"}

    asyncio.run(main())
