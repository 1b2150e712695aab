"""The compiled record check of the binary produce path against validate.check_block_records.

The compiled side may only say "certainly valid": whenever it answers True the reference must accept the same
block, and for every block a real producer writes it must answer True (or the fast path would never be taken).
Mutated bytes (flips, cuts, inserted bytes) and hand-made records with bad deltas, lengths and timestamps probe
the first rule; generated batches the second.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import speedups
from odradek.protocol.errors import OdradekError
from odradek.protocol.records import encode_batch
from odradek.protocol.records.batch import HEADER_SIZE, parse_header
from odradek.protocol.records.validate import LONG_MAX, check_block_records
from odradek.protocol.records.varint import encode_varint

if not speedups.COMPILED:
    pytest.skip("the compiled codec is not in use (ODRADEK_NO_EXTENSIONS=1 or no compiler)", allow_module_level=True)

from odradek.protocol import _speedups as c

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000_000
maybe_bytes = st.none() | st.binary(max_size=60)
header = st.tuples(st.text(max_size=6), maybe_bytes)
record = st.tuples(maybe_bytes, maybe_bytes, st.none() | st.integers(NOW - 10_000, NOW + 10_000),
                   st.lists(header, max_size=2))


def block_of(records: list) -> tuple[bytes, int, int]:
    batch = encode_batch(records, now_ms=NOW)
    h = parse_header(memoryview(batch), 0)
    return batch[HEADER_SIZE:], h.record_count, h.first_timestamp


def reference_accepts(block: bytes, count: int, first_ts: int, lat: bool, max_diff: int) -> bool:
    try:
        check_block_records(block, count, first_ts, lat, NOW, max_diff)
    except OdradekError:
        return False
    return True


@SETTINGS
@given(st.lists(record, min_size=1, max_size=20), st.booleans())
def test_what_a_producer_writes_takes_the_fast_path(records: list, lat: bool) -> None:
    block, count, first_ts = block_of(records)
    assert reference_accepts(block, count, first_ts, lat, 60_000)
    assert c.check_records(block, count, first_ts, lat, NOW, 60_000) is True
    assert c.check_records(bytearray(block), count, first_ts, lat, NOW, LONG_MAX) is True


@SETTINGS
@given(st.lists(record, min_size=1, max_size=8), st.data())
def test_the_fast_path_is_never_looser_than_the_reference(records: list, data: st.DataObject) -> None:
    block, count, first_ts = block_of(records)
    mutated = bytearray(block)
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(0, max(len(mutated) - 1, 0)))
        if kind == "flip" and mutated:
            mutated[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del mutated[at:at + data.draw(st.integers(1, 4))]
        else:
            mutated[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    count = data.draw(st.sampled_from([count, count + 1, max(count - 1, 1)]))
    max_diff = data.draw(st.sampled_from([0, 5_000, 60_000, LONG_MAX]))
    lat = data.draw(st.booleans())
    if c.check_records(bytes(mutated), count, first_ts, lat, NOW, max_diff):
        assert reference_accepts(bytes(mutated), count, first_ts, lat, max_diff)


def raw_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes, headers: list) -> bytes:
    body = bytearray(b"\x00") + encode_varint(ts_delta) + encode_varint(offset_delta)
    for field in (key, value):
        body += encode_varint(-1) if field is None else encode_varint(len(field)) + field
    body += encode_varint(len(headers))
    for hk, hv in headers:
        body += encode_varint(len(hk)) + hk + encode_varint(len(hv)) + hv
    return bytes(encode_varint(len(body)) + body)


@pytest.mark.parametrize(("records", "max_diff", "why"), [
    ([raw_record(0, 0, b"k", b"v", []), raw_record(2, 0, b"k", b"v", [])], LONG_MAX, "offset deltas 0, 2"),
    ([raw_record(1, 0, b"k", b"v", [])], LONG_MAX, "first delta 1"),
    ([raw_record(0, 120_000, b"k", b"v", [])], 60_000, "two minutes ahead"),
    ([raw_record(0, 0, b"k", b"v", [(b"\xff\xfe", b"x")])], LONG_MAX, "a header key that is not UTF-8"),
    ([raw_record(0, 0, b"k", b"v", [])[:-1]], LONG_MAX, "a record cut short"),
    ([raw_record(0, 0, b"k", b"v", []) + b"\x00"], LONG_MAX, "a trailing byte"),
])
def test_bad_records_go_to_the_reference(records: list[bytes], max_diff: int, why: str) -> None:
    block = b"".join(records)
    count = 1 if why == "first delta 1" or len(records) == 1 else len(records)
    assert c.check_records(block, count, NOW, False, NOW, max_diff) is False, why
    assert not reference_accepts(block, count, NOW, False, max_diff), why


def test_headers_with_utf8_keys_take_the_fast_path() -> None:
    block = raw_record(0, 0, None, b"v", [("é-key".encode(), b"x"), (b"k2", b"")])
    assert c.check_records(block, 1, NOW, False, NOW, 1000) is True


@pytest.mark.parametrize("size", [63, 64, 65, 127, 128, 8191, 8192, 8193, 70_000])
def test_one_two_and_three_byte_varints_read_alike(size: int) -> None:
    """Lengths, deltas and timestamps at the edges of a varint's one-, two- and three-byte forms (zigzag: 63 is one
    byte, 64 two, 8,192 three), over 70 records so that the offset deltas pass 64: both sides accept them, and a
    block cut inside any record's last varint is refused by both."""
    records = [raw_record(i, (i - 35) * size, None if i % 3 else b"k" * (size % 200), b"v" * size,
                          [(b"h", b"x" * (size % 130))] if i % 5 == 0 else [])
               for i in range(70)]
    block = b"".join(records)
    assert c.check_records(block, 70, NOW, False, NOW, LONG_MAX) is True
    assert reference_accepts(block, 70, NOW, False, LONG_MAX)
    assert c.check_records(block, 70, NOW, False, NOW, 35 * size) is True  # the first record is 35 * size early
    assert c.check_records(block, 70, NOW, False, NOW, 35 * size - 1) is False
    assert not reference_accepts(block, 70, NOW, False, 35 * size - 1)
    for cut in (1, 2, 3):
        assert c.check_records(block[:-cut], 70, NOW, False, NOW, LONG_MAX) is False
        assert not reference_accepts(block[:-cut], 70, NOW, False, LONG_MAX)
