"""Requests for the controller: controlled shutdown (from a stopping broker) and preferred leader election."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.controller.controller import ControlledShutdown
from odradek.protocol.errors import InvalidRequestError, NotControllerError, RequestTimedOutError
from odradek.protocol.model import TopicPartition


async def controlled_shutdown(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    try:
        body = orjson.loads(await request.read())
        broker_id, broker_epoch = int(body["broker_id"]), int(body["broker_epoch"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise InvalidRequestError('the body must be {"broker_id": int, "broker_epoch": int}') from None
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
    try:
        body = orjson.loads(raw) if raw else {}
        partitions = [TopicPartition(str(p["topic"]), int(p["partition"])) for p in body.get("partitions", [])]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise InvalidRequestError('the body must be {"partitions": [{"topic", "partition"}]} or empty') from None
    started = await asyncio.to_thread(broker.zk.request_preferred_election, partitions)
    status = 202 if started else 409
    return json_response({"accepted": started, "message": None if started else "an election is already in progress"},
                         status=status)
