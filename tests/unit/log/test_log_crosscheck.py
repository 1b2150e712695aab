"""Our codec against one nobody here wrote: kafka-python's ``kafka.record`` (DefaultRecordBatch v2).

Batches we encode must decode with theirs, and batches their builder encodes must decode (and validate,
CRC included) with ours, for every codec both sides support.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():  # kafka-python's protocol schemas use deprecated importlib.resources calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from odradek.protocol import records as r

keys = st.one_of(st.none(), st.binary(max_size=30))
values = st.one_of(st.none(), st.binary(max_size=200))
header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)
record_lists = st.lists(
    st.tuples(keys, values, st.integers(min_value=0, max_value=2**41), header_lists), min_size=1, max_size=25
)
codecs = st.sampled_from([r.NONE, r.GZIP, r.LZ4, r.ZSTD])


def _theirs(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        for rec in batch:
            out.append((rec.offset, rec.timestamp, rec.key, rec.value, [(k, v) for k, v in rec.headers]))
    return out


@settings(max_examples=60, deadline=None)
@given(record_lists, codecs, st.integers(min_value=0, max_value=2**40), st.integers(min_value=-1, max_value=2**20))
def test_ours_decode_with_kafka_python(records: list, codec: int, base: int, epoch: int) -> None:
    data = r.encode_batch(records, base_offset=base, compression=codec, partition_leader_epoch=epoch)
    [batch] = list(MemoryRecords(data))
    assert isinstance(batch, DefaultRecordBatch)
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == (base, epoch, codec)
    assert batch.last_offset_delta == len(records) - 1
    assert _theirs(data) == [(base + i, ts, k, v, list(hs)) for i, (k, v, ts, hs) in enumerate(records)]


@settings(max_examples=60, deadline=None)
@given(record_lists, codecs)
def test_theirs_decode_with_ours(records: list, codec: int) -> None:
    # A producer's builder always writes base offset 0: the broker assigns offsets.
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 24, offset=0)
    for k, v, ts, hs in records:
        assert builder.append(ts, k, v, list(hs)) is not None
    builder.close()
    data = bytes(builder.buffer())
    [h] = r.validate_batches(data)
    assert h.record_count == len(records) and h.compression in (codec, r.NONE)  # theirs skips useless codecs
    buf = bytearray(data)
    r.set_base_offset(buf, 0, 1_000, 2)  # what our leader does to it
    decoded = r.decode_records(buf)
    assert [(d.offset, d.timestamp, d.key, d.value, list(d.headers)) for d in decoded] == [
        (1_000 + i, ts, k, v, list(hs)) for i, (k, v, ts, hs) in enumerate(records)
    ]


def test_producer_state_fields_agree() -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=123,
        producer_epoch=4,
        base_sequence=77,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=10, key=b"k", value=b"v", headers=[])
    builder.append(1, timestamp=9, key=None, value=None, headers=[("a", None)])
    theirs = bytes(builder.build())
    h = r.parse_header(theirs)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (123, 4, 77, True)
    assert (h.first_timestamp, h.max_timestamp) == (10, 10)
    ours = r.encode_batch(
        [(b"k", b"v", 10, ()), (None, None, 9, [("a", None)])],
        producer_id=123,
        producer_epoch=4,
        base_sequence=77,
        is_transactional=True,
        partition_leader_epoch=0,
    )
    assert ours == theirs  # byte for byte, CRC included


@pytest.mark.parametrize("codec", [r.GZIP, r.LZ4, r.ZSTD])
def test_compressed_stamped_batches_still_decode_with_kafka_python(codec: int) -> None:
    buf = bytearray(r.encode_batch([(b"k%d" % i, b"v" * 100, 1000 + i, ()) for i in range(50)], compression=codec))
    r.set_base_offset(buf, 0, 5_000, 3)
    [batch] = list(MemoryRecords(bytes(buf)))
    assert batch.validate_crc() and batch.base_offset == 5_000 and batch.leader_epoch == 3
    assert [rec.offset for rec in batch] == list(range(5_000, 5_050))


@pytest.mark.parametrize("codec", [r.GZIP, r.LZ4, r.ZSTD])
def test_their_compressed_batches_decode_with_ours(codec: int) -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 24, offset=0)
    for i in range(200):
        builder.append(1_000 + i, b"key-%d" % (i % 7), b"value " * 20, [("trace", b"abc")])
    builder.close()
    data = bytes(builder.buffer())
    [h] = r.validate_batches(data)
    assert h.compression == codec and len(data) < 200 * 120
    decoded = r.decode_records(data)
    assert [(d.offset, d.key, d.headers) for d in decoded] == [
        (i, b"key-%d" % (i % 7), (("trace", b"abc"),)) for i in range(200)
    ]
