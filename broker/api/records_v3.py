"""POST /v3/clusters/{c}/topics/{t}/records: Confluent's v3 produce, one delivery report per record, streamed.

As kafka-rest's ``resources/v3/ProduceAction.java`` (with ``response/StreamingResponse.java`` and
``entities/v3/ProduceRequest.java``, ``ProduceResponse.java``; api/v3/openapi.yaml): the body is a stream of
request objects, concatenated JSON (``{...}{...}`` or one per line), each one record:

    {"partition_id": 1?, "headers": [{"name", "value": base64|null}]?, "timestamp": "2021-02-05T19:14:42Z"?,
     "key": {"type": "BINARY"|"JSON"|"STRING", "data": ...}?, "value": {...}?}

and the answer is 200 with ``Transfer-Encoding: chunked`` and one JSON report per record, in the order the
records came, each followed by a newline:

    {"error_code": 200, "cluster_id", "topic_name", "partition_id", "offset", "timestamp",
     "key": {"type", "size"}?, "value": {"type", "size"}?}        a delivered record
    {"error_code": 400, "message": "...", "error": "..."}         a record that was not

``key``/``value`` appear in a report when the request gave them (``size`` -1 for null data, as Kafka's
RecordMetadata); the timestamp is the record's (the request's, else the broker's time when it was taken).
Errors: a request object that is not a record (not an object, an unknown field, data of the wrong type, bad
base64) is 400 for that record and the stream goes on; a body that stops being JSON ends the stream with one
400 report (Confluent's hasNext failure); a partition the topic does not have is 40403; a record the
leader refused is 50002, or 50003 when it may be retried (the v2 produce's codes, Confluent's
KafkaExceptionMapper). Whole-request errors come before the stream starts, as plain v3 errors: an unknown cluster
404, an unknown topic 404/40403, a non-JSON content type 415.

Schema types (kafka-rest's v3 ProduceAction with SchemaManagerImpl and SchemaRecordSerializerImpl): a key or
value of type AVRO, JSONSCHEMA or PROTOBUF, or with no ``type`` (look the schema up), and ``schema_id``,
``schema_version``, ``schema`` and ``subject`` or ``subject_name_strategy`` (TOPIC_NAME, the default;
RECORD_NAME; TOPIC_RECORD_NAME), is encoded and Confluent-framed by the cluster's own Schema Registry (the
registry service's ``encode_v3``, which derives the subject as SchemaManagerImpl does); its report adds
``subject``, ``schema_id`` and ``schema_version``. A record that does not fit its schema, or a schema that does
not parse, is 400 for that record (SchemaRecordSerializerImpl's BadRequestException), an unknown schema id or
subject the registry's 40403/40401; ``subject`` with a strategy, or a record-name strategy with
``schema_version`` or no schema at all, is 400, and a schema with no record name under a record-name strategy
50002 (RecordNameStrategy's SerializationException, which kafka-rest's stream maps as a Kafka error).

Records are produced in groups: whatever complete request objects the body holds when the previous group is
done (at most ``--max-records-per-request``), one batch per partition through the produce service, so a group's
records of one partition get consecutive offsets in request order, and a group is answered before the next one
is produced. When the front middleware's limits have read the body already (they read every body before the
handler, within ``--request-body-timeout-ms``), the whole body is the first group's source; a body read here
(incrementally, each chunk within the same timeout) is produced as it arrives.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import datetime
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from broker.api.context import BROKER
from broker.api.embedded import KAFKA_ERROR, KAFKA_RETRIABLE_ERROR
from broker.api.links_v3 import check_cluster
from broker.api.params import limits, topic_param
from broker.produce.routing import deadline_after
from broker.produce.service import Row
from broker.quotas import BODY_BYTES
from odradek.protocol import media
from odradek.protocol.errors import (
    EmbeddedSchemaInvalidError,
    InvalidPayloadError,
    InvalidRequestError,
    JsonConversionError,
    MalformedJsonError,
    OdradekError,
    RequestReadTimeoutError,
    RequestTooLargeError,
    UnknownPartitionError,
    UnknownTopicError,
)

log = logging.getLogger(__name__)

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
TIMEOUT_MS = 30_000  # each group's produce (acks=all), as the v2 produce's default timeout_ms
FIELDS = frozenset(("partition_id", "headers", "key", "value", "timestamp"))
DATA_FIELDS = frozenset(("type", "data", "subject", "subject_name_strategy", "schema_id", "schema_version",
                         "schema"))
SCHEMA_TYPES = ("AVRO", "JSONSCHEMA", "PROTOBUF")
TYPES = ("BINARY", "JSON", "STRING")
MAX_HEADERS = 1000
_WS = re.compile(r"[ \t\n\r]*")
# Per-record error codes where v3 answers differently from the error's own: Jackson's mapping errors are 400
# (StreamingResponse's JsonMappingExceptionMapper), an unknown topic or partition 40403 (as every v3 route).
# A schema-typed record that does not encode is 400, as SchemaRecordSerializerImpl's BadRequestException.
_CODES: dict[type[OdradekError], int] = {InvalidRequestError: 400, MalformedJsonError: 400,
                                         UnknownTopicError: 40403, UnknownPartitionError: 40403,
                                         JsonConversionError: 400, EmbeddedSchemaInvalidError: 400}
REGISTRY_TYPES = ("AVRO", "JSONSCHEMA", "PROTOBUF")  # the schema types the cluster's registry encodes


# ------------------------------------------------------------------------------------------- pure helpers


@dataclass(frozen=True, slots=True)
class ParsedRecord:
    row: Row  # key, value, timestamp (ms), headers
    partition: int | None
    key: dict[str, Any] | None  # the report's "key": {"type", "size"}, when the request gave a key
    value: dict[str, Any] | None


def iso_ms(ms: int) -> str:
    """A timestamp as Java's Instant prints it: ISO-8601 UTC, with milliseconds only when there are some."""
    t = datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC)
    frac = ms % 1000
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac:03d}" if frac else "") + "Z"


def parse_timestamp(raw: Any) -> int:
    """An ISO-8601 date-time (``2021-02-05T19:14:42Z``, an offset, or fractions) as ms since the epoch."""
    if not isinstance(raw, str) or len(raw) > 64:
        raise InvalidRequestError('"timestamp" must be an ISO-8601 date-time string such as "2021-02-05T19:14:42Z"')
    try:
        t = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequestError(f'"timestamp" {raw!r} is not an ISO-8601 date-time') from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    ms = (t - EPOCH) // datetime.timedelta(milliseconds=1)
    if ms < 0:
        raise InvalidRequestError(f'"timestamp" {raw!r} is before 1970')
    return ms


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate from a "\\ud800" escape: no UTF-8 for it
        raise InvalidRequestError(f'"{what}" holds a lone UTF-16 surrogate, which is not text') from None


def needs_registry(raw: Any) -> bool:
    """Whether a key or value names a schema the cluster's registry encodes (AVRO, JSONSCHEMA, PROTOBUF, or no
    ``type`` with or without schema fields): resolved by the registry service before ``parse_record``. The
    schema fields on a BINARY/JSON/STRING value are left to ``_data``, which refuses them."""
    if not isinstance(raw, dict) or set(raw) - DATA_FIELDS:
        return False
    kind = raw.get("type")
    return kind is None or (isinstance(kind, str) and kind.upper() in REGISTRY_TYPES)


def _data(raw: Any, what: str) -> tuple[bytes | None, dict[str, Any] | None]:
    """A key or value: its bytes and its report (``{"type", "size"}``); (None, None) when not given."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise InvalidRequestError(f'"{what}" must be an object {{"type", "data"}}')
    unknown = sorted(set(raw) - DATA_FIELDS)
    if unknown:
        raise InvalidRequestError(f'"{what}" has unknown fields: {", ".join(u[:40] for u in unknown[:5])}')
    kind = raw.get("type")
    if kind is not None and not isinstance(kind, str):
        raise InvalidRequestError(f'"{what}.type" must be one of {", ".join(TYPES + SCHEMA_TYPES)}')
    kind = kind.upper() if kind else None
    if kind is None or kind in SCHEMA_TYPES or any(raw.get(f) is not None for f in DATA_FIELDS - {"type", "data"}):
        raise InvalidPayloadError(f'"{what}" names a schema (type {kind or "unset"}) this broker cannot encode: the '
                                  "registry serves AVRO, JSONSCHEMA and PROTOBUF; BINARY, JSON and STRING take no "
                                  "schema")
    if kind not in TYPES:
        raise InvalidRequestError(f'"{what}.type" must be one of {", ".join(TYPES + SCHEMA_TYPES)}, not {kind[:40]!r}')
    data = raw.get("data")
    encoded: bytes | None
    if data is None:
        encoded = None
    elif kind == "BINARY":
        if not isinstance(data, str) or not data.isascii():
            raise InvalidRequestError(f'"{what}.data" must be a base64 string for type BINARY')
        try:
            encoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError(f'"{what}.data" is not valid base64') from None
    elif kind == "STRING":
        if not isinstance(data, str):
            raise InvalidRequestError(f'"{what}.data" must be a string for type STRING')
        encoded = _utf8(data, f"{what}.data")
    else:  # JSON: the value's JSON text, compact
        encoded = _utf8(json.dumps(data, separators=(",", ":"), ensure_ascii=False), f"{what}.data")
    return encoded, {"type": kind, "size": -1 if encoded is None else len(encoded)}


def parse_record(obj: Any, now_ms: int,
                 encoded: dict[str, tuple[bytes | None, dict[str, Any]]] | None = None) -> ParsedRecord:
    """One request object as a record (InvalidRequestError, InvalidPayloadError naming what is wrong);
    ``encoded`` holds the key and value the registry already encoded (``needs_registry``)."""
    if not isinstance(obj, dict):
        raise InvalidRequestError("each request object must be a JSON object (a record)")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise InvalidRequestError(f"unknown fields: {', '.join(u[:40] for u in unknown[:5])}; a record has "
                                  f"{', '.join(sorted(FIELDS))}")
    partition = obj.get("partition_id")
    if partition is not None and (type(partition) is not int or not 0 <= partition <= 2**31 - 1):
        raise InvalidRequestError('"partition_id" must be a non-negative 32-bit integer')
    headers_raw = obj.get("headers") or []
    if not isinstance(headers_raw, list) or len(headers_raw) > MAX_HEADERS:
        raise InvalidRequestError(f'"headers" must be a list of at most {MAX_HEADERS} {{"name", "value"}}')
    headers: list[tuple[str, bytes | None]] = []
    for h in headers_raw:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str) or set(h) - {"name", "value"}:
            raise InvalidRequestError('each header must be {"name": string, "value": base64 or null}')
        value = h.get("value")
        if value is not None:
            if not isinstance(value, str) or not value.isascii():
                raise InvalidRequestError(f'the value of header {h["name"][:40]!r} must be base64 or null')
            try:
                value = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidRequestError(f'the value of header {h["name"][:40]!r} is not valid base64') from None
        _utf8(h["name"], "headers.name")
        headers.append((h["name"], value))
    ts = now_ms if obj.get("timestamp") is None else parse_timestamp(obj["timestamp"])
    done = encoded or {}
    key, key_report = done["key"] if "key" in done else _data(obj.get("key"), "key")
    value, value_report = done["value"] if "value" in done else _data(obj.get("value"), "value")
    return ParsedRecord((key, value, ts, headers), partition, key_report, value_report)


def error_report(error: OdradekError) -> dict[str, Any]:
    """A record's failure as Confluent's ErrorResponse (``error_code``, ``message``) plus Odradek's name."""
    code = _CODES.get(type(error))
    if code is None:
        produce_failure = error.http_status >= 500 or error.retriable
        code = (KAFKA_RETRIABLE_ERROR if error.retriable else KAFKA_ERROR) if produce_failure else error.error_code
    return {"error_code": code, "message": error.message, "error": error.name}


def delivery_report(cluster_id: str, topic: str, partition: int, offset: int, record: ParsedRecord) -> dict[str, Any]:
    report: dict[str, Any] = {"error_code": 200, "cluster_id": cluster_id, "topic_name": topic,
                              "partition_id": partition, "offset": offset, "timestamp": iso_ms(record.row[2] or 0)}
    if record.key is not None:
        report["key"] = record.key
    if record.value is not None:
        report["value"] = record.value
    return report


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ObjectStream:
    """Concatenated JSON values from bytes fed in pieces: ``feed`` returns the complete values so far (each a
    value, or a MalformedJsonError that ends the stream). A value may not exceed ``max_bytes`` (413)."""

    def __init__(self, max_bytes: int) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._json = json.JSONDecoder(parse_constant=_no_constant)
        self._text = ""
        self._max = max_bytes
        self.failed = False

    def feed(self, chunk: bytes, final: bool = False) -> list[Any]:
        if self.failed:
            return []
        try:
            self._text += self._decoder.decode(chunk, final)
        except UnicodeDecodeError as e:
            self.failed = True
            return [MalformedJsonError(f"the body is not UTF-8: {e}")]
        out: list[Any] = []
        pos = 0
        text = self._text
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= len(text):
                break
            try:
                value, pos = self._json.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                if final:
                    self.failed = True
                    out.append(MalformedJsonError(f"the body is not concatenated JSON objects: {e}"))
                    pos = len(text)
                elif len(text) - pos > self._max:
                    self.failed = True
                    out.append(RequestTooLargeError(f"a request object is larger than {self._max} bytes"))
                    pos = len(text)
                break  # else: wait for the rest of this value
            except (RecursionError, ValueError) as e:  # too deep, NaN/Infinity, an integer of 4300+ digits
                self.failed = True
                out.append(MalformedJsonError(f"a request object is not valid JSON: {str(e)[:200]}"))
                pos = len(text)
                break
            out.append(value)
        self._text = text[pos:]
        return out


# ------------------------------------------------------------------------------------------------- handler


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The body: as the front middleware's limits read it, or (when it did not) chunk by chunk as it arrives."""
    if request.content.at_eof():
        body = await request.read()  # already read: the cached bytes, at once
        if body:
            yield body
        return
    timeout_s = limits(request).request_body_timeout_ms / 1000
    while True:
        try:
            chunk = await asyncio.wait_for(request.content.readany(), timeout_s)
        except TimeoutError:
            raise RequestReadTimeoutError(f"no request object arrived within {timeout_s * 1000:.0f} ms "
                                          "(--request-body-timeout-ms)") from None
        if not chunk:
            return
        request[BODY_BYTES] = request.get(BODY_BYTES, 0) + len(chunk)  # the produce quota's measure
        yield chunk


async def _produce_group(request: web.Request, cluster_id: str, topic: str, objects: list[Any]) -> list[bytes]:
    """Each object of the group produced (or refused), and its report, in order: the records are produced
    together, one batch per partition, so one partition's records get consecutive offsets in request order."""
    service = request.app[BROKER].produce
    now_ms = int(time.time() * 1000)
    reports: list[dict[str, Any]] = [{} for _ in objects]
    todo: list[tuple[int, ParsedRecord, int]] = []
    for i, obj in enumerate(objects):
        try:
            if isinstance(obj, OdradekError):  # what the parser made of a broken stream
                raise obj
            encoded = {}
            if isinstance(obj, dict) and not set(obj) - FIELDS:
                for part in ("key", "value"):
                    if needs_registry(obj.get(part)):
                        encoded[part] = await request.app[BROKER].schema_registry.encode_v3(topic, part, obj[part])
            record = parse_record(obj, now_ms, encoded)
            service.check_timestamps(topic, [record.row])
            partition = service.choose_partitions(topic, [record.row], [record.partition], None)[0]
        except OdradekError as e:
            reports[i] = error_report(e)
            continue
        todo.append((i, record, partition))
    if todo:
        results = await service.produce(topic, [r.row for _, r, _ in todo], [p for _, _, p in todo], -1,
                                        TIMEOUT_MS, deadline_after(TIMEOUT_MS))
        seen: dict[int, int] = {}
        for i, record, p in todo:
            result = results[p]
            index = seen.get(p, 0)
            seen[p] = index + 1
            if result.error is not None:
                reports[i] = error_report(result.error)
            else:
                base = -1 if result.base_offset is None else result.base_offset
                reports[i] = delivery_report(cluster_id, topic, p, base + index, record)
    return [orjson.dumps(r) + b"\n" for r in reports]


async def produce_records(request: web.Request) -> web.StreamResponse:
    cluster_id = check_cluster(request)
    topic = topic_param(request)
    broker = request.app[BROKER]
    await broker.produce.await_topic(topic, deadline_after(TIMEOUT_MS))  # unknown: 404/40403 before any report
    config = limits(request)
    stream = ObjectStream(config.max_request_bytes)
    response = web.StreamResponse(status=200)
    response.content_type = media.PLAIN_JSON
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        pending: list[Any] = []
        async for chunk in _chunks(request):
            pending += stream.feed(chunk)
            while pending:
                group, pending = pending[:config.max_records_per_request], pending[config.max_records_per_request:]
                for line in await _produce_group(request, cluster_id, topic, group):
                    await response.write(line)
            if stream.failed:  # the body stopped being JSON: nothing after it is read
                break
        pending += stream.feed(b"", final=True)
        while pending:
            group, pending = pending[:config.max_records_per_request], pending[config.max_records_per_request:]
            for line in await _produce_group(request, cluster_id, topic, group):
                await response.write(line)
    except OdradekError as e:  # the stream broke (a body timeout): one last report, as Confluent's hasNext failure
        await response.write(orjson.dumps(error_report(e)) + b"\n")
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as e:
        log.error("v3 produce to %s failed: %s: %s", topic, type(e).__name__, str(e)[:300])
        await response.write(orjson.dumps({"error_code": 500, "message": "internal error; see the broker's log",
                                           "error": "UNKNOWN_SERVER_ERROR"}) + b"\n")
    await response.write_eof()
    return response


def routes() -> list[web.RouteDef]:
    return [web.post("/v3/clusters/{cluster_id}/topics/{topic}/records", produce_records)]
