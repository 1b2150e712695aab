"""Metadata: GET /metadata (what clients route by), and REST Proxy v2's /brokers, /topics, partitions, offsets.

On a cluster with ACLs, /metadata and /topics list only the topics the caller may Describe, and a topic named in
``/metadata?topics=`` that it may not Describe comes back with ``"error": "TOPIC_AUTHORIZATION_FAILED"``
(broker/security/visibility.py); without security nothing is filtered and no per-topic check runs.

The v2 bodies are Confluent's entities field for field (kafka-rest ``entities/v2``: ``GetTopicResponse`` lists
the topic's effective configuration, defaults included; ``TopicPartitionOffsetResponse`` is exactly
``beginning_offset`` and ``end_offset``). Every GET negotiates its media type as Confluent's resources do
(``@Produces`` v2, ``vnd.kafka+json`` or plain JSON): an Accept that allows none of them is a 406.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.api.params import int_param, isolation_param, negotiate, partition_param
from broker.fetch.offsets import ListOffsetsRequest
from broker.metadata.cache import MetadataCache, PartitionInfo
from broker.security.visibility import describe_filter
from odradek.protocol import media
from odradek.protocol.errors import (
    TopicAuthorizationFailedError,
    UnknownPartitionError,
    UnknownTopicError,
)


def _partition_meta(info: PartitionInfo | None, partition: int, replicas: list[int]) -> dict[str, Any]:
    if info is None:
        return {"partition": partition, "leader": -1, "leader_epoch": -1, "replicas": replicas, "isr": []}
    return {"partition": partition, "leader": info.leader, "leader_epoch": info.leader_epoch,
            "replicas": list(info.replicas), "isr": list(info.isr)}


def topic_metadata(cache: MetadataCache, topic: str) -> dict[str, Any]:
    assignment = cache.topics.get(topic)
    if assignment is None:
        return {"name": topic, "error": "UNKNOWN_TOPIC", "partitions": []}
    return {"name": topic, "error": None, "partitions": [
        _partition_meta(cache.partitions.get((topic, p)), p, replicas)
        for p, replicas in sorted(assignment.partitions.items())
    ]}


async def metadata(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(broker.ready.wait(), 10)  # a broker still starting answers once it knows
    ctype = negotiate(request, (media.PLAIN_JSON, media.KAFKA_V2, media.KAFKA_DEFAULT))
    cache = broker.cache
    wanted = request.query.get("topics")
    visible = describe_filter(request, "Topic")  # None (no per-topic work) unless ACLs apply to this caller
    if wanted:  # named topics: one the caller may not Describe is refused, existing or not (Kafka's Metadata)
        names = [t for t in wanted.split(",") if t]
        topics = [topic_metadata(cache, t) if visible is None or visible(t) else _denied(t) for t in names]
    else:  # every topic: the ones the caller may not Describe are left out
        names = sorted(cache.topics)
        topics = [topic_metadata(cache, t) for t in (names if visible is None else filter(visible, names))]
    return json_response({
        "cluster_id": broker.cluster_id,
        "controller_id": broker.controller_id,
        "brokers": [{"id": b.broker_id, "url": b.url, "rack": b.rack} for b in sorted(
            cache.brokers.values(), key=lambda b: b.broker_id)],
        "topics": topics,
    }, content_type=ctype)


def _denied(topic: str) -> dict[str, Any]:
    return {"name": topic, "error": TopicAuthorizationFailedError.name, "partitions": []}


def v2_type(request: web.Request) -> str:
    """The media type a v2 metadata answer takes (406 when the client accepts none)."""
    return negotiate(request, media.METADATA_TYPES)


async def brokers(request: web.Request) -> web.Response:
    return json_response({"brokers": sorted(request.app[BROKER].cache.brokers)}, content_type=v2_type(request))


async def topics(request: web.Request) -> web.Response:
    names = sorted(request.app[BROKER].cache.topics)
    visible = describe_filter(request, "Topic")
    return json_response(names if visible is None else list(filter(visible, names)), content_type=v2_type(request))


def _v2_partition(cache: MetadataCache, topic: str, partition: int) -> dict[str, Any]:
    assignment = cache.topics[topic]
    info = cache.partitions.get((topic, partition))
    leader = info.leader if info else -1
    isr = set(info.isr) if info else set()
    return {"partition": partition, "leader": leader, "replicas": [
        {"broker": b, "leader": b == leader, "in_sync": b in isr} for b in assignment.partitions[partition]
    ]}


def _require_topic(cache: MetadataCache, topic: str) -> None:
    if topic not in cache.topics:
        raise UnknownTopicError(f"topic '{topic}' does not exist")


def _require_partition(cache: MetadataCache, topic: str, partition: int) -> None:
    _require_topic(cache, topic)
    if partition not in cache.topics[topic].partitions:
        raise UnknownPartitionError(f"partition {partition} of topic '{topic}' does not exist")


async def topic(request: web.Request) -> web.Response:
    """Confluent's GetTopicResponse: ``configs`` is the topic's effective configuration (every topic config
    with its default unless overridden), as kafka-rest fills it from AdminClient.describeConfigs."""
    broker = request.app[BROKER]
    ctype = v2_type(request)
    cache = broker.cache
    name = request.match_info["topic"]
    _require_topic(cache, name)
    _overrides, effective = await asyncio.to_thread(broker.admin.describe_configs, name)
    return json_response({
        "name": name, "configs": dict(sorted(effective.items())),
        "partitions": [_v2_partition(cache, name, p) for p in sorted(cache.topics[name].partitions)],
    }, content_type=ctype)


async def partitions(request: web.Request) -> web.Response:
    cache = request.app[BROKER].cache
    name = request.match_info["topic"]
    _require_topic(cache, name)
    return json_response([_v2_partition(cache, name, p) for p in sorted(cache.topics[name].partitions)],
                         content_type=v2_type(request))


async def partition(request: web.Request) -> web.Response:
    cache = request.app[BROKER].cache
    name, p = request.match_info["topic"], partition_param(request)
    ctype = v2_type(request)
    _require_partition(cache, name, p)
    return json_response(_v2_partition(cache, name, p), content_type=ctype)


async def partition_offsets(request: web.Request) -> web.Response:
    """The leader's offsets (broker/fetch/offsets.py, Kafka's ListOffsets), from any broker: exactly Confluent's
    TopicPartitionOffsetResponse (``end_offset`` is the high watermark, what consumers see; with
    ``?isolation=read_committed`` the LSO, where read_committed reads end), plus, with ``?timestamp=``, the first
    offset at or after that time (null when there is none)."""
    ctype = v2_type(request)
    timestamp = int_param(request, "timestamp", minimum=-2) if request.query.get("timestamp") else None
    offsets = await request.app[BROKER].offsets.list_offsets(ListOffsetsRequest(
        request.match_info["topic"], partition_param(request), isolation_param(request), timestamp))
    body: dict[str, Any] = {"beginning_offset": offsets.log_start_offset, "end_offset": offsets.end_offset}
    if offsets.timestamp is not None:
        body["timestamp"] = offsets.timestamp
        body["offset"] = offsets.offset
    return json_response(body, content_type=ctype)
