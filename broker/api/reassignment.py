"""Partition reassignment over HTTP (what Kafka 2.6's AlterPartitionReassignments / ListPartitionReassignments and
DescribeLogDirs give ``kafka-reassign-partitions.sh --bootstrap-server``):

    GET  /admin/reassign_partitions          the running moves: [{"topic", "partition", "replicas" (target),
                                             "adding_replicas", "removing_replicas"}]
    POST /admin/reassign_partitions          {"partitions": [{"topic", "partition", "replicas"}], "additional"?}
                                             202, or 409 when one runs and "additional" is not set
    POST /admin/reassign_partitions/cancel   {"partitions"?: [{"topic", "partition"}]}: back to the original replicas
    GET  /admin/log_dirs                     this broker's replicas with their sizes (for progress: bytes caught up)

Why any broker may take them: as with Kafka's ZooKeeper route, the request is a write of
``/admin/reassign_partitions``, which the controller watches; no broker has to own it. The handlers decode and
render; the admin service (broker/admin/reassignment.py) checks every move against this broker's metadata
(partitions exist, brokers are registered, no duplicates) and writes, so a bad request is a 4xx, never a 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from odradek.protocol.errors import InvalidRequestError, MalformedJsonError
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


def decode_moves(body: dict[str, Any]) -> Iterator[tuple[TopicPartition, list[int]]]:
    """The reassignment file's shape, item by item (lazily: the admin service checks each item against the
    metadata as it comes, so the first bad item, of either kind, is the one reported)."""
    items = body.get("partitions")
    if not isinstance(items, list) or not items or len(items) > MAX_PARTITIONS:
        raise InvalidRequestError('the body must be {"partitions": [{"topic", "partition", "replicas"}, ...]} '
                                  "with at least one partition")

    def decode() -> Iterator[tuple[TopicPartition, list[int]]]:
        for item in items:
            tp = _partition_of(item)
            replicas = item.get("replicas")
            if (not isinstance(replicas, list) or not replicas
                    or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)):
                raise InvalidRequestError(f"the replicas of {tp} must be a non-empty list of broker ids")
            if len(set(replicas)) != len(replicas):
                raise InvalidRequestError(
                    f"Partition replica lists may not contain duplicate entries: {tp} has {replicas}")
            yield tp, list(replicas)

    return decode()


async def list_reassignments(request: web.Request) -> web.Response:
    ongoing = await asyncio.to_thread(request.app[BROKER].reassignments.ongoing)
    return json_response({"partitions": [
        {"topic": o.partition.topic, "partition": o.partition.partition, "replicas": o.replicas,
         "adding_replicas": o.adding_replicas, "removing_replicas": o.removing_replicas} for o in ongoing]})


async def reassign(request: web.Request) -> web.Response:
    admin = request.app[BROKER].reassignments
    body = await _body(request)
    moves = admin.validate_moves(decode_moves(body))
    additional = body.get("additional", False)
    if not isinstance(additional, bool):
        raise InvalidRequestError('"additional" must be true or false')
    started = await asyncio.to_thread(admin.request, moves, additional=additional)
    if not started:
        return json_response({"accepted": False, "error": "REASSIGNMENT_IN_PROGRESS",
                              "message": "There is an existing assignment running."}, status=409)
    return json_response({"accepted": True, "partitions": [str(tp) for tp in sorted(moves)]}, status=202)


async def cancel(request: web.Request) -> web.Response:
    """Revert running moves to their original replicas (RS minus the replicas being added)."""
    body = await _body(request)
    wanted = None if body.get("partitions") is None else {_partition_of(i) for i in body.get("partitions") or ()}
    result = await asyncio.to_thread(request.app[BROKER].reassignments.cancel, wanted)
    return json_response({"cancelled": [str(tp) for tp in result.cancelled],
                          "not_running": sorted(str(tp) for tp in result.not_running)})


async def log_dirs(request: web.Request) -> web.Response:
    """This broker's replicas and their sizes (Kafka's DescribeLogDirs, from the replica manager)."""
    broker = request.app[BROKER]
    return json_response({"broker_id": broker.broker_id, "log_dirs": [
        {"log_dir": d.path, "error": d.error, "replicas": [
            {"topic": r.topic, "partition": r.partition, "size": r.size, "log_end_offset": r.log_end_offset,
             "offset_lag": r.offset_lag, "is_future": r.is_future} for r in d.replicas]}
        for d in broker.replicas.describe_log_dirs()]})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/admin/reassign_partitions", list_reassignments),
        web.post("/admin/reassign_partitions", reassign),
        web.post("/admin/reassign_partitions/cancel", cancel),
        web.get("/admin/log_dirs", log_dirs),
    ]
