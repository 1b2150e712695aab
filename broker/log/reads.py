"""Reading a partition log: whole stored batches by offset, and offsets by timestamp.

Readers take a snapshot (segment list, log end offset, active size) under the log's lock and do their I/O
(``pread``) without it, so reads never wait for appends, fsyncs or compaction and never see a torn batch.

``read_slices`` is the zero-copy twin of ``read`` (Kafka's ``FileRecords.slice``): the same batches, named as a
file range on a duplicate of the segment's descriptor instead of bytes, so the HTTP layer can ``sendfile`` them.
The duplicate keeps the inode alive: retention or compaction may rename and unlink the segment while the answer
is being sent, and the bytes sent are still the ones this snapshot named.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterator
from typing import NamedTuple

from odradek.protocol.errors import OffsetOutOfRangeError
from odradek.protocol.records import HEADER, HEADER_SIZE, MIN_BATCH_LENGTH, BatchHeader

from .base import LogBase, ReadResult, SegmentsView
from .segment import READ_CHUNK, LogSegment, WouldBlock, pread, read_span

# Below this, a partition's fetch answer is copied instead. Over loopback on our VMs the kernel's sendfile costs
# more per byte than a copy (``python bench/fetch_send_bench.py --ways direct,copied``: three partitions of 64 KB,
# 346 µs against 216 per answer; of 200 KB, even; six of 256 KB, sendfile ahead), and each range adds a duplicated
# descriptor and its release. Large answers keep sendfile: they are never joined in memory.
SENDFILE_MIN_BYTES = 128 * 1024


class FileSlice(NamedTuple):
    """``length`` bytes at ``position`` of the open file ``fd`` (a duplicate the holder must close)."""

    fd: int
    position: int
    length: int


class SliceResult(NamedTuple):
    """What ``read`` would return, as file ranges: their bytes, concatenated, are ``read``'s ``data``."""

    slices: tuple[FileSlice, ...]
    next_offset: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return sum(s.length for s in self.slices)

    def close(self) -> None:
        """Close the duplicated descriptors (after sending, or when the answer is dropped)."""
        for s in self.slices:
            with contextlib.suppress(OSError):
                os.close(s.fd)

    def cut(self, limit: int, *, at_least_one: bool) -> SliceResult:
        """The longest prefix of whole batches within ``limit`` bytes (the first batch anyway when
        ``at_least_one``): the cut a fetch's response limit makes of bytes (broker/kafka/fetch.py), made of the
        ranges, so the bytes sent are exactly those the bytes answer would carry.

        Consumes ``self``: the result owns the descriptors of the ranges it keeps (the same ones, a range maybe
        shortened), and those of ranges it drops are closed here; an empty result holds none. ``next_offset``
        is the one after the last batch kept. Reads batch headers only (``pread``, 8 KiB at a time) on the
        caller's thread: the ranges were just read, so the headers are in the page cache, and only an answer
        over the request's ``max_bytes`` needs this.
        """
        if self.size <= limit:
            return self
        lengths: list[int] = []  # what is kept of each range; walked first, so a failed read consumes nothing
        total = 0
        next_offset: int | None = None
        whole = True  # every range before this one is kept whole: this one may continue the prefix
        for s in self.slices:
            length = 0
            if whole:
                for rel, h in _walk(s.fd, s.position, s.position + s.length):
                    if next_offset is None:
                        next_offset = h.base_offset  # where an empty cut's reader would go on
                    if total + rel + h.size > limit and not (at_least_one and total + rel == 0):
                        break
                    length = rel + h.size
                    next_offset = h.base_offset + h.last_offset_delta + 1
            lengths.append(length)
            total += length
            whole = length == s.length
        kept: list[FileSlice] = []
        for s, length in zip(self.slices, lengths, strict=True):
            if length:
                kept.append(FileSlice(s.fd, s.position, length))
            else:
                with contextlib.suppress(OSError):
                    os.close(s.fd)
        return SliceResult(tuple(kept), self.next_offset if next_offset is None else next_offset,
                           self.log_start_offset, self.log_end_offset)


class LogReads(LogBase):
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the one holding ``offset``: at least one even beyond ``max_bytes``, none
        starting at or after ``max_offset`` (the caller's high watermark), all from one segment.

        ``offset == log_end_offset`` (or ``>= max_offset``) returns empty data.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
        """
        result = self._read(offset, max_bytes, max_offset, nowait=False)
        assert result is not None
        return result

    def read_cached(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult | None:
        """``read``, if it can be done without waiting: the log's lock free and every byte it reads in the page
        cache (``preadv2(RWF_NOWAIT)``); else None, having changed nothing, for the caller to ``read`` on a
        thread that may wait. So the event loop reads a consumer's recent bytes itself, without the two thread
        wake-ups of a hop to the storage executor, and never stalls on the disk or behind a flush.

        Raises:
            OffsetOutOfRangeError: as ``read``.
        """
        try:
            return self._read(offset, max_bytes, max_offset, nowait=True)
        except WouldBlock:
            return None

    def _snapshot(self, offset: int, nowait: bool) -> tuple[SegmentsView, int, int, int] | None:
        """The segments, start and end offsets and active segment's size a read works from, taken under the lock
        (``nowait``: None when another thread holds it); OffsetOutOfRangeError outside the log."""
        if not self._lock.acquire(blocking=not nowait):
            return None
        try:
            self._check_open()
            view = self._view
            start, end = self._log_start_offset, self._log_end_offset
            active_size = view.segments[-1].size
        finally:
            self._lock.release()
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end}]",
                log_start_offset=start,
                log_end_offset=end,
            )
        return view, start, end, active_size

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, nowait: bool) -> ReadResult | None:
        snap = self._snapshot(offset, nowait)
        if snap is None:
            return None
        view, start, end, active_size = snap
        if offset == end or (max_offset is not None and offset >= max_offset):
            return ReadResult(b"", offset, start, end)
        segments = view.segments
        i = max(bisect.bisect_right(view.bases, offset) - 1, 0)
        last = len(segments) - 1
        for j in range(i, last + 1):
            seg = segments[j]
            limit = active_size if j == last else seg.size
            found = seg.read(offset, max_bytes, max_offset, limit, nowait)
            if found is not None:
                data, next_offset = found
                return ReadResult(data, next_offset, start, end)
        return ReadResult(b"", offset, start, end)

    def read_slices(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                    copy_below: int = 0) -> SliceResult | ReadResult:
        """``read``'s batches (same snapshot rules and bounds) as a file range to send without copying.

        Walks batch headers only (one small ``pread`` per batch, or per 8 KiB of small batches), never the bytes
        between them, and ``dup``s the segment's descriptor (on the reading thread) so the range stays readable
        after the segment is deleted. Empty slices where ``read`` returns empty data. An answer smaller
        than ``copy_below`` bytes comes back as ``read`` would give it (bytes): too small to be worth a sendfile;
        when even the span a read would look at is that small, it is read as ``read`` reads it (one ``pread``, cut
        in memory), without the header walk.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
        """
        result = self._read_slices(offset, max_bytes, max_offset, copy_below, nowait=False)
        assert result is not None
        return result

    def read_slices_cached(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                           copy_below: int = 0) -> SliceResult | ReadResult | None:
        """``read_slices``, if it can be done without waiting (as ``read_cached``: the lock free, every header and
        byte it reads in the page cache); else None, with no descriptor left open."""
        try:
            return self._read_slices(offset, max_bytes, max_offset, copy_below, nowait=True)
        except WouldBlock:
            return None

    def _read_slices(self, offset: int, max_bytes: int, max_offset: int | None, copy_below: int,
                     nowait: bool) -> SliceResult | ReadResult | None:
        snap = self._snapshot(offset, nowait)
        if snap is None:
            return None
        view, start, end, active_size = snap
        if offset == end or (max_offset is not None and offset >= max_offset):
            return SliceResult((), offset, start, end)
        segments = view.segments
        i = max(bisect.bisect_right(view.bases, offset) - 1, 0)
        last = len(segments) - 1
        for j in range(i, last + 1):
            seg = segments[j]
            limit = active_size if j == last else seg.size
            span = seg.tail_span(offset, max_bytes, max_offset, limit)  # at the log end: no header read
            if span is not None:
                pos, length, next_offset = span
                if not length:
                    return SliceResult((), next_offset, start, end)
                if length >= copy_below:
                    return SliceResult((FileSlice(os.dup(seg._fd), pos, length),), next_offset, start, end)
                data = seg.pread_span(pos, length, offset, nowait)
                if data is not None:
                    return ReadResult(data, next_offset, start, end)
            first = seg.find(offset, limit, nowait)
            if first is None:
                continue
            if read_span(first[1].size, first[0], max_bytes, limit) < copy_below:
                # An answer this small is copied whatever its cut: read's one pread, cut in memory, instead of a
                # header walk and then the copy (a follower's round reads one round's appends this way).
                data, next_offset = seg.read_found(first, offset, max_bytes, max_offset, limit, nowait)
                if not data:
                    return SliceResult((), next_offset, start, end)
                return ReadResult(data, next_offset, start, end)
            pos, length, next_offset = _slice(seg, first, offset, max_bytes, max_offset, limit, nowait)
            if not length:
                return SliceResult((), next_offset, start, end)
            if length < copy_below:
                return ReadResult(pread(seg._fd, length, pos, nowait), next_offset, start, end)
            return SliceResult((FileSlice(os.dup(seg._fd), pos, length),), next_offset, start, end)
        return SliceResult((), offset, start, end)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms``; None if there is none.

        Kafka's ListOffsets sentinels work too: -2 is the log start offset, -1 the log end offset.
        """
        with self._lock:
            view = self._view
            start, end = self._log_start_offset, self._log_end_offset
            active_size = view.segments[-1].size
        if timestamp_ms == -2:
            return start
        if timestamp_ms == -1:
            return end
        last = len(view.segments) - 1
        for j, seg in enumerate(view.segments):
            if seg.max_timestamp < timestamp_ms or seg.next_offset <= start:
                continue
            found = seg.offset_for_timestamp(timestamp_ms, start, active_size if j == last else seg.size)
            if found is not None:
                return found
        return None



def _walk(fd: int, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """``(position relative to start, header)`` of each whole batch in ``[start, end)`` of ``fd``."""
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    pos = start
    while pos + HEADER_SIZE <= end:
        chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        rel = 0
        while rel + HEADER_SIZE <= len(chunk):
            h = make(unpack(chunk, rel))
            if h.batch_length < MIN_BATCH_LENGTH or pos + rel + h.size > end:
                return
            yield pos + rel - start, h
            rel += h.size
        if rel == 0:
            return
        pos += rel


def _slice(seg: LogSegment, found: tuple[int, BatchHeader], offset: int, max_bytes: int, max_offset: int | None,
           limit: int, nowait: bool = False) -> tuple[int, int, int]:
    """``(position, length, next offset)`` of what ``LogSegment.read_found`` would return from ``found`` (the
    batch ``LogSegment.find`` gave for ``offset``).

    The same cut as ``LogSegment.read``: the first batch whole whatever its size, then batches while the total
    stays within ``max_bytes``, none starting at or after ``max_offset``, none past ``limit``.
    """
    pos, h = found
    if max_offset is not None and h.base_offset >= max_offset:
        return pos, 0, offset
    end = read_span(h.size, pos, max_bytes, limit)  # what LogSegment.read would pread
    cut = 0
    next_offset = offset
    for bpos, bh in seg.walk(pos, pos + end, nowait):
        nxt = bpos - pos + bh.size
        if nxt > end or (cut and nxt > max_bytes) or (max_offset is not None and bh.base_offset >= max_offset):
            break
        cut = nxt
        next_offset = bh.next_offset
    return pos, cut, next_offset
