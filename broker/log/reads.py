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
from typing import NamedTuple

from odradek.protocol.errors import OffsetOutOfRangeError

from .base import LogBase, ReadResult
from .segment import LogSegment

# Below this, a fetch answer is copied instead: in Python, ``loop.sendfile``'s own machinery (pause reading, wait
# for an empty write buffer, futures, resume) costs more than copying a few KiB that are in the page cache anyway.
SENDFILE_MIN_BYTES = 64 * 1024


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


class LogReads(LogBase):
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the one holding ``offset``: at least one even beyond ``max_bytes``, none
        starting at or after ``max_offset`` (the caller's high watermark), all from one segment.

        ``offset == log_end_offset`` (or ``>= max_offset``) returns empty data.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
        """
        with self._lock:
            self._check_open()
            view = self._view
            start, end = self._log_start_offset, self._log_end_offset
            active_size = view.segments[-1].size
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end}]",
                log_start_offset=start,
                log_end_offset=end,
            )
        if offset == end or (max_offset is not None and offset >= max_offset):
            return ReadResult(b"", offset, start, end)
        segments = view.segments
        i = max(bisect.bisect_right(view.bases, offset) - 1, 0)
        last = len(segments) - 1
        for j in range(i, last + 1):
            seg = segments[j]
            limit = active_size if j == last else seg.size
            found = seg.read(offset, max_bytes, max_offset, limit)
            if found is not None:
                data, next_offset = found
                return ReadResult(data, next_offset, start, end)
        return ReadResult(b"", offset, start, end)

    def read_slices(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                    copy_below: int = 0) -> SliceResult | ReadResult:
        """``read``'s batches (same snapshot rules and bounds) as a file range to send without copying.

        Walks batch headers only (one small ``pread`` per batch, or per 8 KiB of small batches), never the bytes
        between them, and ``dup``s the segment's descriptor here, on the storage thread, so the range stays
        readable after the segment is deleted. Empty slices where ``read`` returns empty data. An answer smaller
        than ``copy_below`` bytes comes back as ``read`` would give it (bytes): too small to be worth a sendfile.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
        """
        with self._lock:
            self._check_open()
            view = self._view
            start, end = self._log_start_offset, self._log_end_offset
            active_size = view.segments[-1].size
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{start}, {end}]",
                log_start_offset=start,
                log_end_offset=end,
            )
        if offset == end or (max_offset is not None and offset >= max_offset):
            return SliceResult((), offset, start, end)
        segments = view.segments
        i = max(bisect.bisect_right(view.bases, offset) - 1, 0)
        last = len(segments) - 1
        for j in range(i, last + 1):
            seg = segments[j]
            found = _slice(seg, offset, max_bytes, max_offset, active_size if j == last else seg.size)
            if found is not None:
                pos, length, next_offset = found
                if not length:
                    return SliceResult((), next_offset, start, end)
                if length < copy_below:
                    return ReadResult(os.pread(seg._fd, length, pos), next_offset, start, end)
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



def _slice(seg: LogSegment, offset: int, max_bytes: int, max_offset: int | None, limit: int
           ) -> tuple[int, int, int] | None:
    """``(position, length, next offset)`` of what ``LogSegment.read`` would return; None where it returns None.

    The same cut as ``LogSegment.read``: the first batch whole whatever its size, then batches while the total
    stays within ``max_bytes``, none starting at or after ``max_offset``, none past ``limit``.
    """
    found = seg.find(offset, limit)
    if found is None:
        return None
    pos, h = found
    if max_offset is not None and h.base_offset >= max_offset:
        return pos, 0, offset
    end = min(max(max_bytes, h.size), limit - pos)  # what LogSegment.read would pread
    cut = 0
    next_offset = offset
    for bpos, bh in seg.walk(pos, pos + end):
        nxt = bpos - pos + bh.size
        if nxt > end or (cut and nxt > max_bytes) or (max_offset is not None and bh.base_offset >= max_offset):
            break
        cut = nxt
        next_offset = bh.next_offset
    return pos, cut, next_offset
