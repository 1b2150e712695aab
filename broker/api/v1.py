"""Confluent REST Proxy v1, as Confluent's REST Proxy 5.x served it, for v1 clients (npm ``kafka-rest``, older
Python ones) that cannot move to v2.

What v1 has (kafka-rest 5.x ``resources/v1/TopicsResource.java``, ``PartitionsResource.java``,
``ConsumersResource.java``; media types from ``Versions.java``):

* produce: ``POST /topics/{t}`` and ``POST /topics/{t}/partitions/{p}`` with ``application/vnd.kafka.v1+json``
  (binary), ``...binary.v1+json``, ``...json.v1+json`` or ``...avro.v1+json``; records are ``{key, value}`` (and
  ``partition`` on the topic path), the answer ``{offsets: [{partition, offset, error_code, error}],
  key_schema_id, value_schema_id}``, a failed record with a null partition and offset (``v1/ProduceResponse``);
* the simple consumer: ``GET /topics/{t}/partitions/{p}/messages?offset=N&count=C`` (``count`` defaults to 1;
  ``timestamp`` instead of ``offset`` starts at a time), records ``{topic, key, value, partition, offset}``;
* consumer instances: ``POST /consumers/{g}`` (``v1/CreateConsumerInstanceRequest``: id/name, format,
  auto.offset.reset, auto.commit.enable), ``GET /consumers/{g}/instances/{i}/topics/{t}?max_bytes=`` (the first
  read of a topic subscribes the instance to it, ``ConsumerState.getOrCreateTopicState``), ``POST
  .../instances/{i}/offsets`` (commits what was read; answers ``[{topic, partition, consumed, committed}]``,
  ``v1/CommitOffsetsResponse``), ``DELETE .../instances/{i}`` (204, the v2 handler's answer).

The paths v1 shares with v2 (both produces, instance creation, the commit) are served by :func:`sharing_paths`:
a request whose Content-Type or Accept names a v1 type (``params.is_v1``) gets this module's handler, any other
the v2 one, unchanged. Everything is built on the same services as v2: ProduceService, FetchService and
OffsetsService, and the REST consumer-instance service (broker/rest_consumers.py), whose instances v1 and v2
share. Avro needs a Schema Registry, which Odradek does not have: 422 with Confluent's 42206, after the topic
check, as v2 answers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from broker.api import consumers_v2
from broker.api.context import BROKER, json_response
from broker.api.embedded import BINARY, JSON, parse_produce_body, record_json
from broker.api.params import (
    INT32_MAX,
    INT64_MIN,
    int_param,
    is_v1,
    limits,
    load_json_object,
    negotiate,
    parse_ascii_int,
    partition_param,
    topic_param,
)
from broker.api.produce import record_offsets
from broker.fetch.offsets import ListOffsetsRequest
from broker.fetch.service import DEFAULT_MAX_BYTES, FetchRequest
from broker.produce.routing import deadline_after
from broker.produce.service import parse_acks
from broker.rest_consumers import ConsumerInstance, InstanceConfig
from odradek.protocol import media
from odradek.protocol.errors import (
    ConstraintViolationError,
    ConsumerFormatMismatchError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidPayloadError,
    InvalidRequestError,
    UnknownMemberIdError,
)
from odradek.protocol.model import TopicPartition
from odradek.protocol.records import decode_records, iter_batch_headers

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

AVRO = "avro"
# What v1 answers that carry no embedded data are negotiated as (TopicsResource's @Produces; ConsumersResource
# also lists the embedded types, "so you can always use these headers when interacting with a consumers resource").
_ANSWER_TYPES = (media.KAFKA_V1, media.KAFKA_DEFAULT, media.PLAIN_JSON)
_CONSUMER_TYPES = (*_ANSWER_TYPES, media.BINARY_V1, media.JSON_V1, media.AVRO_V1)
_EMBEDDED = {media.BINARY_V1: BINARY, media.JSON_V1: JSON, media.AVRO_V1: AVRO}
_TYPE_OF = {BINARY: media.BINARY_V1, JSON: media.JSON_V1}
# consumer.request.max.bytes (kafka-rest KafkaRestConfig): the most one v1 consumer read answers.
MAX_READ_BYTES = consumers_v2.MAX_RECORDS_BYTES
# The simple consumer's fetch size per round (its fetch.message.max.bytes).
SIMPLE_FETCH_BYTES = DEFAULT_MAX_BYTES
MAX_COUNT = 100_000  # records one simple-consumer read may ask for (a bound on the answer, not Confluent's)


def _v1(obj: object, content_type: str = media.KAFKA_V1) -> web.Response:
    return json_response(obj, content_type=content_type)


def _schema_registry_needed(what: str) -> InvalidPayloadError:
    return InvalidPayloadError(
        f"Payload error. The avro embedded format needs a Schema Registry, which Odradek does not support yet; "
        f"{what} with {media.BINARY_V1} or {media.JSON_V1}")


# ------------------------------------------------------------------------------------------------------ produce


def _produce_format(content_type: str) -> str:
    """v1's produce formats by Content-Type (TopicsResource: binary is also what the generic types mean)."""
    if content_type in _EMBEDDED:
        return _EMBEDDED[content_type]
    return BINARY  # application/vnd.kafka.v1+json, vnd.kafka+json, json, octet-stream (Versions.GENERIC_REQUEST)


def _check_v1_records(body: bytes, partition_path: bool) -> None:
    """v1's record fields: ``key`` and ``value``, and ``partition`` on the topic path (``v1/BinaryTopicProduceRequest``,
    ``v1/BinaryPartitionProduceRequest``); v2's ``timestamp`` and ``headers`` are not v1's (422, as any unknown
    field). Malformed bodies are left to the shared parser, which answers them as v2 does."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        return
    allowed = {"key", "value"} if partition_path else {"key", "value", "partition"}
    for i, rec in enumerate(records):
        if isinstance(rec, dict) and not set(rec) <= allowed:
            raise ConstraintViolationError(f"records[{i}] has unknown fields {sorted(set(rec) - allowed)}; a v1 "
                                           f"record has {sorted(allowed)}")


async def produce(request: web.Request) -> web.Response:
    """POST /topics/{t} and /topics/{t}/partitions/{p} with a v1 type: ProduceService, v1's answer."""
    broker = request.app[BROKER]
    topic = topic_param(request)
    fixed = partition_param(request) if "partition" in request.match_info else None
    answer_type = negotiate(request, _ANSWER_TYPES)
    fmt = _produce_format(request.content_type)
    acks = parse_acks(request.query.get("acks"))
    timeout_ms = int_param(request, "timeout_ms", 30000, maximum=INT32_MAX)
    body = await request.read()
    rows, named = parse_produce_body(body, fmt, limits(request).max_records_per_request)  # avro: checked only
    if fmt != AVRO:
        _check_v1_records(body, fixed is not None)
    deadline = deadline_after(timeout_ms)
    await broker.produce.await_topic(topic, deadline)
    if fmt == AVRO:  # after the topic check: an unknown topic is 404 whatever the format
        raise _schema_registry_needed("produce")
    partitions = broker.produce.choose_partitions(topic, rows, named, fixed)
    results = await broker.produce.produce(topic, rows, partitions, acks, timeout_ms, deadline)
    offsets = record_offsets(partitions, results, acks, name_failed_partition=False)
    response = _v1({"offsets": offsets, "key_schema_id": None, "value_schema_id": None}, answer_type)
    leaders = sorted({r.leader for r in results.values() if r.leader is not None})
    if leaders:
        response.headers[media.LEADER] = ",".join(map(str, leaders))
    return response


# -------------------------------------------------------------------------------------------- simple consumer


def _v1_record(topic: str, partition: int, record: Any, fmt: str) -> dict[str, Any]:
    """v1's ConsumerRecord (``v1/BinaryConsumerRecord``, ``v1/JsonConsumerRecord``): no timestamp, no headers."""
    r = record_json(topic, partition, record, fmt)
    return {"topic": r["topic"], "key": r["key"], "value": r["value"], "partition": r["partition"],
            "offset": r["offset"]}


def _timestamp_ms(raw: str) -> int:
    """``timestamp``: an ISO-8601 instant (JAX-RS converts Confluent's ``Instant`` parameter from one), or ms."""
    ms = parse_ascii_int(raw, 0)
    if ms is not None:
        return ms
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequestError(f"timestamp must be an ISO-8601 instant or milliseconds, not {raw[:40]!r}") from None
    if when.tzinfo is None:
        raise InvalidRequestError("timestamp must name its time zone (e.g. 2020-01-01T00:00:00Z)")
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InvalidRequestError("timestamp must not be before 1970")
    return ms


async def messages(request: web.Request) -> web.Response:
    """GET /topics/{t}/partitions/{p}/messages?offset=N&count=C (v1's simple consumer, SimpleConsumerManager):
    up to ``count`` records from ``offset``, fewer when the log ends first; binary unless JSON is asked for."""
    broker = request.app[BROKER]
    topic = topic_param(request)
    partition = partition_param(request)
    content_type = negotiate(request, (media.BINARY_V1, *_ANSWER_TYPES, media.JSON_V1, media.AVRO_V1))
    fmt = _EMBEDDED.get(content_type, BINARY)
    has_offset, has_time = bool(request.query.get("offset")), bool(request.query.get("timestamp"))
    if has_offset == has_time:
        raise InvalidRequestError("Either `offset` or `timestamp` query parameters must be set.")
    count = int_param(request, "count", 1, minimum=INT64_MIN)
    if fmt == AVRO:
        await broker.produce.await_topic(topic, deadline_after(0))
        raise _schema_registry_needed("read")
    if has_time:
        found = await broker.offsets.list_offsets(ListOffsetsRequest(
            topic, partition, timestamp=_timestamp_ms(request.query["timestamp"])))
        if found.offset is None:
            return _v1([], content_type)  # no record at or after the time
        offset = found.offset
    else:
        offset = int_param(request, "offset")
    out: list[dict[str, Any]] = []
    remaining = min(count, MAX_COUNT)
    while remaining > 0:
        read = await broker.fetches.fetch_anywhere(FetchRequest(topic, partition, offset, SIMPLE_FETCH_BYTES))
        data = read.records
        assert isinstance(data, bytes | bytearray)  # fetch_anywhere answers bytes
        records = [r for r in decode_records(data) if r.offset >= offset][:remaining]
        if not records:
            break  # "If there is no more messages available, we break early"
        out.extend(_v1_record(topic, partition, r, fmt) for r in records)
        remaining -= len(records)
        next_offset = records[-1].offset + 1
        if remaining > 0:  # past control batches and compaction gaps too
            for _, header in iter_batch_headers(data):
                next_offset = max(next_offset, min(header.next_offset, read.high_watermark))
        offset = next_offset
    return _v1(out, content_type)


# ---------------------------------------------------------------------------------------- consumer instances


async def create_instance(request: web.Request) -> web.Response:
    """POST /consumers/{g} with a v1 type (``v1/CreateConsumerInstanceRequest``): the same instances as v2."""
    manager = consumers_v2._manager(request)
    group = consumers_v2._group(request)
    answer_type = negotiate(request, _CONSUMER_TYPES)
    body = await consumers_v2._body(request, required=False)
    fmt = str(body.get("format") or BINARY).lower()
    if fmt == AVRO:
        raise _schema_registry_needed("create the consumer instance")
    if fmt not in (BINARY, JSON):
        raise ConstraintViolationError("Invalid format type.")
    settings = dict(body)
    for alias, key in (("responseMinBytes", "fetch.min.bytes"), ("requestWaitMs", "consumer.request.timeout.ms")):
        if settings.get(key) is None and settings.get(alias) is not None:
            settings[key] = settings[alias]
    name = body.get("id") if body.get("id") is not None else body.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidRequestError("id and name must be strings")
    inst = await manager.open(group, name, InstanceConfig.parse(settings))
    return _v1({"instance_id": inst.name, "base_uri": inst.base_uri}, answer_type)


def _read_type(inst: ConsumerInstance, request: web.Request) -> str:
    """The answer's media type: the instance's embedded format first; another embedded type is 40601, as
    Confluent's ConsumerManager refuses a read whose format is not the instance's."""
    own = _TYPE_OF.get(inst.config.format)
    if own is None:  # an avro/jsonschema instance made through v2: v1 does not render the schema formats
        raise ConsumerFormatMismatchError(f"The requested embedded data format does not match the deserializer "
                                          f"for this consumer instance ({inst.config.format}, read it through v2)")
    others = tuple(t for t in _EMBEDDED if t != own)
    chosen = negotiate(request, (own, *_ANSWER_TYPES, *others))
    if chosen in others:
        raise ConsumerFormatMismatchError("The requested embedded data format does not match the deserializer "
                                          "for this consumer instance")
    return chosen


def _size(field: Any, fmt: str) -> int:
    """A key's or value's size as Confluent's consumer states count it: the bytes of the stored key or value."""
    if field is None:
        return 0
    if fmt == BINARY:  # base64: 3 bytes per 4 characters, less the padding
        return len(field) * 3 // 4 - field[-2:].count("=")
    if isinstance(field, str):  # stored text that is not JSON, shown as a string
        return len(field.encode())
    return len(orjson.dumps(field))  # the stored JSON text (an orjson.Fragment)


async def read_topic(request: web.Request) -> web.StreamResponse:
    """GET /consumers/{g}/instances/{i}/topics/{t}?max_bytes=M: the first read of a topic subscribes the instance
    to it (v1 reads one topic per instance); records within the instance's ``consumer.request.timeout.ms``."""
    found = await consumers_v2._instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    manager = consumers_v2._manager(request)
    topic = topic_param(request)
    content_type = _read_type(found, request)
    max_bytes = int_param(request, "max_bytes", -1, minimum=INT64_MIN)
    limit = MAX_READ_BYTES if max_bytes <= 0 else min(max_bytes, MAX_READ_BYTES)
    async with found.lock:
        if found.mode is None:
            await manager.subscribe(found, [topic], None)
        elif found.mode != "subscribe" or found.pattern is not None or found.topics != [topic]:
            raise IllegalStateError("Consumer cannot subscribe the the specified target because it has already "
                                    "subscribed to other topics.")
    fmt = found.config.format
    records = await manager.read(found, min(found.config.request_timeout_ms, 300_000), limit)
    # ConsumerReadTask: a record that would bring the answer to max_bytes stays for the next read (max_bytes=1
    # reads nothing: clients use it to keep an instance alive). Positions go back to the first one not returned.
    kept, size = 0, 0
    for r in records:
        cost = _size(r["key"], fmt) + _size(r["value"], fmt)
        if size + cost >= limit and not (kept == 0 and max_bytes <= 0):
            break
        kept += 1
        size += cost
    unread: dict[TopicPartition, int] = {}
    for r in records[kept:]:
        unread.setdefault(TopicPartition(r["topic"], r["partition"]), r["offset"])
    if unread:
        manager.rewind(found, unread)
    found.touch()
    return _v1([{"topic": r["topic"], "key": r["key"], "value": r["value"], "partition": r["partition"],
                 "offset": r["offset"]} for r in records[:kept]], content_type)


async def commit_offsets(request: web.Request) -> web.StreamResponse:
    """POST /consumers/{g}/instances/{i}/offsets with a v1 type: commit what was read; answer what was committed
    as ``[{topic, partition, consumed, committed}]`` (``ConsumerState.commitOffsets``: the last offset read)."""
    found = await consumers_v2._instance(request)
    if not isinstance(found, ConsumerInstance):
        return found
    answer_type = negotiate(request, _CONSUMER_TYPES)
    raw = await request.read()
    if raw.strip():
        load_json_object(raw)  # v1's commit takes no body; one that is not JSON is still a 400
    manager = consumers_v2._manager(request)
    async with found.lock:
        positions = dict(found.positions)
        try:
            await manager.commit(found, {tp: (offset, "") for tp, offset in positions.items()})
        except (UnknownMemberIdError, IllegalGenerationError) as e:
            raise IllegalStateError(f"Illegal state: the commit was refused by the group ({e.name}): the instance "
                                    "is rejoining; read again and commit") from None
    # Kafka commits the next offset to read; v1 reports the last one consumed. A position 0 has consumed nothing.
    return _v1([{"topic": tp.topic, "partition": tp.partition, "consumed": offset - 1, "committed": offset - 1}
                for tp, offset in sorted(positions.items()) if offset > 0], answer_type)


# -------------------------------------------------------------------------------------------------- routing


def negotiated(v1: Handler, v2: Handler) -> Handler:
    """One handler for a path v1 and v2 share: v1's for a v1 request (``params.is_v1``), else v2's."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await (v1 if is_v1(request) else v2)(request)

    handler.__name__ = getattr(v2, "__name__", "handler")
    handler.__doc__ = v2.__doc__
    return handler


_SHARED: dict[tuple[str, str], Handler] = {
    ("POST", "/topics/{topic}"): produce,
    ("POST", "/topics/{topic}/partitions/{partition}"): produce,
    ("POST", "/consumers/{group}"): create_instance,
    ("POST", "/consumers/{group}/instances/{instance}/offsets"): commit_offsets,
}


def sharing_paths(defs: list[web.RouteDef]) -> list[web.RouteDef]:
    """The route table with the paths v1 shares with v2 negotiated (:func:`negotiated`), and v1's own routes
    added: nothing else changes, so v2 answers exactly as before."""
    out = [web.route(d.method, d.path, negotiated(_SHARED[(d.method, d.path)], d.handler), **d.kwargs)
           if (d.method, d.path) in _SHARED else d for d in defs]
    return [*out, *routes()]


def routes() -> list[web.RouteDef]:
    """v1's paths that v2 does not have."""
    return [
        web.get("/topics/{topic}/partitions/{partition}/messages", messages),
        web.get("/consumers/{group}/instances/{instance}/topics/{topic}", read_topic),
    ]

