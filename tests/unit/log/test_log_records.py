"""The v2 batch codec on its own: layout, round trips, validation errors, in-place header edits."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import records as r
from odradek.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
timestamps = st.integers(min_value=0, max_value=2**45)
record_lists = st.lists(st.tuples(keys, values, timestamps, headers), min_size=1, max_size=30)
codecs = st.sampled_from([r.NONE, r.GZIP, r.LZ4, r.ZSTD])


def test_header_layout_matches_kafka_offsets() -> None:
    data = r.encode_batch(
        [(b"key", b"value", 1234, [("h", b"v")])],
        base_offset=42,
        partition_leader_epoch=7,
        producer_id=99,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
    )
    assert r.HEADER_SIZE == 61
    base_offset, length, epoch, magic = struct.unpack_from(">qiib", data, 0)
    assert (base_offset, length + 12, epoch, magic) == (42, len(data), 7, 2)
    (crc,) = struct.unpack_from(">I", data, 17)
    assert crc == crc32c.crc32c(data[21:])  # the CRC covers attributes .. end, not the epoch
    attributes, last_delta, first_ts, max_ts, pid, pepoch, seq, count = struct.unpack_from(">hiqqqhii", data, 21)
    assert attributes == r.TRANSACTIONAL_MASK
    assert (last_delta, first_ts, max_ts, pid, pepoch, seq, count) == (0, 1234, 1234, 99, 3, 11, 1)
    # Record: length, attributes, tsDelta, offsetDelta, key, value, headers (zig-zag varints).
    body = data[61:]
    assert body == bytes([(len(body) - 1) * 2]) + b"\x00\x00\x00" + b"\x06key" + b"\x0avalue" + b"\x02" + b"\x02h\x02v"


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**62, -(2**63)])
def test_varint_round_trip(value: int) -> None:
    encoded = r.encode_varint(value)
    assert r.decode_varint(encoded + b"\xff", 0) == (value, len(encoded))


@settings(max_examples=60, deadline=None)
@given(record_lists, codecs, st.integers(min_value=0, max_value=2**40))
def test_round_trip(records: list, codec: int, base: int) -> None:
    data = r.encode_batch(records, base_offset=base, compression=codec)
    [h] = r.validate_batches(data)
    assert h.compression == codec and h.record_count == len(records) and h.base_offset == base
    assert h.max_timestamp == max(ts for _k, _v, ts, _h in records)
    decoded = r.decode_batch(data)
    assert [(d.offset, d.timestamp, d.key, d.value, list(d.headers)) for d in decoded] == [
        (base + i, ts, k, v, [(hk, hv) for hk, hv in hs]) for i, (k, v, ts, hs) in enumerate(records)
    ]


def test_decode_records_spans_batches_and_skips_control() -> None:
    one = r.encode_batch([(b"a", b"1", 10, ())], base_offset=0)
    control = r.encode_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 11, ())],
        base_offset=1,
        is_control=True,
        is_transactional=True,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
    )
    two = r.encode_batch([(b"b", None, 12, ()), (None, b"3", 13, ())], base_offset=2, compression=r.ZSTD)
    recs = r.decode_records(one + control + two)
    assert [(x.offset, x.key, x.value) for x in recs] == [(0, b"a", b"1"), (2, b"b", None), (3, None, b"3")]
    assert len(r.decode_records(one + control + two, include_control=True)) == 4
    with pytest.raises(CorruptRecordError):
        r.decode_records(one + two[:-1])


def test_set_base_offset_keeps_crc_valid() -> None:
    buf = bytearray(r.encode_batch([(b"k", b"v", 5, ())] * 4))
    r.set_base_offset(buf, 0, 1000, 9)
    [h] = r.validate_batches(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1000, 9, 1003)
    assert [x.offset for x in r.decode_batch(buf)] == [1000, 1001, 1002, 1003]


def test_log_append_time_rewrites_timestamps_and_crc() -> None:
    buf = bytearray(r.encode_batch([(b"k", b"v", 5, ()), (b"k", b"w", 6, ())]))
    r.set_log_append_time(buf, 0, 777)
    [h] = r.validate_batches(buf)
    assert h.timestamp_type == r.LOG_APPEND_TIME and h.max_timestamp == 777
    assert [x.timestamp for x in r.decode_batch(buf)] == [777, 777]


def test_rebuild_batch_keeps_offsets_and_span() -> None:
    data = r.encode_batch(
        [(b"a", b"1", 10, ()), (b"b", b"2", 20, ()), (b"c", b"3", 15, ())],
        base_offset=100,
        compression=r.LZ4,
        partition_leader_epoch=4,
    )
    h = r.parse_header(data)
    records = r.decode_batch(data)
    rebuilt = r.rebuild_batch(h, [records[0], records[2]])
    [h2] = r.validate_batches(rebuilt)
    assert (h2.base_offset, h2.last_offset, h2.record_count, h2.compression) == (100, 102, 2, r.LZ4)
    assert h2.partition_leader_epoch == 4 and h2.max_timestamp == 15
    assert [(x.offset, x.key, x.timestamp) for x in r.decode_batch(rebuilt)] == [(100, b"a", 10), (102, b"c", 15)]
    empty = r.rebuild_batch(h, [])
    [h3] = r.validate_batches(empty)
    assert (h3.record_count, h3.last_offset, len(empty)) == (0, 102, 61)
    assert r.decode_batch(empty) == []


def test_validate_batches_errors() -> None:
    good = r.encode_batch([(b"k", b"v" * 50, 1, ())] * 3)
    with pytest.raises(InvalidRecordError):
        r.validate_batches(b"")
    with pytest.raises(CorruptRecordError, match="trailing"):
        r.validate_batches(good + good[:30])
    with pytest.raises(CorruptRecordError, match="claims"):
        r.validate_batches(good[:-1])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        r.validate_batches(bytes(bad_crc))
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        r.validate_batches(bytes(bad_magic))
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(CorruptRecordError, match="length"):
        r.validate_batches(bytes(short))
    absurd = bytearray(good)
    struct.pack_into(">i", absurd, 8, 2**31 - 1)
    with pytest.raises(RecordTooLargeError):
        r.validate_batches(bytes(absurd), 1 << 20)
    with pytest.raises(RecordTooLargeError):
        r.validate_batches(good, 100)
    too_many = bytearray(good)
    struct.pack_into(">i", too_many, 57, 4)  # 4 records but last offset delta 2
    struct.pack_into(">I", too_many, 17, crc32c.crc32c(bytes(too_many[21:])))
    with pytest.raises(InvalidRecordError):
        r.validate_batches(bytes(too_many))


def test_corrupt_record_body_raises_typed_error() -> None:
    data = bytearray(r.encode_batch([(b"k", b"v" * 10, 1, ())] * 2))
    data[61] = 0x7E  # first record's length varint now claims 63 bytes
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError):
        r.decode_batch(data)


def test_snappy_is_refused_with_a_typed_error() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        r.encode_batch([(b"k", b"v", 1, ())], compression=r.SNAPPY)


def test_encode_needs_a_timestamp_or_now() -> None:
    with pytest.raises(InvalidRecordError):
        r.encode_batch([r.NewRecord(b"k", b"v")])
    [rec] = r.decode_batch(r.encode_batch([r.NewRecord(b"k", b"v")], now_ms=55))
    assert rec.timestamp == 55
