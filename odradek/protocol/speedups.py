"""The one place that picks the compiled record codec or the pure Python reference (as aiokafka does).

The compiled twin (``_speedups``, Cython, built by ``pip install`` when a C compiler is there) runs the
per-record loops of the REST path in C: REST v2 produce bodies straight into v2 batches, Kafka's murmur2,
batch encoding and decoding, REST read answers (base64 with AVX2 where the CPU has it, chosen at run time). The
pure Python code stays the reference and the fallback: odradek/protocol/records/ and partitioner.py, plus the
``py_*`` functions below, which compose them into the same shapes. ``ODRADEK_NO_EXTENSIONS=1`` forces the
reference (CI runs the codec tests and the REST tests both ways); tests/unit/protocol/test_speedups.py checks
byte-identical output.

Contract of the compiled functions: where they cannot be sure to match the reference (bad base64, a corrupt
batch, a record shape they do not handle) they return None instead of raising, and the names exported here
then run the reference, which produces the same result or names the error. So errors are the reference's.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import os
from base64 import b64decode, b64encode
from collections.abc import Iterator
from typing import Any

import orjson

from odradek.protocol.partitioner import murmur2 as py_murmur2
from odradek.protocol.partitioner import to_positive
from odradek.protocol.records import Record
from odradek.protocol.records import decode_records as py_decode_records
from odradek.protocol.records import encode_batch as py_encode_batch
from odradek.protocol.records.validate import validate_client_batches as py_validate_client_batches

__all__ = [
    "COMPILED",
    "decode_records",
    "encode_batch",
    "murmur2",
    "produce_batches",
    "produce_body",
    "record_texts",
    "render_offsets",
    "render_records",
    "validate_client_batches",
]

Batches = tuple[dict[int, bytes], list[int]]
RawTexts = list[tuple[bytes | None, bytes | None]]

_c: Any = None
if os.environ.get("ODRADEK_NO_EXTENSIONS") != "1":
    try:
        from odradek.protocol import _speedups as _c
    except ImportError:  # no compiler at install time: the reference serves
        _c = None

COMPILED = _c is not None
"""True when the compiled codec is in use (CI fails a run that expected it and got the reference)."""

_PLAIN = frozenset({"key", "value"})


def py_produce_batches(records: list[Any], texts: RawTexts | None, binary: bool, count: int, fixed: int,
                       counter: Iterator[int], now_ms: int) -> Batches | None:
    """Reference of ``produce_batches``: plain ``{"key", "value"}`` records only (else None), base64 decoded
    strictly (else None), partitioned like broker/produce/service.py, one reference-encoded batch per partition
    in order of first appearance."""
    rows: list[tuple[bytes | None, bytes | None]] = []
    if not records or count <= 0 or (not binary and (texts is None or len(texts) != len(records))):
        return None
    for i, rec in enumerate(records):
        if type(rec) is not dict or not rec or not rec.keys() <= _PLAIN:
            return None
        key, value = rec.get("key"), rec.get("value")
        if binary:
            try:
                key = None if key is None else _strict_b64(key)
                value = None if value is None else _strict_b64(value)
            except (ValueError, TypeError):
                return None
        else:
            raw_key, raw_value = texts[i]  # type: ignore[index]
            key = None if key is None else raw_key
            value = None if value is None else raw_value
            if (key is not None and type(key) is not bytes) or (value is not None and type(value) is not bytes):
                return None
        rows.append((key, value))
    partitions = [fixed if fixed >= 0 else next(counter) % count if key is None else
                  to_positive(py_murmur2(key)) % count for key, _ in rows]
    if any(p < 0 or p >= count for p in partitions):
        return None
    groups: dict[int, list[tuple[bytes | None, bytes | None, None, tuple[()]]]] = {}
    for (key, value), p in zip(rows, partitions, strict=True):
        groups.setdefault(p, []).append((key, value, None, ()))
    return {p: py_encode_batch(group, now_ms=now_ms) for p, group in groups.items()}, partitions


def _strict_b64(value: Any) -> bytes:
    if type(value) is not str or not value.isascii():
        raise ValueError("not a base64 string")
    try:
        return b64decode(value, validate=True)
    except binascii.Error as e:
        raise ValueError(str(e)) from None


def py_render_offsets(partitions: list[int], bases: dict[int, int | None]) -> bytes:
    """Reference of ``render_offsets``: the v2 produce answer when no partition failed."""
    seen: dict[int, int] = {}
    offsets = []
    for p in partitions:
        index = seen.get(p, 0)
        seen[p] = index + 1
        base = bases[p]
        offsets.append({"partition": p, "offset": None if base is None else base + index, "error_code": None,
                        "error": None})
    return orjson.dumps({"key_schema_id": None, "value_schema_id": None, "offsets": offsets})


def read_prefix(topic: str, partition: int) -> bytes:
    """What every record of a REST read answer starts with, up to its offset (``render_records``' prefix)."""
    return b'{"topic":' + orjson.dumps(topic) + b',"partition":' + str(partition).encode() + b',"offset":'


def py_render_records(buf: bytes | bytearray | memoryview, start: int, prefix: bytes, binary: bool,
                      head: bytes = b"", tail: bytes = b"") -> bytes:
    """Reference of ``render_records``: broker/api/embedded.record_json's dicts through orjson, the array
    between ``head`` and ``tail`` (the rest of the answer, so that the result can be the whole body)."""
    out = []
    for r in py_decode_records(buf):
        if r.offset < start:
            continue
        if binary:
            key = None if r.key is None else b64encode(r.key).decode()
            value = None if r.value is None else b64encode(r.value).decode()
        else:
            key, value = _json_or_str(r.key), _json_or_str(r.value)
        rest = orjson.dumps({"timestamp": r.timestamp, "key": key, "value": value, "headers": [
            {"name": n, "value": None if v is None else b64encode(v).decode()} for n, v in r.headers]})
        out.append(prefix + str(r.offset).encode() + b"," + rest[1:])
    return head + b"[" + b",".join(out) + b"]" + tail


def _json_or_str(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")
    return orjson.Fragment(data)


if _c is not None:
    murmur2 = _c.murmur2
    encode_batch = _c.encode_batch
    produce_batches = _c.produce_batches

    def render_offsets(partitions: list[int], bases: dict[int, int | None]) -> bytes:
        out = _c.render_offsets(partitions, bases)
        return py_render_offsets(partitions, bases) if out is None else out  # type: ignore[no-any-return]

    record_texts = _c.record_texts
    produce_body = _c.produce_body
    validate_client_batches = functools.partial(py_validate_client_batches, check_block=_c.check_records)

    def decode_records(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                       include_control: bool = False) -> list[Record]:
        out = _c.decode_records(buf, verify_crc=verify_crc, include_control=include_control)
        if out is None:
            return py_decode_records(buf, verify_crc=verify_crc, include_control=include_control)
        return out  # type: ignore[no-any-return]

    def render_records(buf: bytes | bytearray | memoryview, start: int, prefix: bytes, binary: bool,
                       head: bytes = b"", tail: bytes = b"") -> bytes:
        out = _c.render_records(buf, start, prefix, binary, head, tail)
        return py_render_records(buf, start, prefix, binary, head, tail) if out is None else out
else:
    murmur2 = py_murmur2
    encode_batch = py_encode_batch
    produce_batches = py_produce_batches
    render_offsets = py_render_offsets
    decode_records = py_decode_records
    render_records = py_render_records
    validate_client_batches = py_validate_client_batches

    def record_texts(body: bytes) -> RawTexts | None:
        """No compiled scanner: None sends the caller to broker/api/raw_json.py (the reference)."""
        return None

    def produce_body(body: bytes, binary: bool, count: int, fixed: int, counter: Iterator[int], now_ms: int,
                     max_records: int, max_values: int) -> Batches | None:
        """No compiled body scanner: None sends the caller to the parsed path (``produce_batches`` on
        orjson's tree, or the reference), which gives the same batches."""
        return None


def round_robin(start: int = 0) -> Iterator[int]:
    """The keyless records' counter both implementations take (itertools.count)."""
    return itertools.count(start)
