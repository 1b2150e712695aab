"""The REST-proxy embedded formats: how JSON request bodies become record batches and batches become JSON.

``json`` (``application/vnd.kafka.json.v2+json`` and plain ``application/json`` on produce): keys and values are
JSON values, stored as their compact JSON encoding. ``binary`` (``application/vnd.kafka.binary.v2+json``): they are
base64 strings of raw bytes. Header values are base64 (or null) in both, as REST Proxy v3 carries them.
"""

from __future__ import annotations

import binascii
from base64 import b64decode, b64encode
from typing import Any

import orjson

from odradek.protocol import media
from odradek.protocol.errors import InvalidRequestError, NotAcceptableError, UnsupportedMediaTypeError
from odradek.protocol.records import Record

JSON = "json"
BINARY = "binary"


def produce_format(content_type: str) -> str:
    if content_type in (media.JSON_V2, media.PLAIN_JSON):
        return JSON
    if content_type == media.BINARY_V2:
        return BINARY
    raise UnsupportedMediaTypeError(
        f"Content-Type {content_type or '(none)'} is not supported here; use {media.JSON_V2}, {media.BINARY_V2} "
        f"or {media.PLAIN_JSON}"
    )


def read_format(accept: str) -> tuple[str, str]:
    """(format, response media type) from an Accept header; base64 unless the JSON format is asked for."""
    kinds = [part.split(";")[0].strip() for part in accept.split(",")] if accept else ["*/*"]
    for kind in kinds:
        if kind == media.JSON_V2:
            return JSON, media.JSON_V2
        if kind == media.BINARY_V2:
            return BINARY, media.BINARY_V2
        if kind in (media.PLAIN_JSON, media.KAFKA_V2, "*/*", "application/*"):
            return BINARY, media.PLAIN_JSON
    raise NotAcceptableError(f"cannot answer with {accept}; accept {media.JSON_V2} or {media.BINARY_V2}")


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a base64 string or null")
    try:
        return b64decode(value, validate=True)
    except binascii.Error:
        raise InvalidRequestError(f"{what} is not valid base64") from None


def encode_field(value: Any, fmt: str, what: str) -> bytes | None:
    if value is None:
        return None
    if fmt == JSON:
        return orjson.dumps(value)
    return _b64(value, what)


Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]  # key, value, timestamp, headers

_KNOWN_FIELDS = frozenset({"key", "value", "partition", "timestamp", "headers"})


def parse_produce_body(body: bytes, fmt: str) -> tuple[list[Row], list[int | None] | None]:
    """The records as ``(key, value, timestamp, headers)`` rows in request order, and the partitions they name
    (None when none names one); bad input raises 400s.

    This runs per record on the JSON produce path, so the common case (a record with just a key and a value)
    takes a short branch, and error messages are only built when there is an error.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidRequestError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise InvalidRequestError('the request body must be an object with a "records" array')
    records = doc["records"]
    if not records:
        raise InvalidRequestError('"records" is empty')
    dumps = orjson.dumps
    as_json = fmt == JSON
    out: list[Row] = []
    append = out.append
    partitions: list[int | None] | None = None
    for i, rec in enumerate(records):
        if type(rec) is not dict:
            raise InvalidRequestError(f"records[{i}] must be an object")
        key = rec.get("key")
        value = rec.get("value")
        if len(rec) <= 2 and ("value" in rec or "key" in rec) and (len(rec) == 1 or ("value" in rec and "key" in rec)):
            if as_json:
                append((None if key is None else dumps(key), None if value is None else dumps(value), None, []))
            else:
                append((None if key is None else _b64(key, f"records[{i}].key"),
                        None if value is None else _b64(value, f"records[{i}].value"), None, []))
            if partitions is not None:
                partitions.append(None)
            continue
        row, partition = _parse_full(rec, i, fmt)
        append(row)
        if partition is not None:
            if partitions is None:
                partitions = [None] * i
            partitions.append(partition)
        elif partitions is not None:
            partitions.append(None)
    return out, partitions


def _parse_full(rec: dict[str, Any], i: int, fmt: str) -> tuple[Row, int | None]:
    if "value" not in rec and "key" not in rec:
        raise InvalidRequestError(f"records[{i}] has neither a key nor a value")
    unknown = set(rec) - _KNOWN_FIELDS
    if unknown:
        raise InvalidRequestError(f"records[{i}] has unknown fields {sorted(unknown)}")
    partition = rec.get("partition")
    if partition is not None and (type(partition) is not int or partition < 0):
        raise InvalidRequestError(f"records[{i}].partition must be a non-negative integer")
    timestamp = rec.get("timestamp")
    if timestamp is not None and (type(timestamp) is not int or timestamp < 0):
        raise InvalidRequestError(f"records[{i}].timestamp must be milliseconds since the epoch")
    headers: list[tuple[str, bytes | None]] = []
    raw_headers = rec.get("headers") or []
    if not isinstance(raw_headers, list):
        raise InvalidRequestError(f"records[{i}].headers must be an array of {{name, value}}")
    for j, h in enumerate(raw_headers):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise InvalidRequestError(f"records[{i}].headers[{j}] must be {{\"name\": str, \"value\": base64}}")
        v = h.get("value")
        headers.append((h["name"], None if v is None else _b64(v, f"records[{i}].headers[{j}].value")))
    row = (
        encode_field(rec.get("key"), fmt, f"records[{i}].key"),
        encode_field(rec.get("value"), fmt, f"records[{i}].value"),
        timestamp, headers,
    )
    return row, partition


def record_json(topic: str, partition: int, r: Record, fmt: str) -> dict[str, Any]:
    if fmt == JSON:
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
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")  # not JSON: the JSON format shows it as text rather than failing
