"""Transactions over HTTP (docs/transactions.md): init, add partitions, add offsets, end, describe, and the
coordinator-to-leader marker write.

Handlers only validate and translate: the rules live in transaction_coordinator. Any broker accepts a transactional id's
request: the transaction router (broker/transaction_router.py) runs it here when this broker coordinates the id,
else forwards it once to the coordinator (a coordinator change in between is NOT_COORDINATOR, retriable); the
answer names the coordinator in ``Odradek-Coordinator``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.produce.forwarding import COORDINATOR, FORWARDED
from broker.transaction_router import ProducerIdAndEpoch
from odradek.protocol.errors import InvalidRequestError
from transaction_coordinator.state import TxnOffsets

_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
INT64_MAX = 2**63 - 1


def _tid(request: web.Request) -> str:
    tid = request.match_info["tid"]
    if not _NAME.fullmatch(tid) or tid in (".", ".."):
        raise InvalidRequestError("transactional.id must be 1 to 249 characters of [A-Za-z0-9._-]")
    return tid


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        raise InvalidRequestError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return body


def _int(body: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    raw = body.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidRequestError(f"{key} must be an integer from {low} to {high}, not {raw!r}")
    return raw


def _producer(body: dict[str, Any]) -> tuple[int, int]:
    return _int(body, "producer_id", 0, INT64_MAX), _int(body, "producer_epoch", 0, 32767)


def _txn(body: dict[str, Any]) -> int | None:
    """The transaction a request names (``transaction``: the number the adds answered, -1 before any was
    answered; absent: the open one), which binds it to that transaction (transaction_coordinator/state.py)."""
    return _int(body, "transaction", -1, 2**31 - 1) if "transaction" in body else None


def _partitions(raw: object) -> list[tuple[str, int]]:
    if not isinstance(raw, list) or len(raw) > 10_000:
        raise InvalidRequestError("partitions must be a list of [topic, partition] pairs")
    out = []
    for item in raw:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or isinstance(item[1], bool) or not isinstance(item[1], int) or item[1] < 0):
            raise InvalidRequestError("partitions must be a list of [topic, partition] pairs")
        out.append((item[0], item[1]))
    return out


def _forwarded(request: web.Request) -> bool:
    """Whether another broker forwarded this request (then it is answered here, or refused, never passed on)."""
    return FORWARDED in request.headers


def _answer(body: dict[str, Any], coordinator: int) -> web.Response:
    response = json_response(body)
    response.headers[COORDINATOR] = str(coordinator)
    return response


async def init(request: web.Request) -> web.Response:
    tid = _tid(request)
    body = await _body(request)
    timeout_ms = _int(body, "transaction_timeout_ms", 1, 2**31 - 1, 60_000)
    # KIP-360: a recovering producer names the producer id and epoch it holds (optional; Kafka's door forwards it)
    expected = ProducerIdAndEpoch(*_producer(body)) if "producer_id" in body else None
    routed = await request.app[BROKER].txn_router.init(tid, timeout_ms, expected=expected,
                                                       forwarded=_forwarded(request))
    return _answer({"producer_id": routed.value.producer_id, "producer_epoch": routed.value.producer_epoch},
                   routed.coordinator)


async def add_partitions(request: web.Request) -> web.Response:
    tid = _tid(request)
    body = await _body(request)
    pid, epoch = _producer(body)
    parts = _partitions(body.get("partitions"))
    routed = await request.app[BROKER].txn_router.add_partitions(tid, pid, epoch, parts, txn=_txn(body),
                                                                 forwarded=_forwarded(request))
    return _answer({"transaction": routed.value}, routed.coordinator)


async def add_offsets(request: web.Request) -> web.Response:
    tid = _tid(request)
    body = await _body(request)
    pid, epoch = _producer(body)
    group = body.get("group")
    if not isinstance(group, str) or not _NAME.fullmatch(group):
        raise InvalidRequestError("group must be a group id")
    raw = body.get("offsets")
    if not isinstance(raw, list) or len(raw) > 10_000:
        raise InvalidRequestError("offsets must be a list of [topic, partition, offset, metadata]")
    offsets = []
    for item in raw:
        if (not isinstance(item, list) or len(item) not in (3, 4) or not isinstance(item[0], str)
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item[1:3])):
            raise InvalidRequestError("offsets must be a list of [topic, partition, offset, metadata]")
        meta = item[3] if len(item) == 4 and isinstance(item[3], str) else ""
        offsets.append((item[0], item[1], item[2], meta[:4096]))
    txn_offsets = TxnOffsets(group, _int(body, "generation", -1, 2**31 - 1), tuple(offsets))
    routed = await request.app[BROKER].txn_router.add_offsets(tid, pid, epoch, txn_offsets, txn=_txn(body),
                                                              forwarded=_forwarded(request))
    return _answer({"transaction": routed.value}, routed.coordinator)


async def end(request: web.Request) -> web.Response:
    tid = _tid(request)
    body = await _body(request)
    pid, epoch = _producer(body)
    commit = body.get("commit")
    if not isinstance(commit, bool):
        raise InvalidRequestError("commit must be true or false")
    routed = await request.app[BROKER].txn_router.end(tid, pid, epoch, commit, txn=_txn(body),
                                                      forwarded=_forwarded(request))
    return _answer({"state": routed.value}, routed.coordinator)


async def describe(request: web.Request) -> web.Response:
    return json_response(await request.app[BROKER].txn.describe(_tid(request)))


async def write_marker_local(request: web.Request) -> web.Response:
    """A coordinator's marker for a partition this broker leads (internal: brokers call it; the writing is
    transaction_coordinator/marker_writer.py's)."""
    broker = request.app[BROKER]
    body = await _body(request)
    topic = body.get("topic")
    if not isinstance(topic, str):
        raise InvalidRequestError("topic is required")
    pid, epoch = _producer(body)
    result = await broker.txn_markers.append(topic, _int(body, "partition", 0, 2**31 - 1), pid, epoch,
                                             body.get("commit") is True,
                                             _int(body, "coordinator_epoch", 0, INT64_MAX, 0), forwarded=True)
    return json_response({"offset": result})


def routes() -> list[web.RouteDef]:
    t = "/transactions/{tid}"
    return [
        web.post("/transactions/markers", write_marker_local),
        web.post(f"{t}/init", init),
        web.post(f"{t}/partitions", add_partitions),
        web.post(f"{t}/offsets", add_offsets),
        web.post(f"{t}/end", end),
        web.get(t, describe),
    ]
