"""``Log.read_slices``, the zero-copy twin of ``Log.read``: the ranges it names hold exactly ``read``'s bytes,
for every offset and bound, and stay readable after retention deletes the segment."""

from __future__ import annotations

import os
from pathlib import Path

from broker.log import Log
from broker.log.base import ReadResult
from broker.log.reads import SliceResult

from .helpers import FakeClock, batch, open_log, read_bytes


def _filled(tmp_path: Path, clock: FakeClock | None = None, **cfg: object) -> Log:
    log = open_log(tmp_path / "t-0", {"segment.bytes": 900, **cfg}, clock)
    for i in range(40):
        log.append(batch(1 + i % 5, tag=i, value_size=10 + (i * 7) % 40), leader_epoch=0)
    return log


def test_slices_are_byte_identical_to_read(tmp_path: Path) -> None:
    log = _filled(tmp_path)
    assert len(log.segments()) > 3
    end = log.log_end_offset
    for max_bytes in (1, 60, 200, 900, 1 << 20):
        for max_offset in (None, end // 2, end):
            for offset in range(log.log_start_offset, end + 1):
                want = log.read(offset, max_bytes, max_offset=max_offset)
                for copy_below in (0, 150):  # 150: answers under 150 bytes come back copied, as read's
                    got = log.read_slices(offset, max_bytes, max_offset=max_offset, copy_below=copy_below)
                    if isinstance(got, SliceResult):
                        assert len(got.slices) <= 1 and got.size == len(want.data)
                        assert not got.slices or got.size >= copy_below
                    assert read_bytes(got) == want.data, (offset, max_bytes, max_offset)
                    assert (got.next_offset, got.log_start_offset, got.log_end_offset) == \
                        (want.next_offset, want.log_start_offset, want.log_end_offset)


def test_out_of_range_matches_read(tmp_path: Path) -> None:
    log = _filled(tmp_path)
    for offset in (-1, log.log_end_offset + 1):
        errors = []
        for fn in (log.read, log.read_slices):
            try:
                fn(offset, 1000)
            except Exception as exc:
                errors.append((type(exc), str(exc)))
        assert len(errors) == 2 and errors[0] == errors[1]


def test_slice_survives_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, **{"retention.ms": 1000})
    want = log.read(0, 1 << 20).data
    got = log.read_slices(0, 1 << 20)
    assert isinstance(got, SliceResult) and got.slices
    log.high_watermark = log.log_end_offset
    clock.advance(10_000)
    assert log.delete_old_segments() > 0
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert read_bytes(got) == want  # the duplicate descriptor kept the deleted segment's bytes
    log.close()


def test_an_answer_small_enough_to_copy_reads_the_file_as_read_does(tmp_path: Path, monkeypatch) -> None:
    """A follower's round reads what one round appended, below the copy threshold: the batch's position from the
    segment's tail (or, for batches it no longer lists, the index walk), then one ``pread`` of the bytes (as
    ``read``), not a second walk of the headers before the copy."""
    log = _filled(tmp_path, **{"segment.bytes": 1 << 20})
    end = log.log_end_offset
    real = os.pread
    calls: list[int] = []

    def counted(fd: int, n: int, pos: int) -> bytes:
        calls.append(n)
        return real(fd, n, pos)

    monkeypatch.setattr(os, "pread", counted)
    for preads in (1, 2):  # batches the segment's tail lists need no walk (test_segment_tail.py); the others one
        if preads == 2:
            for seg in log.segments():
                seg._tail = None
        for offset in (0, end // 2, end - 1):
            calls.clear()
            want = log.read(offset, 1 << 20)
            reads = len(calls)
            calls.clear()
            got = log.read_slices(offset, 1 << 20, copy_below=1 << 20)
            assert isinstance(got, ReadResult) and got.data == want.data and got.next_offset == want.next_offset
            assert len(calls) == reads == preads, (offset, calls)
