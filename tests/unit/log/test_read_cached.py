"""``Log.read_cached`` and ``Log.read_slices_cached``: the event loop's reads, which never wait. Each must answer
exactly what ``read`` (``read_slices``) answers when every byte is in the page cache and the lock is free, and
otherwise answer None having waited for nothing: pages the kernel dropped, a lock another thread holds, a
filesystem that cannot read without waiting."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from broker.log import Log, segment
from broker.log.reads import SliceResult
from odradek.protocol.errors import OffsetOutOfRangeError

from .helpers import DROP_ATTEMPTS, batch, drop_from_page_cache, nowait_supported, open_log, read_bytes

T = TypeVar("T")


@pytest.fixture
def log(tmp_path: Path) -> Log:
    if not nowait_supported(tmp_path):
        pytest.skip("this filesystem does not read with RWF_NOWAIT (read_cached always answers None here)")
    lg = open_log(tmp_path / "t-0", {"segment_bytes": 2048, "index_interval_bytes": 300})
    for i in range(60):
        lg.append(batch(1 + i % 4, tag=i, value_size=30 + i % 50), leader_epoch=0)
    assert len(lg.segments()) > 3
    return lg


def _dropped_then(log: Log, read: Callable[[], T]) -> T:
    drop_from_page_cache(log)
    return read()


def test_a_cached_read_answers_what_read_answers(log: Log) -> None:
    rng = random.Random(7)
    start, end = log.log_start_offset, log.log_end_offset
    tails = 0
    for offset in range(start, end + 1):
        for _ in range(3):
            max_bytes = rng.choice([1, 100, 500, 3000])
            max_offset = rng.choice([None, end, rng.randint(offset, end)])
            want = log.read(offset, max_bytes, max_offset=max_offset)
            got = log.read_cached(offset, max_bytes, max_offset=max_offset)
            assert got is not None, (offset, max_bytes, max_offset)
            assert (bytes(got.data), got.next_offset, got.log_start_offset, got.log_end_offset) == \
                (bytes(want.data), want.next_offset, want.log_start_offset, want.log_end_offset)
        tails += log.segments()[-1].tail_span(offset, 100, None, log.segments()[-1].size) is not None
    assert tails  # the tail's positions were among the reads (the header walk and the index the others)


def test_bytes_the_kernel_dropped_are_not_waited_for(log: Log) -> None:
    offset = log.segments()[1].base_offset
    want = log.read(offset, 1000)
    assert any(_dropped_then(log, lambda: log.read_cached(offset, 1000)) is None for _ in range(DROP_ATTEMPTS))
    assert log.read(offset, 1000) == want  # the waiting read, which brings the pages back
    got = log.read_cached(offset, 1000)
    assert got is not None and bytes(got.data) == want.data


def test_a_read_at_the_log_end_of_dropped_pages_is_not_waited_for(log: Log) -> None:
    """Through the tail's positions too (no header walk), the one ``pread`` does not wait."""
    last = log.segments()[-1]
    offset = log.log_end_offset - 1
    assert last.tail_span(offset, 1000, None, last.size) is not None
    assert any(_dropped_then(log, lambda: log.read_cached(offset, 1000)) is None for _ in range(DROP_ATTEMPTS))


def test_a_lock_another_thread_holds_is_not_waited_for(log: Log) -> None:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with log._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        assert log.read_cached(log.log_start_offset, 1000) is None
    finally:
        release.set()
        t.join()
    assert log.read_cached(log.log_start_offset, 1000) is not None


def test_out_of_range_is_raised_as_read_raises_it(log: Log) -> None:
    with pytest.raises(OffsetOutOfRangeError):
        log.read_cached(log.log_end_offset + 1, 100)


def test_a_filesystem_that_cannot_tell_answers_none(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(*args: object) -> int:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(segment.os, "preadv", unsupported)
    assert log.read_cached(log.log_start_offset, 1000) is None
    assert log.read(log.log_start_offset, 1000).data  # the waiting read is unchanged


def test_a_short_read_is_not_taken_for_the_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Part of a range cached: the kernel reads what it has and stops; never an answer cut short."""
    real = os.preadv

    def partly(fd: int, buffers: list[bytearray], pos: int, flags: int = 0) -> int:
        return min(real(fd, buffers, pos, flags), 100)

    monkeypatch.setattr(segment.os, "preadv", partly)
    with pytest.raises(segment.WouldBlock):
        fd = os.open(__file__, os.O_RDONLY)
        try:
            segment.pread(fd, 1000, 0, nowait=True)
        finally:
            os.close(fd)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("copy_below", [0, 300, 1 << 20])
def test_cached_slices_answer_what_read_slices_answers(log: Log, copy_below: int) -> None:
    rng = random.Random(copy_below)
    start, end = log.log_start_offset, log.log_end_offset
    for offset in range(start, end + 1):
        max_bytes = rng.choice([1, 100, 500, 3000])
        max_offset = rng.choice([None, end, rng.randint(offset, end)])
        want = log.read_slices(offset, max_bytes, max_offset=max_offset, copy_below=copy_below)
        got = log.read_slices_cached(offset, max_bytes, max_offset=max_offset, copy_below=copy_below)
        assert got is not None
        assert (type(got), read_bytes(got), got.next_offset) == (type(want), read_bytes(want), want.next_offset)


def test_cached_slices_of_dropped_pages_are_not_waited_for_and_hold_no_descriptor(log: Log) -> None:
    """The header walk of a range (no tail positions: an old segment) finds its pages dropped: None, and the
    descriptor a slice would have duplicated is not left open."""
    offset = log.segments()[1].base_offset
    want = log.read_slices(offset, 1500, copy_below=0)
    assert isinstance(want, SliceResult) and want.slices
    want.close()
    before = _open_descriptors()

    def none_after_drop(copy_below: int) -> bool:
        """The cached read of dropped pages is None; an attempt the readahead refilled first is closed."""
        got = _dropped_then(log, lambda: log.read_slices_cached(offset, 1500, copy_below=copy_below))
        if got is None:
            return True
        if isinstance(got, SliceResult):
            got.close()
        return False

    for copy_below in (0, 300, 1 << 20):
        assert any(none_after_drop(copy_below) for _ in range(DROP_ATTEMPTS)), copy_below
        assert _open_descriptors() == before


def test_reads_leave_the_segments_access_time_alone(log: Log) -> None:
    """With relatime (the usual mount) a read of a file modified since its last access would update its atime:
    an inode write and, on ext4, a journal handle, which waits behind another partition's fsync even in a read
    that never waits for pages (CI: the loop held 0.30 s in ``os.preadv(..., RWF_NOWAIT)``). Segments are opened
    with O_NOATIME, reopened ones too."""
    def atimes() -> dict[Path, int]:
        return {s.path: os.stat(s.path).st_atime_ns for s in log.segments()}

    for seg in log.segments():  # accessed before its last modification: relatime would update it on a read
        st = os.stat(seg.path)
        os.utime(seg.path, ns=(st.st_mtime_ns - 10**9, st.st_mtime_ns))
    before = atimes()
    for offset in range(log.log_start_offset, log.log_end_offset, 7):
        assert log.read(offset, 500).data
        cached = log.read_cached(offset, 500)
        assert cached is None or cached.data
    assert atimes() == before
    log.close()
    reopened = open_log(log.dir, {"segment_bytes": 2048, "index_interval_bytes": 300})
    for seg in reopened.segments():
        st = os.stat(seg.path)
        os.utime(seg.path, ns=(st.st_mtime_ns - 10**9, st.st_mtime_ns))
    before = {s.path: os.stat(s.path).st_atime_ns for s in reopened.segments()}
    assert reopened.read(reopened.log_start_offset, 500).data
    assert {s.path: os.stat(s.path).st_atime_ns for s in reopened.segments()} == before
