"""Requests for the controller: controlled shutdown (from a stopping broker) and preferred leader election."""

from __future__ import annotations

import asyncio

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.params import load_json_object
from broker.controller.controller import ControlledShutdown
from odradek.protocol.errors import (
    InvalidRequestError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    UnknownPartitionError,
)
from odradek.protocol.model import TopicPartition


async def controlled_shutdown(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = load_json_object(await request.read())
    broker_id, broker_epoch = body.get("broker_id"), body.get("broker_epoch")
    if not _is_int(broker_id) or not _is_int(broker_epoch):
        raise InvalidRequestError('the body must be {"broker_id": int, "broker_epoch": int}')
    # Only the broker itself knows its epoch and may stop itself: a live registration with this very epoch.
    registered = broker.cache.brokers.get(broker_id)
    if registered is None or registered.epoch != broker_epoch:
        raise StaleBrokerEpochError(f"broker {broker_id} with epoch {broker_epoch} is not a live registration")
    reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
    request_ = ControlledShutdown(broker_id, broker_epoch, reply)
    if not broker.controller.active or not broker.controller.queue.put(request_):
        raise NotControllerError(f"broker {broker.broker_id} is not the controller", controller_id=broker.controller_id)
    try:
        remaining = await asyncio.wait_for(reply, 30)
    except TimeoutError:
        raise RequestTimedOutError("the controller did not finish the controlled shutdown in 30 s") from None
    return json_response({"remaining_partitions": [{"topic": t, "partition": p} for t, p in remaining]})


async def preferred_election(request: web.Request) -> web.Response:
    """Ask for a preferred leader election: all partitions, or the listed ones (Kafka's ZooKeeper route)."""
    broker = request.app[BROKER]
    raw = await request.read()
    body = load_json_object(raw) if raw.strip() else {}
    listed = body.get("partitions", [])
    usage = 'the body must be {"partitions": [{"topic": str, "partition": int}]} or empty'
    if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
        raise InvalidRequestError(usage)
    partitions: list[TopicPartition] = []
    for p in listed:
        topic, partition = p.get("topic"), p.get("partition")
        if not isinstance(topic, str) or not _is_int(partition) or partition < 0:
            raise InvalidRequestError(usage)
        validate_topic_name(topic)
        if partition not in getattr(broker.cache.topics.get(topic), "partitions", {}):
            raise UnknownPartitionError(f"{topic}-{partition} does not exist")
        partitions.append(TopicPartition(topic, partition))
    started = await asyncio.to_thread(broker.zk.request_preferred_election, partitions)
    status = 202 if started else 409
    return json_response({"accepted": started, "message": None if started else "an election is already in progress"},
                         status=status)


def _is_int(value: object) -> bool:
    return type(value) is int and -(2**63) <= value < 2**63
