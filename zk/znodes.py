"""Every znode Odradek uses: its path and its payload codec, in one place (as Kafka's ``ZkData.scala``).

Nobody outside this module builds a ZooKeeper path. The layout is classic Kafka's, so a Kafka operator's
``zkCli.sh ls /brokers/ids`` habits work unchanged, and payloads keep Kafka's JSON shapes and quirks (string
timestamps, ``"version":"1"`` as a string in ``/cluster/id``, bare ASCII digits in ``/controller_epoch``):

    /cluster/id                                   {"version":"1","id":"<22-char urlsafe base64 uuid>"}
    /controller                    ephemeral      {"version":1,"brokerid":N,"timestamp":"<ms>"}
    /controller_epoch                             5
    /controller_election/          kazoo Election lock children (Odradek: who may claim /controller)
    /brokers/ids/<id>              ephemeral      broker registration (v5 shape, HTTP endpoints, kafka_endpoints)
    /brokers/topics/<t>                           {"version":3,"partitions":{"0":[1,2,3]},...}
    /brokers/topics/<t>/partitions/<p>/state      {"controller_epoch":7,"leader":2,"version":1,
                                                   "leader_epoch":13,"isr":[2,3]}
    /brokers/seqid
    /admin/delete_topics/<t>
    /admin/reassign_partitions                    {"version":1,"partitions":[{"topic","partition","replicas"}]}
    /admin/preferred_replica_election             {"version":1,"partitions":[{"topic","partition"}]}
    /config/<entity type>/<name>                  {"version":1,"config":{"k":"v"}}
    /config/users/<user>/clients/<client id>      same shape (Kafka's nested user+client quota entity)
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/foo"}
    /isr_change_notification/isr_change_<seq>     {"version":1,"partitions":[{"topic","partition"}]}
    /consumers/<group>/offsets/<t>/<p>            decimal offset string (next offset to consume)
    /topic_name_claims/<t with '.' as '_'>        {"version":1,"topic":"a.b"} (Odradek: see TopicNameClaimZNode)

The one addition to Kafka's layout is ``/controller_election``: the owner's design has brokers contend with
kazoo's Election recipe, and the winner then claims ``/controller`` exactly as Kafka does (see zk.client).
All paths are relative to the chroot given in the connect string (``host:2181,host:2182/odradek``).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, unquote

import orjson

from odradek.protocol.model import BrokerInfo, KafkaEndpoint, LeaderAndIsr, TopicAssignment, TopicPartition

# the codecs' value types, re-exported
__all__ = ["BrokerInfo", "KafkaEndpoint", "LeaderAndIsr", "TopicAssignment", "TopicPartition"]


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _loads(data: bytes | None) -> Any:
    if not data:
        return None
    return orjson.loads(data)


def now_ms_string() -> str:
    return str(int(time.time() * 1000))


# ---------------------------------------------------------------------------------------------- cluster id


class ClusterIdZNode:
    path = "/cluster/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dumps({"version": "1", "id": cluster_id})

    @staticmethod
    def decode(data: bytes) -> str:
        return str(_loads(data)["id"])


# ----------------------------------------------------------------------------------------------- controller


class ControllerZNode:
    path = "/controller"

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return _dumps({"version": 1, "brokerid": broker_id, "timestamp": now_ms_string()})

    @staticmethod
    def decode(data: bytes) -> int | None:
        obj = _loads(data)
        return None if obj is None else int(obj["brokerid"])


class ControllerEpochZNode:
    """Bare ASCII digits, not JSON, as in Kafka. Its zkVersion is the cluster-wide fencing token."""

    path = "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode()

    @staticmethod
    def decode(data: bytes) -> int:
        return int(data.decode() or "0")


class ControllerElectionZNode:
    path = "/controller_election"


class SchemaRegistryElectionZNode:
    """kazoo's Election recipe for the Schema Registry's primary (broker/schema_registry/): contenders are
    sequential ephemeral children named by the recipe, their data the broker id; the first child leads. Only
    the primary writes the ``_schemas`` topic and allocates schema ids."""

    path = "/schema_registry/primary_election"


class SchemaRegistryWriterZNode:
    """Persistent: the producer id and epoch the Schema Registry's primary writes ``_schemas`` with. Each new
    primary bumps the epoch, conditionally on the zkVersion (so no two primaries ever hold one epoch), and
    appends a fence record with it before its first change: the partition's producer state then refuses any
    later batch of an older epoch (a deposed primary's), and every batch that came before the fence is in the
    log the new primary reads before it plans a change."""

    path = "/schema_registry/writer"
    MAX_EPOCH = 32766  # a producer epoch is an int16; past this a new producer id starts at 0

    @staticmethod
    def encode(producer_id: int, producer_epoch: int) -> bytes:
        return _dumps({"version": 1, "producer_id": producer_id, "producer_epoch": producer_epoch})

    @staticmethod
    def decode(data: bytes | None) -> tuple[int, int] | None:
        """(producer id, epoch), or None for a node not written yet."""
        if not data:
            return None
        obj = _loads(data)
        return int(obj["producer_id"]), int(obj["producer_epoch"])


# -------------------------------------------------------------------------------------------------- brokers




class BrokerIdsZNode:
    path = "/brokers/ids"


class BrokerIdZNode:
    VERSION = 5

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{BrokerIdsZNode.path}/{broker_id}"

    @staticmethod
    def encode(info: BrokerInfo) -> bytes:
        obj: dict[str, Any] = {
            "version": BrokerIdZNode.VERSION,
            "host": info.host,
            "port": info.port,
            "jmx_port": -1,
            "timestamp": str(info.timestamp_ms or int(time.time() * 1000)),
            "endpoints": [e for e, _ in info.endpoints] or [f"HTTP://{info.host}:{info.port}"],
            "listener_security_protocol_map": {e.partition(":")[0]: proto for e, proto in info.endpoints}
            or {"HTTP": "PLAINTEXT"},
            "features": {},
        }
        if info.rack is not None:
            obj["rack"] = info.rack
        if info.kafka_endpoints:  # only then: a broker without a Kafka listener writes no kafka_endpoints key
            obj["kafka_endpoints"] = [
                {"listener": e.listener, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                for e in info.kafka_endpoints]
        return _dumps(obj)

    @staticmethod
    def decode(broker_id: int, data: bytes, czxid: int = -1) -> BrokerInfo:
        obj = _loads(data)
        host, port = str(obj["host"]), int(obj["port"])
        protocols = obj.get("listener_security_protocol_map") or {}
        endpoints = () if protocols == {"HTTP": "PLAINTEXT"} else tuple(  # () = the registration before listeners
            (str(e), str(protocols.get(str(e).partition(":")[0], "PLAINTEXT"))) for e in obj.get("endpoints") or [])
        # host:port is the inter-broker listener's: its protocol says whether the broker's URL is https.
        tls = any(e.endswith(f"://{host}:{port}") and proto in ("SSL", "SASL_SSL") for e, proto in endpoints)
        return BrokerInfo(
            broker_id=broker_id,
            host=host,
            port=port,
            rack=obj.get("rack"),
            timestamp_ms=int(obj.get("timestamp", 0)),
            epoch=czxid,
            scheme="https" if tls else "http",
            endpoints=endpoints,
            # Absent from registrations written before the Kafka listener existed: no Kafka endpoint.
            kafka_endpoints=tuple(
                KafkaEndpoint(str(e["listener"]), str(e["host"]), int(e["port"]),
                              str(e.get("security_protocol", "PLAINTEXT")))
                for e in obj.get("kafka_endpoints") or ()),
        )


class BrokerSeqIdZNode:
    path = "/brokers/seqid"


# --------------------------------------------------------------------------------------------------- topics




class TopicsZNode:
    path = "/brokers/topics"


class TopicZNode:
    VERSION = 3

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicsZNode.path}/{topic}"

    @staticmethod
    def encode(assignment: TopicAssignment) -> bytes:
        def by_str(d: dict[int, list[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(d.items())}

        obj: dict[str, Any] = {
            "version": TopicZNode.VERSION,
            "partitions": by_str(assignment.partitions),
            "adding_replicas": by_str(assignment.adding_replicas),
            "removing_replicas": by_str(assignment.removing_replicas),
        }
        if assignment.topic_id is not None:
            obj["topic_id"] = assignment.topic_id
        return _dumps(obj)

    @staticmethod
    def decode(data: bytes) -> TopicAssignment:
        obj = _loads(data)

        def by_int(d: dict[str, list[int]] | None) -> dict[int, list[int]]:
            return {int(p): [int(b) for b in r] for p, r in (d or {}).items()}

        return TopicAssignment(
            partitions=by_int(obj.get("partitions")),
            topic_id=obj.get("topic_id"),
            adding_replicas=by_int(obj.get("adding_replicas")),
            removing_replicas=by_int(obj.get("removing_replicas")),
        )


class TopicPartitionsZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionsZNode.path(topic)}/{partition}"




class TopicPartitionStateZNode:
    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: LeaderAndIsr) -> bytes:
        return _dumps(
            {
                "controller_epoch": state.controller_epoch,
                "leader": state.leader,
                "version": 1,
                "leader_epoch": state.leader_epoch,
                "isr": list(state.isr),
            }
        )

    @staticmethod
    def decode(data: bytes) -> LeaderAndIsr:
        obj = _loads(data)
        return LeaderAndIsr(
            leader=int(obj["leader"]),
            leader_epoch=int(obj["leader_epoch"]),
            isr=[int(b) for b in obj["isr"]],
            controller_epoch=int(obj["controller_epoch"]),
        )


class TopicNameClaimsZNode:
    path = "/topic_name_claims"


class TopicNameClaimZNode:
    """Persistent, an Odradek addition: the topic that holds a collision key, the name with '.' made '_' (Kafka's
    ``Topic.unifyCollisionChars``: ``a.b`` and ``a_b`` share one metric name, so Kafka refuses the second).

    Created in the same multi as the topic's own znodes and deleted in the same multi as them, so of two racing
    creations of colliding names ZooKeeper lets exactly one through (the other's multi fails on this node).
    Topics from before the claims have none; zk.client and broker.admin.topics say how they are handled.
    """

    @staticmethod
    def key(topic: str) -> str:
        return topic.replace(".", "_")

    @staticmethod
    def path(topic: str) -> str:
        """The claim ``topic`` needs: the same node for every name that collides with it."""
        return f"{TopicNameClaimsZNode.path}/{TopicNameClaimZNode.key(topic)}"

    @staticmethod
    def encode(topic: str) -> bytes:
        return _dumps({"version": 1, "topic": topic})

    @staticmethod
    def decode(data: bytes | None) -> str | None:
        """The holding topic's name; None for an empty or foreign payload (a claim nobody can be said to hold)."""
        try:
            obj = _loads(data)
        except orjson.JSONDecodeError:
            return None
        topic = obj.get("topic") if isinstance(obj, dict) else None
        return topic if isinstance(topic, str) and topic else None


# ---------------------------------------------------------------------------------------------------- admin


class AdminZNode:
    path = "/admin"


class DeleteTopicsZNode:
    path = "/admin/delete_topics"


class DeleteTopicZNode:
    @staticmethod
    def path(topic: str) -> str:
        return f"{DeleteTopicsZNode.path}/{topic}"




class ReassignPartitionsZNode:
    path = "/admin/reassign_partitions"

    @staticmethod
    def encode(moves: dict[TopicPartition, list[int]]) -> bytes:
        parts = [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
            for tp, replicas in sorted(moves.items(), key=lambda kv: (kv[0].topic, kv[0].partition))
        ]
        return _dumps({"version": 1, "partitions": parts})

    @staticmethod
    def decode(data: bytes) -> dict[TopicPartition, list[int]]:
        obj = _loads(data) or {}
        return {
            TopicPartition(str(p["topic"]), int(p["partition"])): [int(b) for b in p["replicas"]]
            for p in obj.get("partitions", [])
        }


class PreferredReplicaElectionZNode:
    path = "/admin/preferred_replica_election"

    @staticmethod
    def encode(partitions: list[TopicPartition]) -> bytes:
        return _dumps(
            {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
        )

    @staticmethod
    def decode(data: bytes) -> list[TopicPartition]:
        obj = _loads(data) or {}
        return [TopicPartition(str(p["topic"]), int(p["partition"])) for p in obj.get("partitions", [])]


# --------------------------------------------------------------------------------------------------- config


CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")


class ConfigEntityTypeZNode:
    @staticmethod
    def path(entity_type: str) -> str:
        if entity_type not in CONFIG_ENTITY_TYPES:
            raise ValueError(f"unknown config entity type {entity_type!r}")
        return f"/config/{entity_type}"


class ConfigEntityZNode:
    """Entity configs; every value is a string, as Kafka stores them."""

    @staticmethod
    def path(entity_type: str, name: str) -> str:
        return f"{ConfigEntityTypeZNode.path(entity_type)}/{name}"

    @staticmethod
    def user_client_path(user: str, client: str | None = None) -> str:
        """Kafka's nested ``/config/users/<user>/clients[/<client id>]`` (sanitized names)."""
        return f"/config/users/{user}/clients" + ("" if client is None else f"/{client}")

    @staticmethod
    def encode(config: dict[str, str]) -> bytes:
        return _dumps({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})

    @staticmethod
    def decode(data: bytes | None) -> dict[str, str]:
        obj = _loads(data)
        return {} if obj is None else {str(k): str(v) for k, v in obj.get("config", {}).items()}


class ConfigChangesZNode:
    path = "/config/changes"
    prefix = "/config/changes/config_change_"

    @staticmethod
    def encode(entity_type: str, name: str) -> bytes:
        return _dumps({"version": 2, "entity_path": f"{entity_type}/{name}"})

    @staticmethod
    def decode(data: bytes) -> tuple[str, str]:
        entity_type, _, name = str(_loads(data)["entity_path"]).partition("/")
        return entity_type, name


class IsrChangeNotificationZNode:
    path = "/isr_change_notification"
    prefix = "/isr_change_notification/isr_change_"

    @staticmethod
    def encode(partitions: list[TopicPartition]) -> bytes:
        return PreferredReplicaElectionZNode.encode(partitions)

    @staticmethod
    def decode(data: bytes) -> list[TopicPartition]:
        return PreferredReplicaElectionZNode.decode(data)


# ------------------------------------------------------------------------------------------------ consumers


class ConsumersZNode:
    path = "/consumers"


class ConsumerGroupZNode:
    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumersZNode.path}/{group}"


class ConsumerOffsetZNode:
    """The next offset a group will consume, as a decimal string (the old ZooKeeper consumer's format)."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return f"{ConsumerGroupZNode.path(group)}/offsets/{topic}/{partition}"

    @staticmethod
    def encode(offset: int) -> bytes:
        return str(offset).encode()

    @staticmethod
    def decode(data: bytes) -> int:
        return int(data.decode())


# Created at broker startup if missing (Kafka's PersistentZkPaths), parents before children.
PERSISTENT_PATHS: tuple[str, ...] = (
    ConsumersZNode.path,
    BrokerIdsZNode.path,
    TopicsZNode.path,
    ConfigChangesZNode.path,
    DeleteTopicsZNode.path,
    BrokerSeqIdZNode.path,
    IsrChangeNotificationZNode.path,
    ControllerElectionZNode.path,
    TopicNameClaimsZNode.path,
    *(ConfigEntityTypeZNode.path(t) for t in CONFIG_ENTITY_TYPES),
)


# ===================================================================================================== groups
# Consumer groups: coordinated by one broker, kept in ZooKeeper. The contract with clients and the
# layout is docs/consumer-groups.md; zk/groups.py holds the verbs. Offsets are JSON here (with metadata and
# commit time); ConsumerOffsetZNode above keeps the old consumer's bare decimal format, which
# ConsumerGroupOffsetZNode.decode also reads.


class ConsumerGroupIdsZNode:
    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumerGroupZNode.path(group)}/ids"


class CoordinatorZNode:
    """The one codec of both coordinator znodes (the claim, read and release verbs: zk/coordinators.py).
    Ephemeral for the coordinating broker's session: one broker coordinates a group or a transactional id at
    a time. A payload without ``epoch`` decodes with epoch -1."""

    @staticmethod
    def encode(broker_id: int, epoch: int) -> bytes:
        return _dumps({"version": 1, "broker_id": broker_id, "epoch": epoch})

    @staticmethod
    def decode(data: bytes) -> tuple[int, int]:
        obj = _loads(data)
        return int(obj["broker_id"]), int(obj.get("epoch", -1))


class ConsumerGroupCoordinatorZNode(CoordinatorZNode):
    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumerGroupZNode.path(group)}/coordinator"


class ConsumerGroupMemberZNode:
    """Ephemeral for the coordinator's session: a member's registration (for operators and for a new
    coordinator's view; the member itself never talks to ZooKeeper)."""

    @staticmethod
    def path(group: str, member_id: str) -> str:
        return f"{ConsumerGroupIdsZNode.path(group)}/{member_id}"

    @staticmethod
    def encode(member: dict[str, Any]) -> bytes:
        return _dumps({"version": 1, **member})

    @staticmethod
    def decode(data: bytes) -> dict[str, Any]:
        obj = dict(_loads(data) or {})
        obj.pop("version", None)
        return obj


class ConsumerGroupStateZNode:
    """Persistent: generation, protocol, state and assignment, so a new coordinator can rebuild the group.

    ``members`` (an Odradek addition to the documented shape) keeps each member's timeouts and subscription,
    because the ephemeral ids nodes die with the old coordinator's session."""

    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumerGroupZNode.path(group)}/state"

    @staticmethod
    def encode(state: dict[str, Any]) -> bytes:
        return _dumps({"version": 1, **state})

    @staticmethod
    def decode(data: bytes) -> dict[str, Any]:
        obj = dict(_loads(data) or {})
        obj.pop("version", None)
        return obj


class ConsumerGroupOwnersZNode:
    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumerGroupZNode.path(group)}/owners"

    @staticmethod
    def topic_path(group: str, topic: str) -> str:
        return f"{ConsumerGroupOwnersZNode.path(group)}/{topic}"


class ConsumerGroupOwnerZNode:
    """Ephemeral, data = the owning member id. The create is the claim: at most one owner at any moment."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return f"{ConsumerGroupOwnersZNode.topic_path(group, topic)}/{partition}"

    @staticmethod
    def encode(member_id: str) -> bytes:
        return member_id.encode()

    @staticmethod
    def decode(data: bytes) -> str:
        return data.decode()


class ConsumerGroupOffsetsZNode:
    @staticmethod
    def path(group: str) -> str:
        return f"{ConsumerGroupZNode.path(group)}/offsets"

    @staticmethod
    def topic_path(group: str, topic: str) -> str:
        return f"{ConsumerGroupOffsetsZNode.path(group)}/{topic}"


class ConsumerGroupOffsetZNode:
    """Persistent: the next offset to read, with the committer's metadata and the commit time (ms)."""

    @staticmethod
    def path(group: str, topic: str, partition: int) -> str:
        return ConsumerOffsetZNode.path(group, topic, partition)

    @staticmethod
    def encode(offset: int, metadata: str, commit_timestamp: int) -> bytes:
        return _dumps({"version": 1, "offset": offset, "metadata": metadata, "commit_timestamp": commit_timestamp})

    @staticmethod
    def decode(data: bytes) -> tuple[int, str, int]:
        """(offset, metadata, commit_timestamp); a bare decimal (old consumer) reads as no metadata, time 0."""
        text = data.decode().strip()
        if text.lstrip("-").isdigit():
            return int(text), "", 0
        obj = orjson.loads(data)
        return int(obj["offset"]), str(obj.get("metadata") or ""), int(obj.get("commit_timestamp") or 0)


# ============================================================================================ producer ids
class RestConsumerInstanceZNode:
    """Ephemeral: the broker holding a client-named REST Proxy consumer instance, as a decimal broker id, so a
    request for the instance that reaches another broker is forwarded in one hop (zk/rest_consumers.py). The
    last broker to create the name owns it; a broker deletes only a znode that names itself."""

    root = "/rest_consumers"

    @staticmethod
    def path(group: str, name: str) -> str:
        return f"{RestConsumerInstanceZNode.root}/{group}/{name}"

    @staticmethod
    def encode(broker_id: int) -> bytes:
        return str(broker_id).encode()

    @staticmethod
    def decode(data: bytes | None) -> int | None:
        try:
            return int((data or b"").decode())
        except ValueError:
            return None


class LatestProducerIdBlockZNode:
    """Persistent: the last block of producer ids any broker claimed (KIP-98). Kafka's shape, with the longs
    as strings; block ends are inclusive and the next block starts at the previous end + 1. Written only
    conditionally on its zkVersion, so two brokers never claim the same block."""

    path = "/latest_producer_id_block"

    @staticmethod
    def encode(broker_id: int, block_start: int, block_end: int) -> bytes:
        return _dumps({"version": 1, "broker": broker_id, "block_start": str(block_start),
                       "block_end": str(block_end)})

    @staticmethod
    def decode(data: bytes | None) -> tuple[int, int, int] | None:
        """(broker, block_start, block_end), or None for the empty node a fresh cluster starts with."""
        if not data:
            return None
        obj = _loads(data)
        return int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"])


# ------------------------------------------------------------------------------------ transactions (KIP-98)


class TransactionsZNode:
    """Persistent parent of every transactional id's node (docs/transactions.md)."""

    path = "/transactions"


class TransactionZNode:
    """Persistent: one transactional id's coordinator state (transaction_coordinator/state.py's JSON), written only
    conditionally on its zkVersion. The id is percent-encoded: transactional ids may hold '/'."""

    @staticmethod
    def path(transactional_id: str) -> str:
        return f"{TransactionsZNode.path}/{quote(transactional_id, safe='')}"

    @staticmethod
    def name_of(child: str) -> str:
        return unquote(child)

    @staticmethod
    def encode(state: dict[str, Any]) -> bytes:
        return _dumps(state)

    @staticmethod
    def decode(data: bytes) -> dict[str, Any]:
        return dict(_loads(data))


class TransactionCoordinatorZNode(CoordinatorZNode):
    @staticmethod
    def path(transactional_id: str) -> str:
        return f"{TransactionZNode.path(transactional_id)}/coordinator"
