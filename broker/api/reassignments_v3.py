"""Running partition reassignments under Confluent's v3 API, on the reassignment admin service
(broker/admin/reassignment.py, what GET /admin/reassign_partitions shows):

    GET /v3/clusters/{c}/topics/-/partitions/-/reassignment           KafkaReassignmentList: every running move
    GET /v3/clusters/{c}/topics/{t}/partitions/-/reassignment         KafkaReassignmentList: the topic's
    GET /v3/clusters/{c}/topics/{t}/partitions/{p}/reassignment       KafkaReassignment: the partition's

As kafka-rest's resources/v3/ListAllReassignmentsAction.java, SearchReassignmentsByTopicAction.java,
GetReassignmentAction.java and controllers/ReassignmentManagerImpl.java (api/v3/openapi.yaml): each move is
``{"kind": "KafkaReassignment", "cluster_id", "topic_name", "partition_id", "adding_replicas",
"removing_replicas", "replicas": {"related"}}``, sorted by topic and partition; a topic this cluster does not
have is 404/40403, and a partition with no running move is 404 (Confluent's NotFoundException). Read-only, as
Confluent's: moves are started and cancelled with POST /admin/reassign_partitions[/cancel].
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from broker.admin.reassignment import OngoingReassignment
from broker.api.context import BROKER
from broker.api.links_v3 import V3, check_cluster, json_v3, v3
from broker.api.params import partition_param, topic_param
from odradek.protocol.errors import RouteNotFoundError, UnknownTopicError


def reassignment_data(links: V3, move: OngoingReassignment) -> dict[str, Any]:
    t, p = move.partition.topic, move.partition.partition
    return {
        "kind": "KafkaReassignment",
        "metadata": {"self": links.url("topics", t, "partitions", p, "reassignment"),
                     "resource_name": links.crn(("topic", t), ("partition", p), tail="reassignment")},
        "cluster_id": links.cluster_id, "topic_name": t, "partition_id": p,
        "adding_replicas": list(move.adding_replicas), "removing_replicas": list(move.removing_replicas),
        "replicas": links.related("topics", t, "partitions", p, "replicas"),
    }


async def _ongoing(request: web.Request, topic: str | None = None) -> list[OngoingReassignment]:
    broker = request.app[BROKER]
    if topic is not None and topic not in broker.cache.topics:
        raise UnknownTopicError(f"topic '{topic}' does not exist")
    moves = await asyncio.to_thread(broker.reassignments.ongoing)
    return sorted((m for m in moves if topic is None or m.partition.topic == topic),
                  key=lambda m: (m.partition.topic, m.partition.partition))


async def list_all(request: web.Request) -> web.Response:
    check_cluster(request)
    links = v3(request)
    data = [reassignment_data(links, m) for m in await _ongoing(request)]
    return json_v3(request, links.collection("KafkaReassignmentList", data, "topics", "-", "partitions", "-",
                                             "reassignment"))


async def list_by_topic(request: web.Request) -> web.Response:
    check_cluster(request)
    topic = topic_param(request)
    links = v3(request)
    data = [reassignment_data(links, m) for m in await _ongoing(request, topic)]
    return json_v3(request, links.collection("KafkaReassignmentList", data, "topics", topic, "partitions", "-",
                                             "reassignment"))


async def get_reassignment(request: web.Request) -> web.Response:
    check_cluster(request)
    topic, partition = topic_param(request), partition_param(request)
    for m in await _ongoing(request, topic):
        if m.partition.partition == partition:
            return json_v3(request, reassignment_data(v3(request), m))
    raise RouteNotFoundError(f"No reassignment of partition {partition} of topic {topic} is running.")


def routes() -> list[web.RouteDef]:
    """The ``-`` routes before ``{topic}``/``{partition}`` ones, which would otherwise take ``-`` as a name."""
    t = "/v3/clusters/{cluster_id}/topics"
    return [
        web.get(f"{t}/-/partitions/-/reassignment", list_all),
        web.get(f"{t}/{{topic}}/partitions/-/reassignment", list_by_topic),
        web.get(f"{t}/{{topic}}/partitions/{{partition}}/reassignment", get_reassignment),
    ]
