"""Requests for the controller: controlled shutdown (from a stopping broker), preferred and unclean leader election."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.params import load_json_object
from broker.controller.controller import ControlledShutdown, UncleanElection
from broker.produce import forwarding as forward
from odradek.protocol.errors import (
    InvalidRequestError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
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
    elections = request.app[BROKER].elections
    raw = await request.read()
    partitions = elections.existing(_listed_partitions(load_json_object(raw) if raw.strip() else {}))
    started = await asyncio.to_thread(elections.request_preferred, partitions)
    status = 202 if started else 409
    return json_response({"accepted": started, "message": None if started else "an election is already in progress"},
                         status=status)


async def unclean_election(request: web.Request) -> web.Response:
    """Elect leaders for leaderless partitions from any live replica, in sync or not (Kafka's ElectLeaders with
    UNCLEAN, KIP-460): an operator's explicit choice of availability over the records only the lost ISR had.
    Any broker forwards it to the controller. Answers, per partition, the leader or an error name."""
    broker = request.app[BROKER]
    raw = await request.read()
    partitions = broker.elections.existing(_listed_partitions(load_json_object(raw) if raw.strip() else {}))
    if not partitions:
        raise InvalidRequestError('the body must be {"partitions": [{"topic": str, "partition": int}, ...]}')
    if not broker.controller.active:
        url = broker.cache.leader_url(broker.controller_id) if broker.controller_id is not None else None
        if url is None or broker.http_session is None or "Odradek-Forwarded" in request.headers:
            raise NotControllerError(f"broker {broker.broker_id} is not the controller",
                                     controller_id=broker.controller_id)
        body = await forward.request_json(broker.http_session, "POST", f"{url}{request.rel_url}", raw,
                                          headers={"Odradek-Forwarded": str(broker.broker_id),
                                                   "Content-Type": "application/json"}, timeout_s=35)
        return json_response(body)
    reply: asyncio.Future[dict[TopicPartition, int | None]] = asyncio.get_running_loop().create_future()
    if not broker.controller.queue.put(UncleanElection(tuple(partitions), reply)):
        raise NotControllerError(f"broker {broker.broker_id} is not the controller", controller_id=broker.controller_id)
    try:
        leaders = await asyncio.wait_for(reply, 30)
    except TimeoutError:
        raise RequestTimedOutError("the controller did not finish the election in 30 s") from None
    return json_response({"partitions": [
        {"topic": tp.topic, "partition": tp.partition, "leader": leaders.get(tp),
         "error": None if leaders.get(tp) is not None else "ELIGIBLE_LEADERS_NOT_AVAILABLE"}
        for tp in partitions]})


def _listed_partitions(body: dict[str, Any]) -> Iterator[TopicPartition]:
    """``{"partitions": [{"topic", "partition"}, ...]}`` (at most 10,000), decoded lazily: the admin service
    checks that each exists as it comes, so the first bad item, of either kind, is the one reported."""
    listed = body.get("partitions", [])
    usage = 'the body must be {"partitions": [{"topic": str, "partition": int}]} or empty'
    if not isinstance(listed, list) or len(listed) > 10_000 or not all(isinstance(p, dict) for p in listed):
        raise InvalidRequestError(usage)

    def decode() -> Iterator[TopicPartition]:
        for p in listed:
            topic, partition = p.get("topic"), p.get("partition")
            if not isinstance(topic, str) or not _is_int(partition) or partition < 0:
                raise InvalidRequestError(usage)
            validate_topic_name(topic)
            yield TopicPartition(topic, partition)

    return decode()


def _is_int(value: object) -> bool:
    return type(value) is int and -(2**63) <= value < 2**63
