"""Removing data from a partition log: DeleteRecords, retention by time and size, compaction's swaps.

Nothing at or above the high watermark is ever removed. Segments go by rename first (``.deleted``) and are
unlinked after ``file.delete.delay.ms``, so a read in flight finishes on the old bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from odradek.protocol.errors import OffsetOutOfRangeError

from .base import LogBase
from .segment import LogSegment

log = logging.getLogger(__name__)


class LogRetention(LogBase):
    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords); returns the new log start.

        Whole segments below it are deleted now; the rest of the space is reclaimed as retention reaches
        the segment that holds it.

        Raises:
            OffsetOutOfRangeError: ``offset`` is above the high watermark.
        """
        now_ms = self._now_ms()
        with self._lock:
            self._check_open()
            hw = self.high_watermark
            if offset > hw:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: above the high watermark {hw}",
                    log_start_offset=self._log_start_offset,
                    log_end_offset=self._log_end_offset,
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.first_dirty_offset = max(self.first_dirty_offset, offset)
                self.epoch_cache.truncate_from_start(offset)
                self._delete_segments_locked(lambda seg, upper: upper <= offset, now_ms)
            return self._log_start_offset

    # ---------------------------------------------------------------------------------------- retention

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """One retention pass (``retention.ms``, ``retention.bytes``, log start); returns segments deleted.

        Oldest first, while the rule holds, and only segments entirely below the high watermark. The
        active segment is never deleted as such: if it has expired too, it is rolled first (Kafka does
        the same), then deleted as a closed segment. Holds the lock only for list changes and renames.
        """
        now_ms = self._now_ms() if now_ms is None else now_ms
        cfg = self.config
        deleted = 0
        with self._lock:
            if self._closed:
                return 0
            start = self._log_start_offset
            deleted += self._delete_segments_locked(lambda seg, upper: upper <= start, now_ms)
            if cfg.delete_enabled and cfg.retention_ms >= 0:
                deleted += self._delete_segments_locked(
                    lambda seg, upper: now_ms - seg.max_timestamp > cfg.retention_ms, now_ms
                )
            if cfg.delete_enabled and cfg.retention_bytes >= 0:
                excess = sum(s.size for s in self._segments) - cfg.retention_bytes

                def over_size(seg: LogSegment, upper: int) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                deleted += self._delete_segments_locked(over_size, now_ms)
        self.delete_expired_files(now_ms)
        return deleted

    def _delete_segments_locked(self, predicate: Callable[[LogSegment, int], bool], now_ms: int) -> int:
        """Delete the longest prefix of segments matching ``predicate(segment, its end offset)``."""
        hw = self.high_watermark
        segs = self._segments
        doomed: list[LogSegment] = []
        for i, seg in enumerate(segs):
            is_active = i == len(segs) - 1
            upper = self._log_end_offset if is_active else segs[i + 1].base_offset
            if upper > hw or (is_active and seg.is_empty) or not predicate(seg, upper):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if doomed[-1] is segs[-1]:
            self._roll_locked(self._log_end_offset, now_ms)
        self._segments = self._segments[len(doomed) :]
        self._schedule_delete_locked(doomed, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.first_dirty_offset = max(self.first_dirty_offset, self._log_start_offset)
        self._publish()
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        log.info("%s: deleted %d segment(s); log start is now %d", self.dir, len(doomed), self._log_start_offset)
        return len(doomed)

    def _schedule_delete_locked(self, segments: list[LogSegment], now_ms: int) -> None:
        """Rename now, unlink after ``file.delete.delay.ms`` (in-flight reads keep the open descriptor)."""
        for seg in segments:
            seg.rename_to_deleted()
            self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, seg))
        if self.config.file_delete_delay_ms <= 0:
            self._delete_due_locked(now_ms)

    def _delete_due_locked(self, now_ms: int) -> None:
        due = [seg for t, seg in self._pending_deletes if t <= now_ms]
        self._pending_deletes = [(t, seg) for t, seg in self._pending_deletes if t > now_ms]
        for seg in due:
            seg.delete_files()

    def delete_expired_files(self, now_ms: int | None = None) -> None:
        """Unlink segment files whose ``file.delete.delay.ms`` has passed (called by the background)."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            self._delete_due_locked(now_ms)

    # ---------------------------------------------------------------------------------------- compaction

    def snapshot(self) -> tuple[tuple[LogSegment, ...], int, int, int]:
        """``(segments, first dirty offset, high watermark, generation)`` for a compaction pass."""
        with self._lock:
            return self._view.segments, self.first_dirty_offset, self.high_watermark, self.generation

    def replace_segments(self, old: list[LogSegment], new: LogSegment, generation: int) -> bool:
        """Swap compaction output ``new`` (a complete ``.swap`` file) in for ``old``; False if too late.

        Refused when the log was truncated since the pass started or when ``old`` is no longer a run of
        closed segments in the log (retention got there first); the caller then deletes its output.
        Crash-safe order: old files renamed ``.deleted``, then the output renamed to its final names; a
        crash in between is completed by ``_complete_swaps`` at the next open.
        """
        now_ms = self._now_ms()
        with self._lock:
            if self._closed or generation != self.generation:
                return False
            try:
                i = self._segments.index(old[0])
            except ValueError:
                return False
            if self._segments[i : i + len(old)] != old or i + len(old) >= len(self._segments):
                return False
            self._schedule_delete_locked(old, now_ms)
            new.install_swap()
            self._dir_dirty = True
            self._segments[i : i + len(old)] = [new]
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            self._publish()
            return True

    def mark_cleaned(self, first_dirty_offset: int, generation: int) -> None:
        """A compaction pass finished: everything below ``first_dirty_offset`` is now the clean part."""
        with self._lock:
            if generation == self.generation:
                self.first_dirty_offset = max(self.first_dirty_offset, min(first_dirty_offset, self._log_end_offset))

