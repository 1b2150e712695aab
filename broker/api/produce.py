"""POST /topics/{t}[/partitions/{p}] (REST Proxy v2 JSON produce) and POST .../batches (binary path).

Both wait, within the request's ``timeout_ms``, for a topic this broker has not heard of yet (when ZooKeeper
knows it) and for a leader to be elected and active (see broker/produce/routing.py). The JSON path then
forwards to another broker's leadership; the binary path is leader-only and names the leader instead.
"""

from __future__ import annotations

import functools
from urllib.parse import unquote

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.embedded import (
    BINARY,
    JSON,
    SCHEMA_TYPES,
    parse_produce_body,
    parse_schema_body,
    plain_records,
    produce_format,
    record_error,
    require_supported,
    value_bound,
)
from broker.api.params import INT32_MAX, int_param, limits, partition_param
from broker.produce.routing import deadline_after
from broker.produce.service import PartitionResult, Row, parse_acks
from odradek.protocol import media, speedups
from odradek.protocol.errors import InvalidRequestError, UnsupportedMediaTypeError


async def produce_json(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    validate_topic_name(topic)
    fixed = partition_param(request) if "partition" in request.match_info else None
    fmt = produce_format(request.content_type)
    acks = parse_acks(request.query.get("acks"))
    timeout_ms = int_param(request, "timeout_ms", 30000, maximum=INT32_MAX)
    body = await request.read()
    max_records = limits(request).max_records_per_request
    if fmt in SCHEMA_TYPES:
        return await _produce_schema(request, topic, fixed, fmt, body, acks, timeout_ms, max_records)
    # The compiled codec (plain records, known topic): first its one pass over the body's bytes, else over
    # orjson's tree; else the reference path, which names errors. Keyed requests: the seeded partitioner.
    key = idempotency_key(request)
    encoded = None
    if key is None and fmt in (JSON, BINARY):
        encoded = broker.produce.encode_plain(topic, body, fmt == BINARY, fixed, max_records,
                                              value_bound(max_records),
                                              functools.partial(plain_records, body, fmt, max_records))
    rows, named = ([], None) if encoded is not None else parse_produce_body(body, fmt, max_records)
    deadline = deadline_after(timeout_ms)
    await broker.produce.await_topic(topic, deadline)
    require_supported(fmt, topic, topic_exists=True)  # schema formats: 422, but only once the topic is known
    if encoded is None:
        broker.produce.check_timestamps(topic, rows)
        partitions = broker.produce.choose_partitions(topic, rows, named, fixed, seed=key)
        results = await broker.produce.produce(topic, rows, partitions, acks, timeout_ms, deadline,
                                               idempotency_key=key)
    else:
        partitions = encoded[1]
        results = await broker.produce.produce_encoded(topic, encoded[0], acks, timeout_ms, deadline)
    if all(r.error is None for r in results.values()):
        return _rendered(partitions, results, acks)
    offsets = record_offsets(partitions, results, acks)
    leaders = sorted({r.leader for r in results.values() if r.leader is not None})
    response = json_response({"key_schema_id": None, "value_schema_id": None, "offsets": offsets},
                             content_type=media.KAFKA_V2)
    if leaders:
        response.headers[media.LEADER] = ",".join(map(str, leaders))
    return response


async def _produce_schema(request: web.Request, topic: str, fixed: int | None, fmt: str, body: bytes, acks: int,
                          timeout_ms: int, max_records: int) -> web.Response:
    """An avro or jsonschema produce (kafka-rest's ProduceToTopicAction / ProduceToPartitionAction with a
    SchemaTopicProduceRequest): the schema registry service registers or looks up the schemas (topic-name
    strategy) and frames every record before anything is appended; the answer names the schema ids."""
    broker = request.app[BROKER]
    doc, keys, values, named = parse_schema_body(body, max_records)
    deadline = deadline_after(timeout_ms)
    await broker.produce.await_topic(topic, deadline)  # an unknown topic is 404 whatever the format
    key_id, value_id, framed_keys, framed_values = await broker.schema_registry.encode_embedded(
        topic, SCHEMA_TYPES[fmt], doc, keys, values)
    rows: list[Row] = [(k, v, None, []) for k, v in zip(framed_keys, framed_values, strict=True)]
    broker.produce.check_timestamps(topic, rows)
    partitions = broker.produce.choose_partitions(topic, rows, named, fixed)
    results = await broker.produce.produce(topic, rows, partitions, acks, timeout_ms, deadline)
    response = json_response({"key_schema_id": key_id, "value_schema_id": value_id,
                              "offsets": record_offsets(partitions, results, acks)}, content_type=media.KAFKA_V2)
    leaders = sorted({r.leader for r in results.values() if r.leader is not None})
    if leaders:
        response.headers[media.LEADER] = ",".join(map(str, leaders))
    return response


def _rendered(partitions: list[int], results: dict[int, PartitionResult], acks: int) -> web.Response:
    """The answer when no partition failed, rendered in one pass by the compiled codec (or its reference)."""
    bases = {p: None if acks == 0 or r.base_offset is None or r.base_offset < 0 else r.base_offset
             for p, r in results.items()}
    response = web.Response(body=speedups.render_offsets(partitions, bases), content_type=media.KAFKA_V2)
    leaders = sorted({r.leader for r in results.values() if r.leader is not None})
    if leaders:
        response.headers[media.LEADER] = ",".join(map(str, leaders))
    return response


async def produce_batches(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    if request.content_type != media.BATCHES:
        raise UnsupportedMediaTypeError(f"the batch path takes {media.BATCHES}, not {request.content_type}")
    acks = parse_acks(request.query.get("acks"))
    timeout_ms = int_param(request, "timeout_ms", 30000, maximum=INT32_MAX)
    data = bytearray(await request.read())
    # Leader-only; checked as Kafka's LogValidator before the append (a refused batch leaves no trace).
    # Transactional batches are verified with the coordinator, as on the Kafka door (KIP-890).
    verify = functools.partial(broker.txn_router.verify_produce, transactional_id(request), topic, partition)
    result = await broker.produce.append_batches(topic, partition, data, acks, timeout_ms, idempotency_key(request),
                                                 verify_txn=verify)
    answer = {
        "topic": topic, "partition": partition, "base_offset": result.base_offset,
        "last_offset": result.last_offset, "record_count": result.record_count,
        "log_append_time": result.log_append_time, "leader": result.leader, "leader_epoch": result.leader_epoch,
    }
    if result.batch_offsets is not None:  # an idempotent retry answered partly from state
        answer["batch_base_offsets"] = list(result.batch_offsets)
    return json_response(answer)


def transactional_id(request: web.Request) -> str | None:
    """The batch path's transactional id header, decoded (at most 249 characters, Kafka's bound), or None."""
    raw = request.headers.get(media.TRANSACTIONAL_ID)
    if raw is None:
        return None
    try:
        tid = unquote(raw.strip(), errors="strict")
    except UnicodeDecodeError:
        raise InvalidRequestError(f"the {media.TRANSACTIONAL_ID} header is not percent-encoded UTF-8") from None
    if not 0 < len(tid) <= 249:
        raise InvalidRequestError(f"the {media.TRANSACTIONAL_ID} header must name 1 to 249 characters")
    return tid


def idempotency_key(request: web.Request) -> str | None:
    """The request's Idempotency-Key header (at most 200 characters), or None (docs/transactions.md)."""
    key = request.headers.get(media.IDEMPOTENCY_KEY, "").strip()
    if not key:
        return None
    if len(key) > 200:
        raise InvalidRequestError(f"the {media.IDEMPOTENCY_KEY} header is longer than 200 characters")
    return key



def record_offsets(partitions: list[int], results: dict[int, PartitionResult], acks: int, *,
                   name_failed_partition: bool = True) -> list[dict[str, object]]:
    """One answer per record, in request order: its partition and offset (None with acks=0), or its partition's
    error. v1 names neither the partition nor the offset of a failed record (``name_failed_partition=False``)."""
    seen: dict[int, int] = {}
    offsets = []
    for p in partitions:
        r = results[p]
        index = seen.get(p, 0)
        seen[p] = index + 1
        if r.error is not None:
            offsets.append({"partition": p if name_failed_partition else None, "offset": None,
                            **record_error(r.error)})
        else:
            offset = None if acks == 0 or r.base_offset is None or r.base_offset < 0 else r.base_offset + index
            offsets.append({"partition": p, "offset": offset, "error_code": None, "error": None})
    return offsets
