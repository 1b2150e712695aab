"""Confluent REST Proxy v2 consumer instances: ``/consumers/{group}`` and ``.../instances/{instance}/...``.

The shapes are Confluent's (``CreateConsumerInstanceResponse``, ``ConsumerRecord`` JSON, error codes 40403,
40902, 40903, 40601), so REST-proxy clients consume unchanged. An instance lives in the broker that created it
and its ``base_uri`` names that broker; a request for it that reaches another broker is forwarded to the holder
in one hop, so a client behind a load balancer works too. The holder is known from the instance id alone (a
generated id names its broker) or from one ZooKeeper read (a name the client chose; broker/consumer_locator.py);
never by asking brokers in turn. A forwarded answer names its holder in ``Odradek-Consumer-Broker``.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.api.embedded import BINARY, JSON
from broker.api.errors import error_response
from broker.api.params import int_param, limits, load_json_object, parse_ascii_int
from broker.interbroker import Request
from broker.rest_consumers import ConsumerInstance, InstanceConfig, RestInstanceManager
from broker.security.middleware import forwarded_identity
from odradek.protocol import media
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    ConsumerFormatMismatchError,
    ConsumerInstanceNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidRequestError,
    NotAcceptableError,
    OdradekError,
    UnknownMemberIdError,
)
from odradek.protocol.model import TopicPartition

FORWARDED = "Odradek-Consumer-Forwarded"
HOLDER = "Odradek-Consumer-Broker"
GROUP_RE = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
MAX_RECORDS_BYTES = 64 * 1024 * 1024

_FORMAT_TYPES = {BINARY: media.BINARY_V2, JSON: media.JSON_V2, "avro": media.AVRO_V2,
                 "jsonschema": media.JSONSCHEMA_V2, "protobuf": media.PROTOBUF_V2}


def _manager(request: web.Request) -> RestInstanceManager:
    manager: RestInstanceManager | None = getattr(request.app[BROKER], "rest_consumers", None)
    if manager is None:
        raise BrokerNotAvailableError("consumer instances are not available on this broker yet")
    return manager


def _group(request: web.Request) -> str:
    group = request.match_info["group"]
    if not GROUP_RE.match(group):
        raise InvalidRequestError("the group name may hold letters, digits, '.', '_' and '-' (at most 249)")
    return group


async def _body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if required:
            raise InvalidRequestError("a JSON object body is required")
        return {}
    return load_json_object(raw)  # the shared check: JSON, an object, nesting limited


def _partitions(body: dict[str, Any], key: str = "partitions", *, with_offset: bool = False
                ) -> list[tuple[TopicPartition, int, str]]:
    items = body.get(key)
    if not isinstance(items, list):
        raise InvalidRequestError(f'the body must have a "{key}" array')
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequestError(f"{key}[{i}] must be an object")
        topic, partition = item.get("topic"), item.get("partition")
        if not isinstance(topic, str) or not topic:
            raise InvalidRequestError(f"{key}[{i}].topic must be a non-empty string")
        if type(partition) is not int or partition < 0:
            raise InvalidRequestError(f"{key}[{i}].partition must be a non-negative integer")
        offset = item.get("offset", 0)
        if with_offset and (type(offset) is not int or offset < 0):
            raise InvalidRequestError(f"{key}[{i}].offset must be a non-negative integer")
        metadata = item.get("metadata") or ""
        if not isinstance(metadata, str):
            raise InvalidRequestError(f"{key}[{i}].metadata must be a string")
        out.append((TopicPartition(topic, partition), int(offset), metadata))
    return out


def _v2(obj: object, status: int = 200) -> web.Response:
    return json_response(obj, status=status, content_type=media.KAFKA_V2)


def _no_content() -> web.Response:
    return web.Response(status=204)


async def _instance(request: web.Request) -> ConsumerInstance | web.StreamResponse:
    """The local instance, or the holder's answer to this very request (forwarded), or 40403."""
    manager = _manager(request)
    group, name = _group(request), request.match_info["instance"]
    try:
        return manager.get(group, name)
    except ConsumerInstanceNotFoundError:
        if request.headers.get(FORWARDED):
            raise
    return await _forward(request, manager, group, name)


async def _forward(request: web.Request, manager: RestInstanceManager, group: str, name: str) -> web.StreamResponse:
    """This very request, sent once to the instance's holder; its answer (or its typed error) as ours."""
    broker = request.app[BROKER]
    holder = await manager.locator.holder(group, name)
    if holder is None or holder == broker.broker_id:
        raise ConsumerInstanceNotFoundError("Consumer instance not found.")
    # forwarded_identity: the caller's principal, so the holder checks the instance's owner (docs/security.md).
    headers = {FORWARDED: "1", "Accept": request.headers.get("Accept", "*/*"), **forwarded_identity(request)}
    if request.content_type:
        headers["Content-Type"] = request.content_type
    raw_timeout = request.query.get("timeout", "")
    wait_ms = min(parse_ascii_int(raw_timeout, 0) or 0, limits(request).fetch_max_wait_ms)
    body = await request.read()
    try:
        reply = await broker.interbroker.send(holder, Request(
            request.method, str(request.rel_url), body=body or None, headers=headers, wait_ms=wait_ms))
    except OdradekError as e:
        out = error_response(e)
    else:
        out = web.Response(status=reply.status, body=reply.body or None,
                           headers={"Content-Type": reply.headers.get("Content-Type", media.KAFKA_V2)}
                           if reply.body else None)
    out.headers[HOLDER] = str(holder)
    return out


# ------------------------------------------------------------------------------------------------ handlers


async def create_instance(request: web.Request) -> web.Response:
    manager = _manager(request)
    group = _group(request)
    body = await _body(request, required=False)
    name = body.get("name") if body.get("name") is not None else body.get("id")
    if name is not None and not isinstance(name, str):
        raise InvalidRequestError("name must be a string")
    inst = await manager.open(group, name, InstanceConfig.parse(body))
    return _v2({"instance_id": inst.name, "base_uri": inst.base_uri})


async def delete_instance(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    await _manager(request).delete(found.group, found.name)  # commits, leaves, and unregisters its name
    return _no_content()


async def subscribe(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    body = await _body(request)
    topics, pattern = body.get("topics"), body.get("topic_pattern")
    if (topics is None) == (pattern is None):
        raise InvalidRequestError('give "topics" (an array of names) or "topic_pattern", not both')
    if topics is not None and (not isinstance(topics, list) or not topics
                               or not all(isinstance(t, str) and t for t in topics)):
        raise InvalidRequestError('"topics" must be a non-empty array of topic names')
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidRequestError('"topic_pattern" must be a regular expression')
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidRequestError(f'"topic_pattern" is not a regular expression: {e}') from None
    async with found.lock:
        await _manager(request).subscribe(found, sorted(set(topics)) if topics else None, pattern)
    return _no_content()


async def get_subscription(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    topics = found.topics if found.pattern is None else sorted({tp.topic for tp in found.assigned})
    return _v2({"topics": topics if found.mode == "subscribe" else []})


async def unsubscribe(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    async with found.lock:
        if found.mode == "subscribe":
            await _manager(request).unsubscribe(found)
    return _no_content()


async def assign(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    parts = [tp for tp, _, _ in _partitions(await _body(request))]
    async with found.lock:
        _manager(request).assign(found, parts)
    return _no_content()


async def get_assignments(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    return _v2({"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(found.assigned)]})


def _require_assigned(inst: ConsumerInstance, tps: list[TopicPartition]) -> None:
    for tp in tps:
        if tp not in inst.assigned:
            raise IllegalStateError(f"Illegal state: No current assignment for partition {tp}")


async def seek(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    items = _partitions(await _body(request), "offsets", with_offset=True)
    async with found.lock:
        _require_assigned(found, [tp for tp, _, _ in items])
        for tp, offset, _ in items:
            found.positions[tp] = offset
            found.resets.pop(tp, None)
    return _no_content()


async def seek_to_beginning(request: web.Request) -> web.StreamResponse:
    return await _seek_to(request, "earliest")


async def seek_to_end(request: web.Request) -> web.StreamResponse:
    return await _seek_to(request, "latest")


async def _seek_to(request: web.Request, where: str) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    tps = [tp for tp, _, _ in _partitions(await _body(request))]
    async with found.lock:
        _require_assigned(found, tps)
        for tp in tps:
            found.positions.pop(tp, None)
            found.resets[tp] = where
    return _no_content()


def _records_format(inst: ConsumerInstance, accept: str) -> str:
    """The media type to answer with; 40601 when the client asks for the other embedded format."""
    wanted = _FORMAT_TYPES[inst.config.format]
    kinds = [part.split(";")[0].strip() for part in accept.split(",")] if accept else ["*/*"]
    if wanted in kinds:
        return wanted
    if any(k in _FORMAT_TYPES.values() or k.startswith("application/vnd.kafka.avro") for k in kinds):
        raise ConsumerFormatMismatchError("The requested embedded data format does not match the deserializer "
                                          "for this consumer instance")
    if any(k in ("*/*", "application/*", media.KAFKA_V2, media.PLAIN_JSON) for k in kinds):
        return wanted
    raise NotAcceptableError(f"cannot answer with {accept}; this instance reads {wanted}")


async def records(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    content_type = _records_format(found, request.headers.get("Accept", ""))
    timeout_ms = int_param(request, "timeout", found.config.request_timeout_ms)
    max_bytes = min(int_param(request, "max_bytes", MAX_RECORDS_BYTES, minimum=1), MAX_RECORDS_BYTES)
    # The service takes the instance's lock itself: not while the first join answer is awaited (it is applied
    # under that lock), and it lets a later one through during the long-poll.
    out = await _manager(request).read(found, min(timeout_ms, 300_000), max_bytes)
    found.touch()
    return json_response(out, content_type=content_type)


async def commit_offsets(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    body = await _body(request, required=False)
    offsets = None
    if body.get("offsets") is not None:
        # Confluent's v2 commits the offset after the one named (the request names the last record processed).
        offsets = {tp: (offset + 1, metadata) for tp, offset, metadata in _partitions(body, "offsets",
                                                                                          with_offset=True)}
    async with found.lock:
        try:
            await _manager(request).commit(found, offsets)
        except (UnknownMemberIdError, IllegalGenerationError) as e:
            # Not 40403 (which tells a REST client its instance is gone): the instance is alive, rejoining.
            raise IllegalStateError(f"Illegal state: the commit was refused by the group ({e.name}): the "
                                    "instance is rejoining; read again and commit") from None
    return web.Response(status=200)


async def committed_offsets(request: web.Request) -> web.StreamResponse:
    found = await _instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    body = await _body(request, required=False)
    tps = [tp for tp, _, _ in _partitions(body)] if body else sorted(found.assigned)
    out = await _manager(request).committed(found, tps)
    return _v2({"offsets": out})


def routes() -> list[web.RouteDef]:
    g, i = "/consumers/{group}", "/consumers/{group}/instances/{instance}"
    return [
        web.post(g, create_instance),
        web.delete(i, delete_instance),
        web.post(f"{i}/subscription", subscribe),
        web.get(f"{i}/subscription", get_subscription),
        web.delete(f"{i}/subscription", unsubscribe),
        web.post(f"{i}/assignments", assign),
        web.get(f"{i}/assignments", get_assignments),
        web.post(f"{i}/positions", seek),
        web.post(f"{i}/positions/beginning", seek_to_beginning),
        web.post(f"{i}/positions/end", seek_to_end),
        web.get(f"{i}/records", records),
        web.post(f"{i}/offsets", commit_offsets),
        web.get(f"{i}/offsets", committed_offsets),
    ]
