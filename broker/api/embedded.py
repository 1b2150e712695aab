"""The REST-proxy embedded formats: how JSON request bodies become record batches and batches become JSON.

``json`` (``application/vnd.kafka.json.v2+json``): keys and values are JSON values, stored as their compact
JSON encoding. ``binary`` (``application/vnd.kafka.binary.v2+json``, and every produce media type without an
embedded format: ``application/vnd.kafka.v2+json``, ``application/vnd.kafka+json``, plain ``application/json``,
``application/octet-stream``): they are base64 strings of raw bytes, as Confluent's API reference says ("if the
embedded format is omitted, binary is assumed"). So a base64 value posted as plain JSON is stored as the bytes
it encodes, never as a quoted JSON string, and a value that is not base64 is refused (422) rather than stored.
Header values are base64 (or null) in every format, as REST Proxy v3 carries them.

Statuses follow Confluent: a body that is not JSON is 400 (rest-utils' JsonParseExceptionMapper); JSON that is
not a valid request (no or empty ``records``, an unknown field, a wrong type, bad base64) is 422
(ConstraintViolationExceptionMapper, and ``ConstraintViolations.simpleException`` for base64 in kafka-rest's
``BinaryTopicProduceRequest``). The schema formats ``avro``, ``jsonschema`` and ``protobuf`` are backed by the
cluster's own Schema Registry (broker/schema_registry/, docs/schema-registry.md): keys and values are JSON,
registered or looked up and Confluent-framed by the registry service (Protobuf: the schema's first message, as
kafka-rest writes it), and rendered back as JSON on reads.
"""

from __future__ import annotations

import binascii
from base64 import b64decode, b64encode
from collections.abc import Callable
from typing import Any

import orjson

from broker.api import raw_json
from odradek.protocol import media, speedups
from odradek.protocol.errors import (
    ConstraintViolationError,
    InvalidPayloadError,
    MalformedJsonError,
    NotAcceptableError,
    OdradekError,
    PolicyViolationError,
    UnknownTopicError,
    UnsupportedMediaTypeError,
)
from odradek.protocol.records import Record
from odradek.protocol.speedups import RawTexts

JSON = "json"
BINARY = "binary"
# The embedded formats the registry backs, and the registry's schemaType for each.
SCHEMA_TYPES = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}

# Confluent's per-record produce codes (its Errors.java): a Kafka error, and one the client may retry.
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003


def produce_format(content_type: str) -> str:
    """``json``, ``binary``, or the name of a schema-registry format (refused by ``require_supported``)."""
    if content_type == media.JSON_V2:
        return JSON
    if content_type == media.BINARY_V2 or content_type in media.FORMATLESS or not content_type:
        return BINARY
    if content_type in media.SCHEMA_V2:
        return media.SCHEMA_V2[content_type]
    raise UnsupportedMediaTypeError(
        f"Content-Type {content_type or '(none)'} is not supported here; use {media.JSON_V2} or {media.BINARY_V2} "
        f"(or {media.PLAIN_JSON}, which is binary: base64 keys and values)"
    )


def require_supported(fmt: str, topic: str, topic_exists: bool) -> None:
    """Refuse an embedded format the registry does not back (none today: avro, jsonschema and protobuf all
    are), after the topic check: an unknown topic is 404 whatever the format."""
    if fmt in (JSON, BINARY) or fmt in SCHEMA_TYPES:
        return
    if not topic_exists:
        raise UnknownTopicError(f"topic '{topic}' does not exist")
    raise InvalidPayloadError(
        f"Payload error. The {fmt} embedded format needs a Schema Registry, which Odradek does not support yet; "
        f"produce with {media.JSON_V2} or {media.BINARY_V2}"
    )


def record_error(error: OdradekError) -> dict[str, Any]:
    """A failed record's ``error_code`` and ``error`` as Confluent's v2 produce answers them (50003 when the
    client may retry, else 50002), keeping Odradek's precise name in the message and in ``error_name``."""
    return {"error_code": KAFKA_RETRIABLE_ERROR if error.retriable else KAFKA_ERROR,
            "error": f"{error.name}: {error.message}", "error_name": error.name}


def read_format(accept: str) -> tuple[str, str]:
    """(format, response media type) from an Accept header; base64 unless the JSON format is asked for."""
    kinds = [part.split(";")[0].strip() for part in accept.split(",")] if accept else ["*/*"]
    for kind in kinds:
        if kind == media.JSON_V2:
            return JSON, media.JSON_V2
        if kind == media.BINARY_V2:
            return BINARY, media.BINARY_V2
        if media.SCHEMA_V2.get(kind) in SCHEMA_TYPES:
            return media.SCHEMA_V2[kind], kind
        if kind in (media.PLAIN_JSON, media.KAFKA_V2, "*/*", "application/*"):
            return BINARY, media.PLAIN_JSON
    raise NotAcceptableError(f"cannot answer with {accept}; accept {media.JSON_V2} or {media.BINARY_V2}")


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ConstraintViolationError(f"{what} must be a base64 string or null")
    if not value.isascii():  # b64decode raises ValueError, not binascii.Error, on other characters
        raise ConstraintViolationError(f"{what} contains invalid base64 encoding (a non-ASCII character)")
    try:
        return b64decode(value, validate=True)
    except binascii.Error:
        raise ConstraintViolationError(f"{what} contains invalid base64 encoding") from None


def encode_field(value: Any, fmt: str, what: str) -> bytes | None:
    if value is None:
        return None
    if fmt == JSON:
        return orjson.dumps(value)
    return _b64(value, what)


Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]  # key, value, timestamp, headers

_KNOWN_FIELDS = frozenset({"key", "value", "partition", "timestamp", "headers"})
# Top-level fields of Confluent's v2 produce requests (the schema ones are ignored by json and binary).
_KNOWN_TOP = frozenset({"records", "key_schema", "key_schema_id", "value_schema", "value_schema_id"})


# A JSON body may hold at most this many JSON values (counted by their separators) per record allowed: a bound
# on what parsing it costs, checked before parsing (unbounded, 11 MiB of 10^6 tiny records takes about 4 GB).
VALUES_PER_RECORD = 64


def parse_produce_body(body: bytes, fmt: str, max_records: int = 10_000,
                       ) -> tuple[list[Row], list[int | None] | None]:
    """The records as ``(key, value, timestamp, headers)`` rows in request order, and the partitions they name
    (None when none names one); a body that is not JSON raises 400, an invalid request 422, more than
    ``max_records`` records (the broker's max.records.per.request) 400 POLICY_VIOLATION.

    This runs per record on the JSON produce path, so the common case (a record with just a key and a value)
    takes a short branch, and error messages are only built when there is an error. In the JSON format each
    key and value is stored as the JSON text the client sent (broker/api/raw_json.py), never re-encoded.
    """
    records = checked_records(body, max_records)
    if fmt not in (JSON, BINARY):
        return [], None  # a schema-registry format: refused by require_supported once the topic is checked
    return _rows(body, records, fmt)


def plain_records(body: bytes, fmt: str, max_records: int) -> tuple[list[Any], RawTexts | None] | None:
    """The compiled codec's input (odradek/protocol/speedups.py ``produce_batches``), for a body its one-pass
    ``produce_body`` left alone: the request's records as checked by ``checked_records`` and, in the JSON
    format, each record's raw key and value text as bytes (the same text raw_json.py slices: stored as sent,
    never re-encoded). None when the compiled codec is not in use, or for a body its scanner leaves to
    raw_json.py: the caller then takes ``parse_produce_body``."""
    if not speedups.COMPILED or fmt not in (JSON, BINARY):
        return None
    records = checked_records(body, max_records)
    if fmt == BINARY:
        return records, None
    texts = speedups.record_texts(body)
    return None if texts is None or len(texts) != len(records) else (records, texts)


def value_bound(max_records: int) -> int:
    """The most JSON values (counted as ``checked_records`` counts them) a body of ``max_records`` may hold."""
    return VALUES_PER_RECORD * max_records


def checked_records(body: bytes, max_records: int) -> list[Any]:
    """The body's ``records`` array, after the request-level checks (size bound, JSON, shape, count)."""
    # Each counted value needs a separator byte, so a body no longer than the bound cannot exceed it: the
    # three scans are only paid for bodies that could.
    bound = value_bound(max_records)
    if len(body) > bound and (values := body.count(b",") + body.count(b"{") + body.count(b"[")) > bound:
        raise PolicyViolationError(
            f"the request body holds about {values} JSON values; at most {VALUES_PER_RECORD} per record for "
            f"{max_records} records (max.records.per.request) are accepted")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise MalformedJsonError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ConstraintViolationError('the request body must be an object with a "records" array')
    if "records" not in doc or doc["records"] is None:
        raise ConstraintViolationError("records may not be empty (it is missing)")
    if not isinstance(doc["records"], list):
        raise ConstraintViolationError('"records" must be an array of records')
    unknown_top = set(doc) - _KNOWN_TOP
    if unknown_top:
        raise ConstraintViolationError(f"unknown fields {sorted(unknown_top)}; a request has {sorted(_KNOWN_TOP)}")
    records = doc["records"]
    if not records:
        raise ConstraintViolationError("records may not be empty")
    if len(records) > max_records:
        raise PolicyViolationError(f"{len(records)} records in one request; the limit is {max_records} "
                                   "(max.records.per.request)")
    return records  # type: ignore[no-any-return]


def _rows(body: bytes, records: list[Any], fmt: str) -> tuple[list[Row], list[int | None] | None]:
    as_json = fmt == JSON
    texts = raw_json.record_texts(body.decode("utf-8")) if as_json else []
    if as_json and len(texts) != len(records):
        raise MalformedJsonError("the request body's records could not be delimited")
    out: list[Row] = []
    append = out.append
    partitions: list[int | None] | None = None
    for i, rec in enumerate(records):
        if type(rec) is not dict:
            raise ConstraintViolationError(f"records[{i}] must be an object")
        key = rec.get("key")
        value = rec.get("value")
        if len(rec) <= 2 and ("value" in rec or "key" in rec) and (len(rec) == 1 or ("value" in rec and "key" in rec)):
            if as_json:
                raw_key, raw_value = texts[i]
                append((None if key is None else _raw(raw_key, i, "key"),
                        None if value is None else _raw(raw_value, i, "value"), None, []))
            else:
                append((None if key is None else _b64(key, f"records[{i}].key"),
                        None if value is None else _b64(value, f"records[{i}].value"), None, []))
            if partitions is not None:
                partitions.append(None)
            continue
        row, partition = _parse_full(rec, i, fmt, texts[i] if as_json else (None, None))
        append(row)
        if partition is not None:
            if partitions is None:
                partitions = [None] * i
            partitions.append(partition)
        elif partitions is not None:
            partitions.append(None)
    return out, partitions


def _raw(text: str | None, i: int, what: str) -> bytes:
    """A record's key or value as stored in the JSON format: its raw JSON text, within the nesting limit."""
    assert text is not None
    if text.count("[") + text.count("{") > raw_json.MAX_DEPTH:
        raw_json.check_depth(text, f"records[{i}].{what}")
    return text.encode()


def _parse_full(rec: dict[str, Any], i: int, fmt: str, texts: raw_json.RawPair) -> tuple[Row, int | None]:
    if "value" not in rec and "key" not in rec:
        raise ConstraintViolationError(f"records[{i}] has neither a key nor a value")
    unknown = set(rec) - _KNOWN_FIELDS
    if unknown:
        raise ConstraintViolationError(f"records[{i}] has unknown fields {sorted(unknown)}")
    partition = rec.get("partition")
    if partition is not None and (type(partition) is not int or partition < 0):
        raise ConstraintViolationError(f"records[{i}].partition must be a non-negative integer")
    timestamp = rec.get("timestamp")
    if timestamp is not None and (type(timestamp) is not int or timestamp < 0):
        raise ConstraintViolationError(f"records[{i}].timestamp must be milliseconds since the epoch")
    headers: list[tuple[str, bytes | None]] = []
    raw_headers = rec.get("headers") or []
    if not isinstance(raw_headers, list):
        raise ConstraintViolationError(f"records[{i}].headers must be an array of {{name, value}}")
    for j, h in enumerate(raw_headers):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise ConstraintViolationError(f"records[{i}].headers[{j}] must be {{\"name\": str, \"value\": base64}}")
        v = h.get("value")
        headers.append((h["name"], None if v is None else _b64(v, f"records[{i}].headers[{j}].value")))
    if fmt == JSON:
        key, value = rec.get("key"), rec.get("value")
        row: Row = (None if key is None else _raw(texts[0], i, "key"),
                    None if value is None else _raw(texts[1], i, "value"), timestamp, headers)
    else:
        row = (encode_field(rec.get("key"), fmt, f"records[{i}].key"),
               encode_field(rec.get("value"), fmt, f"records[{i}].value"), timestamp, headers)
    return row, partition


def parse_schema_body(body: bytes, max_records: int) -> tuple[dict[str, Any], list[Any], list[Any],
                                                              list[int | None] | None]:
    """A schema-format produce (kafka-rest's SchemaTopicProduceRequest): the request (its ``*_schema`` and
    ``*_schema_id`` fields), each record's JSON key and value (None when absent or null) and the partitions
    they name (None when none does). The request-level checks are ``checked_records``'; a record has
    ``key``, ``value`` and ``partition`` only, as Confluent's does."""
    records = checked_records(body, max_records)
    doc = orjson.loads(body)
    keys: list[Any] = []
    values: list[Any] = []
    partitions: list[int | None] = []
    for i, rec in enumerate(records):
        if type(rec) is not dict:
            raise ConstraintViolationError(f"records[{i}] must be an object")
        unknown = set(rec) - {"key", "value", "partition"}
        if unknown:
            raise ConstraintViolationError(f"records[{i}] has unknown fields {sorted(unknown)}; a schema-format "
                                           "record has key, value and partition")
        partition = rec.get("partition")
        if partition is not None and (type(partition) is not int or partition < 0):
            raise ConstraintViolationError(f"records[{i}].partition must be a non-negative integer")
        keys.append(rec.get("key"))
        values.append(rec.get("value"))
        partitions.append(partition)
    named = partitions if any(p is not None for p in partitions) else None
    return doc, keys, values, named


def record_json(topic: str, partition: int, r: Record, fmt: str,
                decode: Callable[[bytes | None], Any] | None = None) -> dict[str, Any]:
    """A record as a v2 read renders it; a schema format's keys and values go through ``decode`` (the
    registry's ``decode_framed``), which raises when one is not Confluent-framed."""
    if decode is not None:
        key = decode(r.key)
        value = decode(r.value)
    elif fmt == JSON:
        key = _json_or_str(r.key)
        value = _json_or_str(r.value)
    else:
        key = None if r.key is None else b64encode(r.key).decode()
        value = None if r.value is None else b64encode(r.value).decode()
    return {
        "topic": topic, "partition": partition, "offset": r.offset, "timestamp": r.timestamp,
        "key": key, "value": value,
        "headers": [{"name": n, "value": None if v is None else b64encode(v).decode()} for n, v in r.headers],
    }


def _json_or_str(data: bytes | None) -> Any:
    """A stored key or value in a JSON-format read: its JSON text as stored, embedded as is (``orjson.Fragment``)
    so big numbers and duplicate keys reach the consumer as they were produced; text that is not JSON is shown
    as a string rather than failing the read."""
    if data is None:
        return None
    try:
        orjson.loads(data)  # validation only: the stored text itself is what the consumer gets
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")
    return orjson.Fragment(data)
