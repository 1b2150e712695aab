"""The default partitioner must agree with Kafka's Java client byte for byte, or keys land on other partitions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.partitioner import DefaultPartitioner, murmur2, to_positive

# (key, murmur2 signed, {num_partitions: partition}) — every row of kafka-classic.md section 5; blank cells omitted.
VECTORS: list[tuple[bytes, int, dict[int, int]]] = [
    (b"21", -973932308, {3: 0, 6: 0, 10: 0, 12: 0}),
    (b"foobar", -790332482, {3: 0, 6: 0, 10: 6, 12: 6}),
    (b"a-little-bit-long-string", -985981536, {6: 2}),
    (b"a-little-bit-longer-string", -1486304829, {6: 5}),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, {6: 5}),
    (b"abc", 479470107, {3: 0, 6: 3, 10: 7, 12: 3}),
    (b"", 275646681, {3: 0, 6: 3, 10: 1, 12: 9}),
    (b"a", -1563381124, {3: 1, 6: 4, 10: 4, 12: 4}),
    (b"key1", 28543940, {3: 2, 6: 2, 10: 0, 12: 8}),
    (b"key2", 1674751211, {3: 2, 6: 5, 10: 1, 12: 11}),
]


@pytest.mark.parametrize(("key", "expected", "partitions"), VECTORS, ids=[v[0].decode() or "empty" for v in VECTORS])
def test_murmur2_matches_kafka(key: bytes, expected: int, partitions: dict[int, int]) -> None:
    assert murmur2(key) == expected
    partitioner = DefaultPartitioner()
    for n, want in partitions.items():
        assert to_positive(murmur2(key)) % n == want
        assert partitioner.partition("t", key, n, available=[0]) == want  # keyed ignores availability


def _reference_murmur2(data: bytes) -> int:
    """The steps of section 5 written out naively, as an independent oracle for the optimised version."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[4 * n4 :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_the_naive_steps(data: bytes) -> None:
    h = murmur2(data)
    assert h == _reference_murmur2(data)
    assert -(1 << 31) <= h < 1 << 31


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF != abs(-1)
    assert to_positive(-(1 << 31)) == 0  # abs() would give 2**31, outside int32
    h = murmur2(b"21")  # -973932308: the sign bit cleared is 1173551340, abs() is 973932308
    assert to_positive(h) == 1173551340 and abs(h) == 973932308
    assert [to_positive(h) % n for n in (3, 6, 10, 12)] == [0, 0, 0, 0]  # Kafka's partitions
    assert [abs(h) % n for n in (3, 6, 10, 12)] == [2, 2, 8, 8]  # what abs() would wrongly pick
    assert to_positive(12345) == 12345


def test_sticky_partition_holds_until_a_new_batch() -> None:
    p = DefaultPartitioner(random.Random(7))
    first = p.partition("t", None, 6, available=range(6))
    assert all(p.partition("t", None, 6, available=range(6)) == first for _ in range(100))
    second = p.on_new_batch("t", 6, range(6), first)
    assert second != first
    assert p.partition("t", None, 6, available=range(6)) == second == p.sticky_partition("t")


def test_stale_new_batch_report_does_not_move_the_sticky_partition_twice() -> None:
    p = DefaultPartitioner(random.Random(1))
    first = p.partition("t", None, 4, available=range(4))
    second = p.on_new_batch("t", 4, range(4), first)
    assert p.on_new_batch("t", 4, range(4), first) == second  # a second thread reporting the old one


def test_sticky_partitions_are_per_topic() -> None:
    p = DefaultPartitioner(random.Random(3))
    a = p.partition("a", None, 8, available=range(8))
    p.on_new_batch("b", 8, range(8), p.partition("b", None, 8, available=range(8)))
    assert p.partition("a", None, 8, available=range(8)) == a


def test_keyless_goes_only_to_partitions_with_a_leader() -> None:
    p = DefaultPartitioner(random.Random(5))
    available = [1, 4]
    current = p.partition("t", None, 6, available)
    seen = {current}
    for _ in range(50):
        current = p.on_new_batch("t", 6, available, current)
        seen.add(current)
    assert seen == {1, 4}


def test_one_available_partition_is_always_chosen_and_none_means_any() -> None:
    p = DefaultPartitioner(random.Random(9))
    current = p.partition("t", None, 5, [3])
    assert current == 3 and p.on_new_batch("t", 5, [3], 3) == 3
    q = DefaultPartitioner(random.Random(9))
    picks = set()
    current = q.partition("u", None, 3, [])
    for _ in range(60):
        picks.add(current)
        current = q.on_new_batch("u", 3, [], current)
    assert picks == {0, 1, 2}


def test_keyed_records_never_touch_the_sticky_state() -> None:
    p = DefaultPartitioner(random.Random(2))
    assert p.partition("t", b"key1", 3) == 2
    assert p.sticky_partition("t") is None


def test_sticky_partition_beyond_a_shrunk_count_is_replaced() -> None:
    p = DefaultPartitioner(random.Random(4))
    p._sticky["t"] = 9
    assert p.partition("t", None, 3, [0, 1, 2]) in {0, 1, 2}
