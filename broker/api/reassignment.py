"""Partition reassignment over HTTP (what Kafka 2.6's AlterPartitionReassignments / ListPartitionReassignments and
DescribeLogDirs give ``kafka-reassign-partitions.sh --bootstrap-server``):

    GET  /admin/reassign_partitions          the running moves: [{"topic", "partition", "replicas" (target),
                                             "adding_replicas", "removing_replicas"}]
    POST /admin/reassign_partitions          {"partitions": [{"topic", "partition", "replicas"}], "additional"?}
                                             202, or 409 when one runs and "additional" is not set
    POST /admin/reassign_partitions/cancel   {"partitions"?: [{"topic", "partition"}]}: back to the original replicas
    GET  /admin/log_dirs                     this broker's replicas with their sizes (for progress: bytes caught up)

Why any broker may take them: as with Kafka's ZooKeeper route, the request is a write of
``/admin/reassign_partitions`` (zk/reassignments.py), which the controller watches; no broker has to own it.
Every input is checked against this broker's metadata (partitions exist, brokers are registered, no duplicates),
so a bad request is a 4xx, never a 500.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from odradek.protocol.errors import InvalidRequestError, MalformedJsonError, UnknownPartitionError, UnknownTopicError
from odradek.protocol.model import TopicPartition

MAX_PARTITIONS = 100_000


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise MalformedJsonError(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def _partition_of(item: object) -> TopicPartition:
    partition = item.get("partition") if isinstance(item, dict) else None
    if (not isinstance(item, dict) or not isinstance(item.get("topic"), str) or not isinstance(partition, int)
            or isinstance(partition, bool) or partition < 0):
        raise InvalidRequestError('each partition needs a string "topic" and a non-negative integer "partition"')
    return TopicPartition(item["topic"], item["partition"])


def parse_moves(body: dict[str, Any], known: dict[str, int], brokers: set[int]) -> dict[TopicPartition, list[int]]:
    """The reassignment file's shape, checked as Kafka 2.6 checks it; ``known`` maps topic -> partition count."""
    items = body.get("partitions")
    if not isinstance(items, list) or not items or len(items) > MAX_PARTITIONS:
        raise InvalidRequestError('the body must be {"partitions": [{"topic", "partition", "replicas"}, ...]} '
                                  "with at least one partition")
    moves: dict[TopicPartition, list[int]] = {}
    for item in items:
        tp = _partition_of(item)
        replicas = item.get("replicas")
        if (not isinstance(replicas, list) or not replicas
                or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)):
            raise InvalidRequestError(f"the replicas of {tp} must be a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise InvalidRequestError(f"Partition replica lists may not contain duplicate entries: {tp} has {replicas}")
        if tp in moves:
            raise InvalidRequestError(f"Reassignment data contains duplicate partitions: {tp}")
        if tp.topic not in known:
            raise UnknownTopicError(f"topic '{tp.topic}' does not exist")
        if tp.partition >= known[tp.topic]:
            raise UnknownPartitionError(f"partition {tp} does not exist")
        unknown = sorted(set(replicas) - brokers)
        if unknown:
            raise InvalidRequestError(f"Unknown broker id(s) {unknown} in the replicas of {tp}")
        moves[tp] = list(replicas)
    return moves


def _ongoing_json(broker: Any, moves: dict[TopicPartition, list[int]]) -> list[dict[str, Any]]:
    out = []
    for tp, target in sorted(moves.items()):
        assignment = broker.cache.topics.get(tp.topic)
        out.append({"topic": tp.topic, "partition": tp.partition, "replicas": target,
                    "adding_replicas": assignment.adding_replicas.get(tp.partition, []) if assignment else [],
                    "removing_replicas": assignment.removing_replicas.get(tp.partition, []) if assignment else []})
    return out


async def list_reassignments(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    moves = await asyncio.to_thread(broker.zk.get_reassignment) or {}
    return json_response({"partitions": _ongoing_json(broker, moves)})


async def reassign(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = await _body(request)
    known = {t: len(a.partitions) for t, a in broker.cache.topics.items()}
    moves = parse_moves(body, known, set(broker.cache.brokers))
    additional = body.get("additional", False)
    if not isinstance(additional, bool):
        raise InvalidRequestError('"additional" must be true or false')
    started = await asyncio.to_thread(broker.zk.request_reassignment, moves, merge=additional)
    if not started:
        return json_response({"accepted": False, "error": "REASSIGNMENT_IN_PROGRESS",
                              "message": "There is an existing assignment running."}, status=409)
    return json_response({"accepted": True, "partitions": [str(tp) for tp in sorted(moves)]}, status=202)


async def cancel(request: web.Request) -> web.Response:
    """Revert running moves to their original replicas (RS minus the replicas being added)."""
    broker = request.app[BROKER]
    body = await _body(request)
    wanted = None if body.get("partitions") is None else {_partition_of(i) for i in body.get("partitions") or ()}
    ongoing = await asyncio.to_thread(broker.zk.get_reassignment) or {}
    moves: dict[TopicPartition, list[int]] = {}
    for tp in ongoing:
        if wanted is not None and tp not in wanted:
            continue
        assignment = await asyncio.to_thread(broker.zk.get_topic_assignment, tp.topic)
        if assignment is None or tp.partition not in assignment.partitions:
            continue
        adding = assignment.adding_replicas.get(tp.partition, [])
        moves[tp] = [r for r in assignment.partitions[tp.partition] if r not in adding]
    if moves:
        await asyncio.to_thread(broker.zk.request_reassignment, moves, merge=True)
    return json_response({"cancelled": [str(tp) for tp in sorted(moves)],
                          "not_running": sorted(str(tp) for tp in (wanted or set()) if tp not in moves)})


async def log_dirs(request: web.Request) -> web.Response:
    """This broker's replicas and their sizes (Kafka's DescribeLogDirs, one log dir)."""
    broker = request.app[BROKER]
    replicas = [{"topic": topic, "partition": partition, "size": lg.size_in_bytes,
                 "log_end_offset": lg.log_end_offset, "offset_lag": 0, "is_future": False}
                for (topic, partition), lg in sorted(broker.replicas.logs.all_logs().items())]
    return json_response({"broker_id": broker.broker_id, "log_dirs": [
        {"log_dir": str(broker.config.data_dir), "error": None, "replicas": replicas}]})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/reassign_partitions", list_reassignments),
        web.post("/admin/reassign_partitions", reassign),
        web.post("/admin/reassign_partitions/cancel", cancel),
        web.get("/admin/log_dirs", log_dirs),
    ]
