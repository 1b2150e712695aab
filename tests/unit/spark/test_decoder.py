"""The vectorised Arrow decoder against the reference codec (odradek.protocol.records), on every shape of batch."""

from __future__ import annotations

import random

import pytest

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import GZIP, LZ4, NONE, ZSTD, encode_batch, set_base_offset
from odradek_spark.reader import ArrowDecoder, arrow_schema

pa = pytest.importorskip("pyarrow")


def _batch(rng: random.Random, base: int, n: int, **kwargs: object) -> bytes:
    headers_too = kwargs.pop("headers", False)
    big = kwargs.pop("big", False)
    records = []
    for _ in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20_000 if big else 300))
        headers = []
        if headers_too and rng.random() < 0.5:
            headers = [(f"h{j}é", None if rng.random() < 0.3 else rng.randbytes(j)) for j in range(rng.randrange(1, 4))]
        records.append((key, value, 1_700_000_000_000 + rng.randrange(-10**6, 10**10), headers))
    data = bytearray(encode_batch(records, **kwargs))  # type: ignore[arg-type]
    set_base_offset(data, 0, base, 3)
    return bytes(data)


def _log(seed: int) -> tuple[bytes, list[tuple]]:
    """Concatenated batches of every kind, and the records the reference decoder sees in them."""
    from odradek.protocol.records import decode_records

    rng = random.Random(seed)
    body = b""
    offset = 0
    for j in range(25):
        n = rng.randrange(1, 80)
        body += _batch(rng, offset, n, compression=rng.choice([NONE, NONE, GZIP, ZSTD, LZ4]), headers=j % 3 == 0,
                       big=j == 7, timestamp_type=1 if j == 5 else 0)
        offset += n + rng.choice([0, 0, 3])  # gaps, as compaction leaves
    control = bytearray(encode_batch([(None, b"\x00\x00\x00\x00", 1, [])], is_control=True))
    set_base_offset(control, 0, offset, 3)
    body += bytes(control)
    expected = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in decode_records(body)]
    return body, expected


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("include_headers", [False, True])
def test_decoder_matches_the_reference_codec(seed: int, include_headers: bool) -> None:
    body, expected = _log(seed)
    decoder = ArrowDecoder("topic-x", 4, include_headers)
    last = expected[-1][0]
    for start, until in [(0, last + 10), (5, last - 7), (17, 18), (last + 1, last + 5), (3, 3)]:
        batch, next_offset = decoder.decode(body, start, until)
        want = [r for r in expected if start <= r[0] < until]
        if batch is None:
            assert want == []
            continue
        assert batch.schema == arrow_schema(include_headers)
        rows = batch.to_pylist()
        assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(o, k, v) for o, k, v, _, _ in want]
        assert [r["timestamp"].timestamp() * 1000 for r in rows] == pytest.approx([t for _, _, _, t, _ in want])
        assert {(r["topic"], r["partition"]) for r in rows} == {("topic-x", 4)}
        if include_headers:
            assert [r["headers"] for r in rows] == [
                [{"key": k, "value": v} for k, v in h] if h else None for *_, h in want
            ]
        assert next_offset > want[-1][0]


def test_log_append_time_batches_take_the_batch_time() -> None:
    data = bytearray(encode_batch([(None, b"a", 5, []), (None, b"b", 6, [])], timestamp_type=1))
    from odradek.protocol.records import set_log_append_time

    set_log_append_time(data, 0, 1_800_000_000_000)
    batch, _ = ArrowDecoder("t", 0, False).decode(bytes(data), 0, 10)
    assert batch is not None
    assert batch.column("timestampType").to_pylist() == [1, 1]
    assert [t.timestamp() for t in batch.column("timestamp").to_pylist()] == [1_800_000_000.0] * 2


def test_only_control_batches_give_no_rows_but_move_on() -> None:
    control = bytearray(encode_batch([(None, b"\x00\x00\x00\x00", 1, [])], is_control=True))
    set_base_offset(control, 0, 40, 0)
    assert ArrowDecoder("t", 0, False).decode(bytes(control), 40, 100) == (None, 41)


def test_a_flipped_bit_fails_the_crc() -> None:
    data = bytearray(encode_batch([(b"k", b"value", 1, [])]))
    data[-2] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        ArrowDecoder("t", 0, False).decode(bytes(data), 0, 10)


def test_the_arrow_schema_is_the_one_pyspark_expects() -> None:
    types = pytest.importorskip("pyspark.sql.pandas.types")
    from odradek_spark.source import source_schema

    for include in (False, True):
        assert types.to_arrow_schema(source_schema(include), timezone="UTC").equals(arrow_schema(include))


def test_runs_of_equal_sizes_and_odd_ones_out_decode_exactly() -> None:
    """The guess-then-walk start finder: long runs, a size change every few records, a record over 8 KiB
    (three-byte length varint) in the middle of a run, and batches too small to guess in."""
    from odradek.protocol.records import decode_records

    rng = random.Random(11)
    body = b""
    offset = 0
    shapes = [
        [100] * 700,
        [100] * 300 + [40_000] + [100] * 300,
        [rng.choice([10, 10, 10, 11]) for _ in range(900)],
        [rng.randrange(0, 500) for _ in range(400)],
        [7] * 20,
        [64 + (i // 50) for i in range(1000)],
    ]
    for sizes in shapes:
        recs: list[tuple[None, bytes, int, list[tuple[str, bytes | None]]]] = [
            (None, bytes([i % 251]) * n, 1_700_000_000_000 + i, []) for i, n in enumerate(sizes)
        ]
        data = bytearray(encode_batch(recs))
        set_base_offset(data, 0, offset, 0)
        body += bytes(data)
        offset += len(sizes)
    want = [(r.offset, r.value) for r in decode_records(body)]
    batch, _ = ArrowDecoder("t", 0, False).decode(body, 0, offset)
    assert batch is not None
    assert list(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)) == want
