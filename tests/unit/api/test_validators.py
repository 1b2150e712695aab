"""The shared validators of issue 10: numbers, JSON depth, raw JSON texts, client batches, the error log."""

from __future__ import annotations

import gzip
import logging
from typing import Any

import orjson
import pytest

from broker.api import raw_json
from broker.api.embedded import parse_produce_body, record_json
from broker.api.errors import RateLimitedErrorLog
from broker.api.params import MAX_JSON_DEPTH, json_depth, load_json_object, parse_ascii_int
from odradek.protocol.errors import (
    ConstraintViolationError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MalformedJsonError,
    PolicyViolationError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from odradek.protocol.records import GZIP, LZ4, ZSTD, Record, compress, encode_batch
from odradek.protocol.records.validate import decompress_capped, validate_client_batches

from .hostile_batches import craft_batch, gzip_bomb, records_block


@pytest.mark.parametrize("raw", ["²", "\u0661", "1" * 400, "9223372036854775808", "-", "", " 1", "1 ", "0x10", "1e3",
                                 "+1", "1_000"])
def test_numbers_that_are_not_ascii_integers_in_range_are_refused(raw: str) -> None:
    assert parse_ascii_int(raw) is None


def test_ascii_integers_in_range() -> None:
    assert parse_ascii_int("0") == 0 and parse_ascii_int("-1") == -1
    assert parse_ascii_int("9223372036854775807") == 2**63 - 1
    assert parse_ascii_int("5", 0, 4) is None


def test_json_depth_is_limited_and_strings_do_not_count() -> None:
    assert json_depth(b'{"a": "[[[[[[[[[["}') <= 11
    deep = b"[" * 300 + b"]" * 300
    assert json_depth(deep) == 300
    with pytest.raises(MalformedJsonError):
        load_json_object(b'{"a": ' + deep + b"}")
    assert load_json_object(b'{"a": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}")
    with pytest.raises(MalformedJsonError):
        load_json_object(b"{")


def test_raw_json_keeps_big_numbers_and_duplicate_keys() -> None:
    body = (b'{"records": [{"key": {"a" : 1, "a": 2}, "value": 123456789012345678901234567890},'
            b' {"value": [1, "x  y"], "partition": 0}, {"key": null, "value": "s"}]}')
    rows, partitions = parse_produce_body(body, "json")
    assert rows[0][:2] == (b'{"a":1,"a":2}', b"123456789012345678901234567890")
    assert rows[1][1] == b'[1,"x  y"]'  # whitespace inside strings is data
    assert rows[2][:2] == (None, b'"s"')
    assert partitions == [None, 0, None]
    shown = orjson.dumps(record_json("t", 0, Record(0, 0, rows[0][0], rows[0][1]), "json"))
    assert b'"key":{"a":1,"a":2}' in shown and b'"value":123456789012345678901234567890' in shown


def test_raw_json_follows_the_last_duplicate_like_orjson() -> None:
    body = b'{"records": [{"value": 1}], "records": [{"value": 2, "value": 3}]}'
    rows, _ = parse_produce_body(body, "json")
    assert [r[1] for r in rows] == [b"3"]


def test_json_records_nested_too_deep_are_refused() -> None:
    deep = b"[" * 300 + b"]" * 300
    with pytest.raises(ConstraintViolationError):
        parse_produce_body(b'{"records": [{"value": ' + deep + b"}]}", "json")
    very = b"[" * 1000 + b"]" * 1000
    with pytest.raises((ConstraintViolationError, MalformedJsonError)):
        parse_produce_body(b'{"records": [{"value": ' + very + b"}]}", "json")


def test_records_per_request_are_limited_before_parsing() -> None:
    body = orjson.dumps({"records": [{"value": 1}] * 101})
    with pytest.raises(PolicyViolationError):
        parse_produce_body(body, "json", max_records=100)
    tiny = b'{"records": [' + b",".join([b"1"] * 100_000) + b"]}"
    with pytest.raises(PolicyViolationError):
        parse_produce_body(tiny, "binary", max_records=100)


def test_non_ascii_base64_is_a_422() -> None:
    with pytest.raises(ConstraintViolationError):
        parse_produce_body('{"records": [{"value": "aGk=é"}]}'.encode(), "binary")


def test_compact_only_removes_insignificant_whitespace() -> None:
    assert raw_json.compact('{ "a" : [ 1 , 2 ] , "b":"x y\\" z" }') == '{"a":[1,2],"b":"x y\\" z"}'


def _check(buf: bytes, **kw: Any) -> None:
    args: dict[str, Any] = {"max_batch_bytes": 1 << 20, "max_records": 1000, "max_decompressed_bytes": 1 << 20}
    args.update(kw)
    validate_client_batches(buf, **args)


def test_valid_client_batches_pass_in_every_codec() -> None:
    for codec in (0, GZIP, LZ4, ZSTD):
        _check(encode_batch([(b"k", b"v" * 100, 1, ())] * 50, compression=codec))


@pytest.mark.parametrize("batch, error", [
    (craft_batch(b"\xff" * 40), CorruptRecordError),                                 # garbage records
    (craft_batch(records_block(), attributes=5), InvalidRecordError),                # codec 5
    (craft_batch(b"\x1f\x8b not gzip at all", attributes=GZIP), CorruptRecordError),  # fake gzip data
    (craft_batch(records_block(), attributes=2), UnsupportedCompressionTypeError),   # snappy
    (craft_batch(records_block(), count=2**31 - 1), InvalidRecordError),              # offsets jump by 2^31
    (craft_batch(records_block(2), count=2, last_delta=5), InvalidRecordError),      # count vs last delta
    (craft_batch(records_block(), attributes=0x20), InvalidRecordError),             # a control batch
    (craft_batch(records_block(), attributes=0x10), UnsupportedForMessageFormatError),  # transactional
    (craft_batch(records_block(3), count=2), CorruptRecordError),                     # trailing records
], ids=["garbage-records", "codec-5", "fake-gzip", "snappy", "offset-jump", "count-vs-last-delta", "control",
        "transactional", "trailing-records"])  # ids without the batches' timestamps: the same in every process
def test_poison_batches_are_refused(batch: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        _check(batch)


def test_offset_deltas_must_be_contiguous() -> None:
    good = bytearray(encode_batch([(None, b"v", 1, ())] * 2))
    block = bytearray(good[61:])
    # the second record's offsetDelta varint: length, attributes, timestampDelta, offsetDelta (zig-zag 1 = 2)
    second = block[0] // 2 + 1  # the first record's length: one zig-zag varint byte (a small record)
    assert block[second + 3] == 2
    block[second + 3] = 4  # delta 2 instead of 1
    with pytest.raises(InvalidRecordError):
        _check(craft_batch(bytes(block), count=2, first_ts=1))


def test_decompression_is_capped_without_inflating_everything() -> None:
    bomb = gzip_bomb(64 << 20)
    assert len(bomb) < 200_000
    with pytest.raises(RecordTooLargeError):
        decompress_capped(GZIP, bomb, 1 << 20)
    for codec in (LZ4, ZSTD):
        with pytest.raises(RecordTooLargeError):
            decompress_capped(codec, compress(codec, bytes(4 << 20)), 1 << 20)
    assert decompress_capped(GZIP, gzip.compress(b"ab") + gzip.compress(b"cd"), 10) == b"abcd"


def test_timestamps_outside_the_allowed_difference_are_refused() -> None:
    batch = encode_batch([(None, b"v", 1_000, ())])
    with pytest.raises(InvalidTimestampError):
        _check(batch, max_timestamp_diff_ms=60_000, now_ms=10_000_000)
    _check(batch, max_timestamp_diff_ms=60_000, now_ms=1_000 + 59_000)


def test_request_errors_are_logged_one_line_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    errors = RateLimitedErrorLog(burst=2, window_s=10, clock=lambda: now[0])

    class _Req:
        method, path = "GET", "/x"

    try:
        raise ValueError("boom\nsecond line")
    except ValueError as e:
        error = e
    with caplog.at_level(logging.ERROR):
        assert [errors.log(_Req(), error) for _ in range(5)] == [True, True, False, False, False]  # type: ignore[arg-type]
        now[0] = 11
        assert errors.log(_Req(), error)  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert "3 similar lines suppressed" in lines[-1]


def test_aiohttp_request_errors_become_one_rate_limited_line() -> None:
    from broker.api.errors import OneLineFilter

    now = [0.0]
    f = OneLineFilter(burst=1, window_s=10, clock=lambda: now[0])
    try:
        raise ValueError("bad\nrequest line")
    except ValueError:
        import sys
        record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s",
                                   ("127.0.0.1",), sys.exc_info())
    assert f.filter(record) and record.exc_info is None
    assert record.getMessage() == "Error handling request from 127.0.0.1: ValueError: bad request line"
    assert not f.filter(logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "again", None, None))
