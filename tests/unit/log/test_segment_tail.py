"""A segment's tail: the positions of the last batches appended, which let a read at the log end skip the index
and the header walk. Every read through it must return what the long way returns (the same segments with their
tails dropped), across trims, truncations, gaps in the offsets and rolls; and a read at the log end must cost one
``pread`` (none for a file range)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker.log import Log, segment
from broker.log.reads import SliceResult
from odradek.protocol.records import encode_batch

from .helpers import batch, open_log, read_bytes


def _answers(log: Log, offsets: range, max_bytes: int, max_offset: int | None) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for offset in offsets:
        read = log.read(offset, max_bytes, max_offset=max_offset)
        out.append(("read", offset, read.data, read.next_offset))
        for copy_below in (0, 300):
            got = log.read_slices(offset, max_bytes, max_offset=max_offset, copy_below=copy_below)
            out.append(("slices", offset, copy_below, type(got).__name__, read_bytes(got), got.next_offset))
    return out


@contextmanager
def _without_tails(log: Log) -> Iterator[None]:
    saved = [(seg, seg._tail) for seg in log.segments()]
    for seg, _ in saved:
        seg._tail = None
    try:
        yield
    finally:
        for seg, tail in saved:
            seg._tail = tail


def _check_like_the_long_way(log: Log, rng: random.Random) -> int:
    """Reads at every offset with random bounds, through the tails and without them; the number that the tails
    answered (so a test knows the tail was used)."""
    start, end = log.log_start_offset, log.log_end_offset
    offsets = range(start, end + 1)
    used = 0
    for max_bytes in (1, rng.randrange(50, 400), rng.randrange(400, 3000), 1 << 20):
        for max_offset in (None, rng.randrange(start, end + 1), end):
            fast = _answers(log, offsets, max_bytes, max_offset)
            with _without_tails(log):
                slow = _answers(log, offsets, max_bytes, max_offset)
            assert fast == slow, (max_bytes, max_offset)
    for seg in log.segments():
        limit = seg.size
        used += sum(seg.tail_span(o, 1000, None, limit) is not None for o in offsets)
    return used


def _appended(log: Log, rng: random.Random, n: int, *, tag: int = 0) -> None:
    for i in range(n):
        log.append(batch(rng.randrange(1, 6), tag=tag + i, value_size=rng.randrange(5, 120)), leader_epoch=0)


@pytest.mark.parametrize("seed", range(4))
def test_reads_through_the_tail_match_the_long_way(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = open_log(tmp_path / "t-0", {"segment.bytes": 1 << 20, "index.interval.bytes": rng.choice([1, 512, 4096])})
    _appended(log, rng, 120)
    assert _check_like_the_long_way(log, rng) > 100


def test_trims_truncations_and_rolls_keep_reads_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment, "TAIL_BATCHES", 16)  # trims every 16 appends past 32
    rng = random.Random(7)
    log = open_log(tmp_path / "t-0", {"segment.bytes": 12000})
    trimmed = 0
    for i in range(150):
        _appended(log, rng, 1, tag=i)
        tail = log.segments()[-1]._tail
        assert tail is not None and len(tail.nexts) <= 32
        trimmed += tail.first_pos > 0 and tail.bases[0] > log.segments()[-1].base_offset
    assert trimmed and len(log.segments()) > 2
    assert all(seg._tail is None for seg in log.segments()[:-1])  # sealed by the rolls
    assert _check_like_the_long_way(log, rng) > 10
    log.truncate_to(log.log_end_offset - 7)
    assert log.segments()[-1]._tail is None
    _check_like_the_long_way(log, rng)
    _appended(log, rng, 25, tag=1000)
    assert _check_like_the_long_way(log, rng) > 10


def test_offsets_with_gaps(tmp_path: Path) -> None:
    """A follower's appends carry the leader's offsets, which a compacted leader leaves gaps between: an offset in a
    gap reads from the next batch, as the long way does."""
    log = open_log(tmp_path / "t-0")
    base = 0
    for i in range(40):
        n = 1 + i % 4
        log.append_replicated(encode_batch([(b"k", f"v{i}-{j}".encode(), 1_000, ()) for j in range(n)],
                                           base_offset=base))
        base += n + (i % 3) * 5  # gaps of 0, 5 and 10 offsets
    assert _check_like_the_long_way(log, random.Random(3)) > 40


def test_a_read_at_the_log_end_reads_only_itsread_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0", {"index.interval.bytes": 1 << 20})  # no index entry: the long way walks
    _appended(log, random.Random(1), 30)
    end = log.log_end_offset
    log.append(batch(4, tag=99), leader_epoch=0)
    calls: list[tuple[int, int]] = []
    real = os.pread

    def counted(fd: int, n: int, pos: int) -> bytes:
        calls.append((n, pos))
        return real(fd, n, pos)

    monkeypatch.setattr(os, "pread", counted)
    read = log.read(end, 1 << 20)
    assert read.next_offset == end + 4 and len(calls) == 1 and calls[0][0] == len(read.data)
    calls.clear()
    got = log.read_slices(end, 1 << 20, copy_below=0)
    assert isinstance(got, SliceResult) and got.next_offset == end + 4 and calls == []
    got.close()


def test_a_position_that_no_longer_holds_the_offset_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    _appended(log, random.Random(2), 10)
    seg = log.segments()[-1]
    pos, length, _ = seg.tail_span(0, 1 << 20, None, seg.size)
    assert seg.pread_span(pos, length, 0) is not None
    assert seg.pread_span(pos, length, log.log_end_offset - 1) is None  # the batch there ends before that offset
    assert seg.pread_span(pos, seg.size + 10, 0) is None  # shorter than asked: the file was cut since


def test_a_read_sees_nothing_past_the_size_it_looked_at(tmp_path: Path) -> None:
    """A reader takes the segment's size under the log's lock and reads outside it: batches appended after its
    look are not its to read, even though the tail already lists them."""
    rng = random.Random(4)
    log = open_log(tmp_path / "t-0")
    _appended(log, rng, 5)
    seg = log.segments()[-1]
    limit, end = seg.size, log.log_end_offset
    _appended(log, rng, 5, tag=50)
    assert seg.tail_span(end, 1 << 20, None, limit) is None
    assert seg.tail_span(0, 1 << 20, None, limit) == (0, limit, end)
