"""Requests for the controller: controlled shutdown (from a stopping broker), preferred and unclean leader election.

Handlers decode and render; the controller requests service (broker/controller/requests.py) checks the broker
epoch, puts the controller's event in its queue and waits for the answer, or forwards to the controller, and the
election admin (broker/admin/elections.py) checks that named partitions exist and writes the preferred election.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.params import load_json_object
from broker.produce.forwarding import FORWARDED
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.model import TopicPartition


async def controlled_shutdown(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    body = load_json_object(await request.read())
    broker_id, broker_epoch = body.get("broker_id"), body.get("broker_epoch")
    if not _is_int(broker_id) or not _is_int(broker_epoch):
        raise InvalidRequestError('the body must be {"broker_id": int, "broker_epoch": int}')
    remaining = await broker.controller_requests.controlled_shutdown(broker_id, broker_epoch)
    return json_response({"remaining_partitions": [{"topic": tp.topic, "partition": tp.partition}
                                                   for tp in remaining]})


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
    leaders = await broker.controller_requests.unclean_election(partitions, forwarded=FORWARDED in request.headers)
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
