"""Consumer groups over HTTP (docs/consumer-groups.md): join, heartbeat, leave, commit, offsets, admin.

Handlers only parse, call and render: every rule lives in consumer_coordinator, and the routing in
broker/group_router.py. Any broker accepts any group request; one that does not coordinate the group forwards it
(one hop, over the inter-broker client) to the broker that does, and every reply names the coordinator in
``Odradek-Coordinator``. A forwarded request carries ``Odradek-Forwarded`` so that a coordinator change in
between is answered NOT_COORDINATOR (retriable) instead of bouncing between brokers.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.group_router import COORDINATOR_HEADER, FORWARDED_HEADER, GroupRouter, Routed
from broker.produce import forwarding as forward
from broker.security.visibility import describe_filter
from consumer_coordinator.assignors import ASSIGNORS, TP
from consumer_coordinator.coordinator import JoinRequest
from consumer_coordinator.group import KIND as SERVER_SIDE
from odradek.protocol.errors import (
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    NotLeaderOrFollowerError,
    OdradekError,
)

_NAME = re.compile(r"[A-Za-z0-9._-]+")
MAX_GROUP_LENGTH = 249  # Kafka's topic-name limit; Kafka leaves group ids unbounded, we do not
MAX_MEMBER_LENGTH = 300
MAX_LIST = 10_000
MAX_METADATA = 4096
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


# ------------------------------------------------------------------------------------------------ validation


def _name(raw: object, what: str, limit: int, error: type[OdradekError] = InvalidRequestError) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > limit or raw in (".", "..") or not _NAME.fullmatch(raw):
        raise error(f"{what} must be 1 to {limit} characters of [A-Za-z0-9._-], not {str(raw)[:80]!r}")
    return raw


def group_param(request: web.Request) -> str:
    return _name(request.match_info["group"], "group id", MAX_GROUP_LENGTH, InvalidGroupIdError)


def member_param(request: web.Request) -> str:
    return _name(request.match_info["member"], "member id", MAX_MEMBER_LENGTH)


def _int(body: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    raw = body.get(key, default)
    if raw is None:
        raise InvalidRequestError(f"{key} is required")
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidRequestError(f"{key} must be an integer from {low} to {high}, not {raw!r}")
    return raw


def _tp_list(raw: object, what: str) -> list[TP]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_LIST:
        raise InvalidRequestError(f"{what} must be a list of [topic, partition] pairs")
    out: list[TP] = []
    for item in raw:
        if (not isinstance(item, list | tuple) or len(item) != 2 or isinstance(item[1], bool)
                or not isinstance(item[1], int) or not 0 <= item[1] <= INT32_MAX):
            raise InvalidRequestError(f"{what} must be a list of [topic, partition] pairs, not {str(item)[:80]}")
        out.append((_name(item[0], "topic", MAX_GROUP_LENGTH), item[1]))
    return out


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise InvalidRequestError("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def parse_join(body: dict[str, Any], host: str) -> JoinRequest:
    member_id = body.get("member_id") or None
    if member_id is not None:
        _name(member_id, "member_id", MAX_MEMBER_LENGTH)
    client_id = _name(body.get("client_id") or "consumer", "client_id", 200)
    topics_raw, pattern = body.get("topics"), body.get("pattern")
    topics: frozenset[str] | None = None
    if topics_raw is not None:
        if not isinstance(topics_raw, list) or len(topics_raw) > MAX_LIST:
            raise InvalidRequestError("topics must be a list of topic names")
        topics = frozenset(_name(t, "topic", MAX_GROUP_LENGTH) for t in topics_raw)
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern or len(pattern) > 1000:
            raise InvalidRequestError("pattern must be a regular expression of at most 1000 characters")
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidRequestError(f"pattern is not a valid regular expression: {e}") from None
    if topics is None and pattern is None:
        raise InvalidRequestError("a join needs topics or a pattern")
    assignor = body.get("assignor", "range")
    if assignor not in ASSIGNORS:
        raise InvalidRequestError(f"assignor must be one of {', '.join(ASSIGNORS)}, not {str(assignor)[:40]!r}")
    session = body.get("session_timeout_ms", 10_000)
    if isinstance(session, bool) or not isinstance(session, int) or not 1000 <= session <= 300_000:
        raise InvalidSessionTimeoutError(f"session_timeout_ms must be from 1000 to 300000, not {session!r}")
    max_poll = _int(body, "max_poll_interval_ms", 1000, 1_800_000, 300_000)
    rebalance = _int(body, "rebalance_timeout_ms", 1000, 1_800_000, max_poll)
    return JoinRequest(member_id, client_id, host, topics, pattern, assignor, session, rebalance,
                       _tp_list(body.get("owned"), "owned"))


def parse_offsets(body: dict[str, Any], with_metadata: bool) -> dict[TP, tuple[int, str]]:
    raw = body.get("offsets")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_LIST:
        raise InvalidRequestError("offsets must be a non-empty list of {topic, partition, offset}")
    out: dict[TP, tuple[int, str]] = {}
    for item in raw:
        if not isinstance(item, dict):
            raise InvalidRequestError("each offset must be an object {topic, partition, offset}")
        topic = _name(item.get("topic"), "topic", MAX_GROUP_LENGTH)
        partition = _int(item, "partition", 0, INT32_MAX)
        offset = _int(item, "offset", 0, INT64_MAX)
        metadata = item.get("metadata", "") if with_metadata else ""
        if not isinstance(metadata, str) or len(metadata) > MAX_METADATA:
            raise InvalidRequestError(f"metadata must be a string of at most {MAX_METADATA} characters")
        out[(topic, partition)] = (offset, metadata)
    return out


# ------------------------------------------------------------------------------------------------- routing


def _router(request: web.Request) -> GroupRouter:
    return request.app[BROKER].group_router


def _forwarded(request: web.Request) -> bool:
    return FORWARDED_HEADER in request.headers


def _render(routed: Routed) -> web.Response:
    response = json_response(routed.value if routed.value is not None else {})
    response.headers[COORDINATOR_HEADER] = str(routed.coordinator)
    return response


# ------------------------------------------------------------------------------------------------ handlers


async def join(request: web.Request) -> web.Response:
    group = group_param(request)
    req = parse_join(await _body(request), request.remote or "")
    return _render(await _router(request).join(group, req, forwarded=_forwarded(request)))


async def heartbeat(request: web.Request) -> web.Response:
    group, member = group_param(request), member_param(request)
    generation = _int(await _body(request), "generation", -1, INT32_MAX)
    return _render(await _router(request).heartbeat(group, member, generation, forwarded=_forwarded(request)))


async def leave(request: web.Request) -> web.Response:
    group, member = group_param(request), member_param(request)
    return _render(await _router(request).leave(group, member, forwarded=_forwarded(request)))


async def commit(request: web.Request) -> web.Response:
    group = group_param(request)
    body = await _body(request)
    member_id = body.get("member_id") or ""
    if member_id:
        _name(member_id, "member_id", MAX_MEMBER_LENGTH)
    generation = _int(body, "generation", -1, INT32_MAX, -1)
    offsets = parse_offsets(body, with_metadata=True)
    return _render(await _router(request).commit(group, member_id, generation, offsets,
                                                 forwarded=_forwarded(request)))


async def reset_offsets(request: web.Request) -> web.Response:
    group = group_param(request)
    offsets = {tp: o for tp, (o, _) in parse_offsets(await _body(request), with_metadata=False).items()}
    return _render(await _router(request).reset_offsets(group, offsets, forwarded=_forwarded(request)))


async def delete_offsets(request: web.Request) -> web.Response:
    """DELETE /groups/{g}/offsets?topic=t[&partitions=0,1]: Kafka's OffsetDelete (kafka-consumer-groups
    --delete-offsets), refused while a member subscribes to the topic."""
    group = group_param(request)
    topic = request.query.get("topic")
    if topic is None:
        raise InvalidRequestError('"topic" is required')
    _name(topic, "topic", MAX_GROUP_LENGTH)
    partitions: list[int] | None = None
    raw = request.query.get("partitions")
    if raw is not None:
        parts = raw.split(",")
        if len(parts) > MAX_LIST or not all(p.isascii() and p.isdigit() and int(p) <= INT32_MAX for p in parts):
            raise InvalidRequestError('"partitions" must be a comma-separated list of partition numbers')
        partitions = sorted({int(p) for p in parts})
    return _render(await _router(request).delete_offsets(group, topic, partitions, forwarded=_forwarded(request)))


async def describe(request: web.Request) -> web.Response:
    return _render(await _router(request).describe(group_param(request), forwarded=_forwarded(request)))


async def delete(request: web.Request) -> web.Response:
    return _render(await _router(request).delete(group_param(request), forwarded=_forwarded(request)))


async def list_groups(request: web.Request) -> web.Response:
    """From ZooKeeper, on any broker: the coordinators' last written states (a Kafka-protocol group's is its last
    Stable or Empty one, ``kind`` "classic"; a server-side group's ``kind`` is "server"). With ACLs, Kafka's
    ListGroups rule: a caller allowed Cluster Describe sees every group, any other only the groups it may
    Describe."""
    store = request.app[BROKER].groups.store
    visible = describe_filter(request, "Group", cluster_describe_sees_all=True)

    def read() -> list[dict[str, Any]]:
        out = []
        for group in store.list_groups():
            if visible is not None and not visible(group):
                continue
            state = store.get_state(group) or {}
            out.append({"group": group, "state": state.get("state", "Empty"),
                        "members": len(state.get("assignment") or {}), "coordinator": store.get_coordinator(group),
                        "kind": state.get("kind") or SERVER_SIDE})
        return out

    return json_response({"groups": await asyncio.to_thread(read)})


async def offsets(request: web.Request) -> web.Response:
    """Committed offsets with lag (high watermark - committed), from ZooKeeper, on any broker; with ACLs only
    for the topics the caller may Describe (Kafka's OffsetFetch answers the others TOPIC_AUTHORIZATION_FAILED)."""
    group = group_param(request)
    topic = request.query.get("topic")
    if topic is not None:
        _name(topic, "topic", MAX_GROUP_LENGTH)
    committed = await _router(request).committed_offsets(group)
    visible = describe_filter(request, "Topic")  # Kafka's OffsetFetch: only topics the caller may Describe
    rows = sorted((tp, v) for tp, v in committed.items()
                  if (topic is None or tp[0] == topic) and (visible is None or visible(tp[0])))
    ends = await asyncio.gather(*(_high_watermark(request, tp) for tp, _ in rows))
    return json_response({"offsets": [
        {"topic": t, "partition": p, "offset": o, "metadata": meta, "commit_timestamp": ts,
         "log_end_offset": end, "lag": None if end is None else max(0, end - o)}
        for ((t, p), (o, meta, ts)), end in zip(rows, ends, strict=True)
    ]})


async def _high_watermark(request: web.Request, tp: TP) -> int | None:
    broker = request.app[BROKER]
    try:
        return int(broker.replicas.leader_partition(*tp).high_watermark)
    except NotLeaderOrFollowerError as e:
        url = e.details.get("leader_url")
        if not url or broker.http_session is None:
            return None
        try:
            body = await forward.get_json(broker.http_session, f"{url}/topics/{tp[0]}/partitions/{tp[1]}/offsets")
            return int(body["end_offset"])
        except (OdradekError, KeyError, ValueError):
            return None
    except OdradekError:
        return None
