"""Reading a partition log: whole stored batches by offset, and offsets by timestamp.

Readers take a snapshot (segment list, log end offset, active size) under the log's lock and do their I/O
(``pread``) without it, so reads never wait for appends, fsyncs or compaction and never see a torn batch.
"""

from __future__ import annotations

import bisect

from odradek.protocol.errors import OffsetOutOfRangeError

from .base import LogBase, ReadResult


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

