"""Consumer groups under Confluent's v3 API: groups, their consumers and assignments, lags and the lag summary.

    GET /v3/clusters/{c}/consumer-groups                                     KafkaConsumerGroupList
    GET /v3/clusters/{c}/consumer-groups/{g}                                 KafkaConsumerGroup
    GET /v3/clusters/{c}/consumer-groups/{g}/consumers                       KafkaConsumerList
    GET /v3/clusters/{c}/consumer-groups/{g}/consumers/{m}                   KafkaConsumer
    GET /v3/clusters/{c}/consumer-groups/{g}/consumers/{m}/assignments       KafkaConsumerAssignmentList
    GET .../consumers/{m}/assignments/{t}/partitions/{p}                     KafkaConsumerAssignment
    GET /v3/clusters/{c}/consumer-groups/{g}/lags                            KafkaConsumerLagList
    GET /v3/clusters/{c}/consumer-groups/{g}/lags/{t}/partitions/{p}         KafkaConsumerLag
    GET /v3/clusters/{c}/consumer-groups/{g}/lag-summary                     KafkaConsumerGroupLagSummary

Shapes, links and rules are kafka-rest's (resources/v3/ConsumerGroupsResource.java, ConsumersResource.java,
ConsumerAssignmentsResource.java, ListConsumerLagsResource.java, GetConsumerLagResource.java,
ConsumerGroupLagSummariesResource.java; controllers/ConsumerLagManagerImpl.java,
ConsumerGroupLagSummaryManagerImpl.java; api/v3/openapi.yaml):

* a group is what its coordinator describes (the group router: here, or one hop away, as GET /groups/{g});
  a group nobody joined or committed for is 404;
* lags are per committed partition: ``current_offset`` the committed offset, ``log_end_offset`` the partition's
  latest offset for read_committed consumers (Confluent lists offsets with IsolationLevel.READ_COMMITTED: the last
  stable offset), ``lag`` their difference (never negative); ``consumer_id``/``client_id`` name the member the
  partition is assigned to, "" when none is. Listed by lag (largest first), then topic and partition. A group
  with no committed offset has no lags: 404, as Confluent answers;
* the lag summary is the largest lag (the first partition reaching it, in the lags' order) and the total.

With ACLs, lags show only the topics the caller may Describe (Kafka's OffsetFetch rule, as GET /groups/{g}/offsets).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from broker.api.context import BROKER
from broker.api.groups import group_param
from broker.api.links_v3 import V3, check_cluster, json_v3, v3
from broker.api.params import partition_param, topic_param
from broker.fetch.offsets import ListOffsetsRequest
from broker.security.visibility import describe_filter
from odradek.protocol.errors import GroupIdNotFoundError, RouteNotFoundError, UnknownPartitionError, UnknownTopicError
from transaction_coordinator.markers import READ_COMMITTED

# The coordinator's state names (Kafka's GroupMetadata) as Kafka's ConsumerGroupState enum spells them.
STATES = {"Empty": "EMPTY", "PreparingRebalance": "PREPARING_REBALANCE",
          "CompletingRebalance": "COMPLETING_REBALANCE", "Stable": "STABLE", "Dead": "DEAD"}
DESCRIBE_CONCURRENCY = 16


# ------------------------------------------------------------------------------------------------- rendering


def group_data(links: V3, described: dict[str, Any], coordinator: int) -> dict[str, Any]:
    """KafkaConsumerGroup from the coordinator's description (consumer_coordinator ``describe``)."""
    g = str(described.get("group"))
    members = described.get("members") or []
    if described.get("kind") == "classic":
        protocol_type = described.get("protocol_type") or ""
    else:  # a server-side group's members are consumers; one that only ever stored offsets has no protocol
        protocol_type = "consumer" if members or described.get("generation") else ""
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": links.url("consumer-groups", g), "resource_name": links.crn(("consumer-group", g))},
        "cluster_id": links.cluster_id, "consumer_group_id": g,
        "is_simple": protocol_type == "",  # Kafka's ConsumerGroupDescription.isSimpleConsumerGroup
        "partition_assignor": described.get("assignor") or "",
        "state": STATES.get(str(described.get("state")), "UNKNOWN"),
        "coordinator": links.related("brokers", coordinator),
        "consumers": links.related("consumer-groups", g, "consumers"),
        "lag_summary": links.related("consumer-groups", g, "lag-summary"),
    }


def consumer_data(links: V3, group: str, member: dict[str, Any]) -> dict[str, Any]:
    m = str(member.get("member_id"))
    return {
        "kind": "KafkaConsumer",
        "metadata": {"self": links.url("consumer-groups", group, "consumers", m),
                     "resource_name": links.crn(("consumer-group", group), ("consumer", m))},
        "cluster_id": links.cluster_id, "consumer_group_id": group, "consumer_id": m,
        "instance_id": member.get("group_instance_id"), "client_id": member.get("client_id") or "",
        "assignments": links.related("consumer-groups", group, "consumers", m, "assignments"),
    }


def assignment_data(links: V3, group: str, consumer: str, topic: str, partition: int) -> dict[str, Any]:
    return {
        "kind": "KafkaConsumerAssignment",
        "metadata": {"self": links.url("consumer-groups", group, "consumers", consumer, "assignments", topic,
                                       "partitions", partition),
                     "resource_name": links.crn(("consumer-group", group), ("consumer", consumer),
                                                ("assignment", topic), ("partition", partition))},
        "cluster_id": links.cluster_id, "consumer_group_id": group, "consumer_id": consumer,
        "topic_name": topic, "partition_id": partition,
        "partition": links.related("topics", topic, "partitions", partition),
        "lag": links.related("consumer-groups", group, "lags", topic, "partitions", partition),
    }


def lag_rows(committed: dict[tuple[str, int], int], ends: dict[tuple[str, int], int],
             members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per committed partition whose end offset is known, in Confluent's order (lag descending, then
    topic, then partition), naming the member it is assigned to ("" when none is)."""
    owner: dict[tuple[str, int], dict[str, Any]] = {}
    for member in members:
        for t, p in member.get("assignment") or []:
            owner[(t, p)] = member
    rows = []
    for tp, current in committed.items():
        end = ends.get(tp)
        if end is None:
            continue
        m = owner.get(tp, {})
        rows.append({"topic_name": tp[0], "partition_id": tp[1], "current_offset": current, "log_end_offset": end,
                     "lag": max(0, end - current), "consumer_id": m.get("member_id") or "",
                     "instance_id": m.get("group_instance_id"), "client_id": m.get("client_id") or ""})
    rows.sort(key=lambda r: (-r["lag"], r["topic_name"], r["partition_id"]))
    return rows


def lag_data(links: V3, group: str, row: dict[str, Any]) -> dict[str, Any]:
    t, p = row["topic_name"], row["partition_id"]
    return {
        "kind": "KafkaConsumerLag",
        "metadata": {"self": links.url("consumer-groups", group, "lags", t, "partitions", p),
                     "resource_name": links.crn(("consumer-group", group), ("lag", t), ("partition", p))},
        "cluster_id": links.cluster_id, "consumer_group_id": group, **row,
    }


def lag_summary_data(links: V3, group: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest lag and the total (ConsumerGroupLagSummary: the first row with the largest lag wins)."""
    top = max(rows, key=lambda r: r["lag"]) if rows else None  # max keeps the first of equals: rows are sorted
    t = top["topic_name"] if top else ""
    p = top["partition_id"] if top else 0
    consumer = top["consumer_id"] if top else ""
    return {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": {"self": links.url("consumer-groups", group, "lag-summary"),
                     "resource_name": links.crn(("consumer-group", group), tail="lag-summary")},
        "cluster_id": links.cluster_id, "consumer_group_id": group,
        "max_lag_consumer_id": consumer, "max_lag_instance_id": top["instance_id"] if top else None,
        "max_lag_client_id": top["client_id"] if top else "", "max_lag_topic_name": t, "max_lag_partition_id": p,
        "max_lag": top["lag"] if top else 0, "total_lag": sum(r["lag"] for r in rows),
        "max_lag_consumer": links.related("consumer-groups", group, "consumers", consumer),
        "max_lag_partition": links.related("topics", t, "partitions", p),
    }


# -------------------------------------------------------------------------------------------------- handlers


async def _describe(request: web.Request, group: str) -> tuple[dict[str, Any], int]:
    routed = await request.app[BROKER].group_router.describe(group)
    return dict(routed.value or {}), routed.coordinator


def _member(described: dict[str, Any], consumer: str) -> dict[str, Any]:
    for m in described.get("members") or []:
        if m.get("member_id") == consumer:
            return dict(m)
    raise RouteNotFoundError(f"Consumer {consumer} could not be found in consumer group {described.get('group')}.")


async def list_groups(request: web.Request) -> web.Response:
    """Every group ZooKeeper holds, each as its coordinator describes it (Confluent lists, then describes);
    with ACLs only the groups the caller may see (Kafka's ListGroups rule, as GET /groups)."""
    check_cluster(request)
    broker = request.app[BROKER]
    names = await asyncio.to_thread(broker.groups.store.list_groups)
    visible = describe_filter(request, "Group", cluster_describe_sees_all=True)
    names = sorted(n for n in names if visible is None or visible(n))
    links = v3(request)
    room = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def one(name: str) -> dict[str, Any] | None:
        async with room:
            try:
                return group_data(links, *await _describe(request, name))
            except GroupIdNotFoundError:  # deleted since it was listed
                return None

    found = await asyncio.gather(*(one(n) for n in names))
    return json_v3(request, links.collection("KafkaConsumerGroupList", [g for g in found if g is not None],
                                             "consumer-groups"))


async def get_group(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    return json_v3(request, group_data(v3(request), *await _describe(request, group)))


async def list_consumers(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    described, _ = await _describe(request, group)
    links = v3(request)
    members = sorted(described.get("members") or [], key=lambda m: str(m.get("member_id")))
    return json_v3(request, links.collection("KafkaConsumerList", [consumer_data(links, group, m) for m in members],
                                             "consumer-groups", group, "consumers"))


async def get_consumer(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    described, _ = await _describe(request, group)
    return json_v3(request, consumer_data(v3(request), group, _member(described, request.match_info["consumer"])))


async def list_assignments(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    consumer = request.match_info["consumer"]
    member = _member((await _describe(request, group))[0], consumer)
    links = v3(request)
    assigned = sorted((str(t), int(p)) for t, p in member.get("assignment") or [])
    data = [assignment_data(links, group, consumer, t, p) for t, p in assigned]
    return json_v3(request, links.collection("KafkaConsumerAssignmentList", data, "consumer-groups", group,
                                             "consumers", consumer, "assignments"))


async def get_assignment(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    consumer = request.match_info["consumer"]
    topic, partition = topic_param(request), partition_param(request)
    member = _member((await _describe(request, group))[0], consumer)
    if [topic, partition] not in [list(a) for a in member.get("assignment") or []]:
        raise RouteNotFoundError(f"Consumer {consumer} is not assigned partition {partition} of topic {topic}.")
    return json_v3(request, assignment_data(v3(request), group, consumer, topic, partition))


async def _lag_rows(request: web.Request, group: str) -> list[dict[str, Any]]:
    """The group's lags (404 when the group does not exist or has no committed offset)."""
    broker = request.app[BROKER]
    described, _ = await _describe(request, group)
    committed = {tp: v[0] for tp, v in (await broker.group_router.committed_offsets(group)).items()}
    visible = describe_filter(request, "Topic")
    if visible is not None:
        committed = {tp: o for tp, o in committed.items() if visible(tp[0])}
    if not committed:
        raise RouteNotFoundError(f"Consumer group {group} has no committed offsets: no lags.")

    async def end(tp: tuple[str, int]) -> int | None:
        try:
            found = await broker.offsets.list_offsets(ListOffsetsRequest(tp[0], tp[1], READ_COMMITTED))
        except (UnknownTopicError, UnknownPartitionError):  # deleted since the commit: no lag to show
            return None
        return found.end_offset

    tps = sorted(committed)
    ends = dict(zip(tps, await asyncio.gather(*(end(tp) for tp in tps)), strict=True))
    rows = lag_rows(committed, {tp: e for tp, e in ends.items() if e is not None}, described.get("members") or [])
    if not rows:
        raise RouteNotFoundError(f"Consumer group {group} has no lags: its committed partitions are gone.")
    return rows


async def list_lags(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    links = v3(request)
    rows = await _lag_rows(request, group)
    return json_v3(request, links.collection("KafkaConsumerLagList", [lag_data(links, group, r) for r in rows],
                                             "consumer-groups", group, "lags"))


async def get_lag(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    topic, partition = topic_param(request), partition_param(request)
    for row in await _lag_rows(request, group):
        if row["topic_name"] == topic and row["partition_id"] == partition:
            return json_v3(request, lag_data(v3(request), group, row))
    raise RouteNotFoundError(f"Consumer group {group} has no lag for partition {partition} of topic {topic}.")


async def lag_summary(request: web.Request) -> web.Response:
    check_cluster(request)
    group = group_param(request)
    return json_v3(request, lag_summary_data(v3(request), group, await _lag_rows(request, group)))


def routes() -> list[web.RouteDef]:
    g = "/v3/clusters/{cluster_id}/consumer-groups/{group}"
    m = f"{g}/consumers/{{consumer}}"
    return [
        web.get("/v3/clusters/{cluster_id}/consumer-groups", list_groups),
        web.get(g, get_group),
        web.get(f"{g}/consumers", list_consumers),
        web.get(m, get_consumer),
        web.get(f"{m}/assignments", list_assignments),
        web.get(f"{m}/assignments/{{topic}}/partitions/{{partition}}", get_assignment),
        web.get(f"{g}/lags", list_lags),
        web.get(f"{g}/lags/{{topic}}/partitions/{{partition}}", get_lag),
        web.get(f"{g}/lag-summary", lag_summary),
    ]
