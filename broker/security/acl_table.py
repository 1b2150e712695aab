"""What every route needs: ONE table from (method, path) to the operations and resources it must be allowed.

Why one table: an endpoint added without a rule would be open on a secured cluster, so the middleware
(broker/security/middleware.py) refuses any route missing here (500, logged), and a unit test checks that every
route of broker/api/app.py has a rule. Kafka's mapping is followed (kafka-classic.md 8.3): produce is Topic
Write, reads are Topic Read, consumer groups are Group Read, admin is Create/Delete/Alter/...Configs, and what
only brokers do (follower fetches, epoch queries, controlled shutdown, leader election) is Cluster ClusterAction.

A rule is a list of needs, all required; a need is (operation, resource type, names), where names come from the
path, the query or the (already read, size-checked) body. ``PUBLIC`` routes need nothing (liveness, the API
document); ``AUTHENTICATED`` ones need an identity and no ACL: the listings, whose handlers show only the items
the caller may Describe (broker/security/visibility.py, as Kafka's Metadata and ListGroups do).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from broker.security.authorizer import CLUSTER_NAME


class Body:
    """The request body as read by the limits middleware: raw bytes, and JSON parsed once if a rule asks."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._json: Any = _UNSET

    @property
    def json(self) -> Any:
        if self._json is _UNSET:
            self._json = body_json(self.raw)
        return self._json


_UNSET = object()
# (request, body) -> resource names
Names = Callable[[web.Request, Body], list[str]]


@dataclass(frozen=True, slots=True)
class Need:
    operation: str
    resource_type: str  # Topic | Group | Cluster | TransactionalId
    names: Names
    # Topic creation: Cluster Create is enough (Kafka: CreateTopics needs Cluster Create or Topic Create).
    or_cluster: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    needs: tuple[Need, ...] = ()
    public: bool = False  # no identity needed at all
    owner_checked: bool = False  # a REST consumer instance: only the principal that created it
    # A dynamic rule (the fetch route: a follower's fetch needs ClusterAction, a client's Topic Read).
    choose: Callable[[web.Request], Rule] | None = field(default=None)

    def resolve(self, request: web.Request) -> Rule:
        return self.choose(request) if self.choose is not None else self


def _path(key: str) -> Names:
    return lambda request, _body: [request.match_info[key]]


def _cluster(_request: web.Request, _body: Body) -> list[str]:
    return [CLUSTER_NAME]


def _body_key(key: str) -> Names:
    def names(_request: web.Request, raw: Body) -> list[str]:
        body = raw.json
        value = body.get(key) if isinstance(body, dict) else None
        return [value] if isinstance(value, str) else []
    return names


def _body_topics(_request: web.Request, raw: Body) -> list[str]:
    """v2 subscription ``topics`` and ``partitions: [{topic, partition}]`` (assignments, positions)."""
    body = raw.json
    if not isinstance(body, dict):
        return []
    out = [t for t in body.get("topics") or [] if isinstance(t, str)]
    out += [p["topic"] for p in body.get("partitions") or [] if isinstance(p, dict) and isinstance(p.get("topic"), str)]
    return sorted(set(out))


def _query_topic(request: web.Request, _body: Body) -> list[str]:
    return [request.query["topic"]] if "topic" in request.query else []


def body_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def rule(*needs: Need, owner: bool = False) -> Rule:
    return Rule(needs=tuple(needs), owner_checked=owner)


PUBLIC = Rule(public=True)
AUTHENTICATED = Rule()
TOPIC, GROUP, TID = _path("topic"), _path("group"), _path("tid")


def topic(op: str) -> Rule:
    return rule(Need(op, "Topic", TOPIC))


def cluster(op: str) -> Rule:
    return rule(Need(op, "Cluster", _cluster))


def group(op: str, owner: bool = False) -> Rule:
    return rule(Need(op, "Group", GROUP), owner=owner)


def txn(op: str) -> Rule:
    return rule(Need(op, "TransactionalId", TID))


def _idempotent_batches(_request: web.Request, raw: Body) -> list[str]:
    """Kafka checks Cluster IdempotentWrite on a produce of idempotent batches: the first batch's producerId
    (int64 at byte 43 of a v2 batch header) is set and it is not transactional (attributes bit 4, bytes 21-22;
    transactional writes were authorized by AddPartitionsToTxn's TransactionalId Write)."""
    head = raw.raw[:51]
    if len(head) < 51 or head[16] != 2:
        return []
    producer_id = int.from_bytes(head[43:51], "big", signed=True)
    transactional = bool(int.from_bytes(head[21:23], "big") & 0x10)
    return [CLUSTER_NAME] if producer_id >= 0 and not transactional else []


def _fetch_rule(request: web.Request) -> Rule:
    """GET .../batches: with ``replica_id`` it is a follower's fetch (moves the high watermark): ClusterAction."""
    return cluster("ClusterAction") if request.query.get("replica_id", "-1") not in ("", "-1") else topic("Read")


_T, _P = "/topics/{topic}", "/topics/{topic}/partitions/{partition}"
_C = "/v3/clusters/{cluster_id}"
_G, _I = "/groups/{group}", "/consumers/{group}/instances/{instance}"
_CG = f"{_C}/consumer-groups/{{group}}"
_S, _SV, _ID = "/subjects/{subject}", "/subjects/{subject}/versions/{version}", "/schemas/ids/{id}"
_SUBSCRIBE = rule(Need("Read", "Group", GROUP), Need("Read", "Topic", _body_topics), owner=True)

TABLE: dict[tuple[str, str], Rule] = {
    ("GET", "/health"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    # the web console (broker/api/console.py): its assets hold no data, so they need no identity (as
    # /openapi.json: a browser sends credentials only once the page's sign-in asked for them); its cluster view
    # asks each broker's /health, /admin/log_dirs and /metrics
    ("GET", "/ui"): PUBLIC,
    ("GET", "/ui/{asset}"): PUBLIC,
    ("GET", "/ui/api/brokers"): cluster("Describe"),
    ("GET", "/ui/api/zookeeper"): cluster("Describe"),
    ("POST", "/auth/token"): AUTHENTICATED,
    ("GET", "/metrics"): cluster("Describe"),
    ("GET", "/metadata"): AUTHENTICATED,
    ("GET", "/brokers"): AUTHENTICATED,
    ("GET", "/topics"): AUTHENTICATED,
    ("GET", _T): topic("Describe"),
    ("POST", _T): topic("Write"),
    ("GET", f"{_T}/partitions"): topic("Describe"),
    ("GET", _P): topic("Describe"),
    ("POST", _P): topic("Write"),
    ("GET", f"{_P}/offsets"): topic("Describe"),
    ("GET", f"{_P}/records"): topic("Read"),
    ("GET", f"{_P}/messages"): topic("Read"),  # REST Proxy v1's simple consumer (broker/api/v1.py)
    ("GET", f"{_P}/batches"): Rule(choose=_fetch_rule),
    ("POST", f"{_P}/batches"): rule(Need("Write", "Topic", TOPIC),
                                    Need("IdempotentWrite", "Cluster", _idempotent_batches)),
    ("GET", f"{_P}/epoch_end_offset"): cluster("ClusterAction"),
    ("POST", "/controller/controlled_shutdown"): cluster("ClusterAction"),
    ("POST", "/admin/preferred_leader_election"): cluster("ClusterAction"),
    ("POST", "/admin/unclean_leader_election"): cluster("ClusterAction"),
    ("GET", "/v3/clusters"): AUTHENTICATED,
    ("GET", _C): cluster("Describe"),
    ("GET", f"{_C}/brokers"): cluster("Describe"),
    ("GET", f"{_C}/brokers/{{broker_id}}"): cluster("Describe"),
    ("GET", f"{_C}/topics"): AUTHENTICATED,
    ("POST", f"{_C}/topics"): rule(Need("Create", "Topic", _body_key("topic_name"), or_cluster=True)),
    ("GET", f"{_C}/topics/{{topic}}"): topic("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions"): topic("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}"): topic("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}/replicas"): topic("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}/replicas/{{broker_id}}"): topic("Describe"),
    ("DELETE", f"{_C}/topics/{{topic}}"): topic("Delete"),
    ("PATCH", f"{_C}/topics/{{topic}}"): topic("Alter"),
    ("GET", f"{_C}/topics/{{topic}}/configs"): topic("DescribeConfigs"),
    ("POST", f"{_C}/topics/{{topic}}/configs:alter"): topic("AlterConfigs"),
    ("GET", f"{_C}/topics/{{topic}}/configs/{{name}}"): topic("DescribeConfigs"),
    ("PUT", f"{_C}/topics/{{topic}}/configs/{{name}}"): topic("AlterConfigs"),
    ("DELETE", f"{_C}/topics/{{topic}}/configs/{{name}}"): topic("AlterConfigs"),
    ("GET", "/groups"): AUTHENTICATED,  # Cluster Describe sees every group, others those they may Describe
    ("GET", _G): group("Describe"),
    ("DELETE", _G): group("Delete"),
    ("POST", f"{_G}/members"): group("Read"),
    ("POST", f"{_G}/members/{{member}}/heartbeat"): group("Read"),
    ("DELETE", f"{_G}/members/{{member}}"): group("Read"),
    ("GET", f"{_G}/offsets"): group("Describe"),
    ("POST", f"{_G}/offsets"): group("Read"),
    ("POST", f"{_G}/offsets/reset"): rule(Need("Read", "Group", GROUP), Need("Read", "Topic", _body_topics)),
    ("DELETE", f"{_G}/offsets"): rule(Need("Delete", "Group", GROUP), Need("Read", "Topic", _query_topic)),
    ("POST", "/consumers/{group}"): group("Read"),
    ("DELETE", _I): group("Read", owner=True),
    # REST Proxy v1's subscribe-and-read in one call: the group's and the topic's Read, as subscribe then read
    ("GET", f"{_I}/topics/{{topic}}"): rule(Need("Read", "Group", GROUP), Need("Read", "Topic", TOPIC), owner=True),
    ("POST", f"{_I}/subscription"): _SUBSCRIBE,
    ("GET", f"{_I}/subscription"): group("Read", owner=True),
    ("DELETE", f"{_I}/subscription"): group("Read", owner=True),
    ("POST", f"{_I}/assignments"): _SUBSCRIBE,
    ("GET", f"{_I}/assignments"): group("Read", owner=True),
    ("POST", f"{_I}/positions"): _SUBSCRIBE,
    ("POST", f"{_I}/positions/beginning"): _SUBSCRIBE,
    ("POST", f"{_I}/positions/end"): _SUBSCRIBE,
    ("GET", f"{_I}/records"): group("Read", owner=True),
    ("POST", f"{_I}/offsets"): group("Read", owner=True),
    ("GET", f"{_I}/offsets"): group("Read", owner=True),
    ("GET", f"{_C}/brokers/{{broker_id}}/configs"): cluster("DescribeConfigs"),
    ("POST", f"{_C}/brokers/{{broker_id}}/configs:alter"): cluster("AlterConfigs"),
    ("GET", f"{_C}/broker-configs"): cluster("DescribeConfigs"),
    ("POST", f"{_C}/broker-configs:alter"): cluster("AlterConfigs"),
    ("GET", f"{_C}/{{entity_type:clients|users}}"): cluster("DescribeConfigs"),
    ("GET", f"{_C}/{{entity_type:clients|users}}/{{name}}/configs"): cluster("DescribeConfigs"),
    ("POST", f"{_C}/{{entity_type:clients|users}}/{{name}}/configs:alter"): cluster("AlterConfigs"),
    # Confluent v3 groups, produce, ACLs, reassignments (broker/api/*_v3.py): Kafka's DescribeGroups and OffsetFetch
    # (Group Describe; lags show only topics the caller may Describe), Produce, Describe/Create/DeleteAcls and
    # ListPartitionReassignments rules.
    ("GET", f"{_C}/consumer-groups"): AUTHENTICATED,  # Cluster Describe sees every group, others those they may
    ("GET", f"{_CG}"): group("Describe"),
    ("GET", f"{_CG}/consumers"): group("Describe"),
    ("GET", f"{_CG}/consumers/{{consumer}}"): group("Describe"),
    ("GET", f"{_CG}/consumers/{{consumer}}/assignments"): group("Describe"),
    ("GET", f"{_CG}/consumers/{{consumer}}/assignments/{{topic}}/partitions/{{partition}}"): group("Describe"),
    ("GET", f"{_CG}/lags"): group("Describe"),
    ("GET", f"{_CG}/lags/{{topic}}/partitions/{{partition}}"): group("Describe"),
    ("GET", f"{_CG}/lag-summary"): group("Describe"),
    ("POST", f"{_C}/topics/{{topic}}/records"): topic("Write"),
    ("GET", f"{_C}/acls"): cluster("Describe"),
    ("POST", f"{_C}/acls"): cluster("Alter"),
    ("POST", f"{_C}/acls:batch"): cluster("Alter"),
    ("DELETE", f"{_C}/acls"): cluster("Alter"),
    ("GET", f"{_C}/topics/-/partitions/-/reassignment"): cluster("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions/-/reassignment"): cluster("Describe"),
    ("GET", f"{_C}/topics/{{topic}}/partitions/{{partition}}/reassignment"): cluster("Describe"),
    ("GET", "/admin/reassign_partitions"): cluster("Describe"),
    ("POST", "/admin/reassign_partitions"): cluster("Alter"),
    ("POST", "/admin/reassign_partitions/cancel"): cluster("Alter"),
    ("GET", "/admin/log_dirs"): cluster("Describe"),
    ("POST", "/producer_ids"): cluster("IdempotentWrite"),
    # Transactions (Kafka: InitProducerId/EndTxn need TransactionalId Write, AddPartitionsToTxn also Topic Write,
    # AddOffsetsToTxn also Group Read; WriteTxnMarkers is inter-broker: ClusterAction).
    ("POST", "/transactions/markers"): cluster("ClusterAction"),
    ("POST", "/transactions/{tid}/init"): txn("Write"),
    ("POST", "/transactions/{tid}/partitions"): rule(Need("Write", "TransactionalId", TID),
                                                     Need("Write", "Topic", _body_topics)),
    ("POST", "/transactions/{tid}/offsets"): rule(Need("Write", "TransactionalId", TID),
                                                  Need("Read", "Group", _body_key("group"))),
    ("POST", "/transactions/{tid}/end"): txn("Write"),
    ("GET", "/transactions/{tid}"): txn("Describe"),
    # Confluent Schema Registry (broker/api/schema_registry.py; docs/schema-registry.md): reading, looking up,
    # checking and registering need an identity (a producer's serializer registers); deleting and changing
    # configs or modes are Cluster Alter; the primary's forwarded writes are inter-broker (ClusterAction).
    **{(m, p): AUTHENTICATED for m, p in (
        ("GET", "/subjects"), ("POST", _S), ("GET", f"{_S}/versions"), ("POST", f"{_S}/versions"), ("GET", _SV),
        ("GET", f"{_SV}/schema"), ("GET", f"{_SV}/referencedby"), ("GET", "/schemas/types"), ("GET", _ID),
        ("GET", f"{_ID}/schema"), ("GET", f"{_ID}/versions"), ("GET", f"{_ID}/subjects"), ("GET", "/config"),
        ("GET", "/config/{subject}"), ("GET", "/mode"), ("GET", "/mode/{subject}"),
        ("POST", "/compatibility/subjects/{subject}/versions"),
        ("POST", "/compatibility/subjects/{subject}/versions/{version}"))},
    **{(m, p): cluster("Alter") for m, p in (
        ("DELETE", _S), ("DELETE", _SV), ("PUT", "/config"), ("DELETE", "/config"), ("PUT", "/config/{subject}"),
        ("DELETE", "/config/{subject}"), ("PUT", "/mode"), ("DELETE", "/mode"), ("PUT", "/mode/{subject}"),
        ("DELETE", "/mode/{subject}"))},
    ("POST", "/schema_registry/writes"): cluster("ClusterAction"),
}


def canonical(path: str) -> str:
    """aiohttp's canonical form of a route path: ``{name:regex}`` -> ``{name}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


_BY_CANONICAL = {(m, canonical(p)): r for (m, p), r in TABLE.items()}


def lookup(method: str, canonical_path: str) -> Rule | None:
    """The rule of a matched route (HEAD is GET's)."""
    method = "GET" if method.upper() == "HEAD" else method.upper()
    return _BY_CANONICAL.get((method, canonical(canonical_path)))
