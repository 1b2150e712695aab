"""Kafka's default partitioner, bit for bit, so a key lands on the same partition from Java, librdkafka or here.

Keyed records use ``to_positive(murmur2(key)) % num_partitions`` over *all* partitions (available or not): a key
must not move while a leader is down, or per-key order would break. Keyless records follow KIP-480's sticky
scheme: stay on one partition until the producer opens a new batch there, which fills batches faster than
round-robin and so lowers latency at the same throughput.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

__all__ = ["DefaultPartitioner", "murmur2", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_iter_words = struct.Struct("<I").iter_unpack


def murmur2(data: bytes) -> int:
    """32-bit MurmurHash2 with Java's int overflow, as ``org.apache.kafka.common.utils.Utils.murmur2``.

    Returns a signed int32 (what Java returns). Python ints do not overflow, so every multiply is masked back to
    32 bits and shifts act on the unsigned value (Java's ``>>>``). The two per-word multiplies into ``h`` are
    merged (masking distributes over xor); that and ``iter_unpack`` make it about 1 µs for a short key.
    """
    n = len(data)
    h = _SEED ^ n
    end = n & ~3
    if end:
        for (k,) in _iter_words(data[:end] if end != n else data):
            k = (k * _M) & _MASK
            h = ((h * _M) ^ ((k ^ (k >> 24)) * _M)) & _MASK
    rem = n & 3
    if rem:
        if rem == 3:
            h ^= data[end + 2] << 16
        if rem >= 2:
            h ^= data[end + 1] << 8
        h = ((h ^ data[end]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``toPositive``: clear the sign bit. Not ``abs()``: -1 maps to 2147483647, not 1."""
    return n & 0x7FFFFFFF


class DefaultPartitioner:
    """Kafka 2.4-2.8's ``DefaultPartitioner`` with its ``StickyPartitionCache``.

    Not thread-safe by itself: the producer calls it under the lock that also guards its record accumulator,
    because "the accumulator opened a new batch" and "pick a new sticky partition" must happen together.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] = ()) -> int:
        """The partition for one record; ``available`` lists partitions that have a leader (keyless only)."""
        if key is not None:
            return to_positive(murmur2(key)) % num_partitions
        part = self._sticky.get(topic)
        if part is None or part >= num_partitions:
            part = self._next_sticky(topic, num_partitions, available, None)
        return part

    def sticky_partition(self, topic: str) -> int | None:
        """The current sticky partition of ``topic`` (None before the first keyless record)."""
        return self._sticky.get(topic)

    def on_new_batch(self, topic: str, num_partitions: int, available: Sequence[int], prev_partition: int) -> int:
        """The accumulator would open a new batch on ``prev_partition``: move on to another partition.

        Only switches when ``prev_partition`` is still the sticky one, so two threads racing to report the same
        full batch move the topic once, not twice (Kafka's ``StickyPartitionCache.nextPartition``).
        """
        return self._next_sticky(topic, num_partitions, available, prev_partition)

    def _next_sticky(self, topic: str, num_partitions: int, available: Sequence[int], prev: int | None) -> int:
        old = self._sticky.get(topic)
        if old is not None and old != prev and old < num_partitions:
            return old
        rng = self._rng
        if not available:
            # Nothing has a leader: pick among all, the batch waits in the accumulator for a leader anyway.
            new = rng.randrange(num_partitions)
        elif len(available) == 1:
            new = available[0]
        else:
            new = available[rng.randrange(len(available))]
            while new == old:
                new = available[rng.randrange(len(available))]
        self._sticky[topic] = new
        return new
