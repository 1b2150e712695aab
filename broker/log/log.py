"""The append-only log of one partition replica: a directory of segments named by base offset.

``<data dir>/<topic>-<partition>/`` holds the segments (``segment.py``), their indexes (``index.py``) and
``leader-epoch-checkpoint`` (``epoch_cache.py``). The recovery point, the log start offset and the cleaner's
first dirty offset are checkpointed per data directory by ``LogManager``, as in Kafka, and handed to
:meth:`Log.open`.

Offsets live in batch headers only. A leader append validates the batches (framing, CRC, sizes; no record
is decoded) and stamps each header's base offset and partition leader epoch in place; a follower append
keeps both as the leader wrote them. A read returns the stored bytes of whole batches, so fetch and
replication move bytes without any per-record work.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, overload

from odradek.protocol.errors import InvalidRecordError
from odradek.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)

from .base import AppendResult, ReadResult, Scheduler, SegmentsView
from .checkpoint import fsync_dir
from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .reads import LogReads
from .recovery import complete_swaps, load_segments, remove_leftovers
from .retention import LogRetention
from .segment import INT32_MAX, LogSegment

__all__ = ["AppendResult", "Log", "ReadResult", "Scheduler", "SegmentsView"]

log = logging.getLogger(__name__)

_STAMP = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: what a leader append rewrites


class Log(LogRetention, LogReads):
    """One partition replica's log.

    Concurrency contract:

    * ``append`` / ``append_replicated`` / truncations are called by one thread at a time per log (the
      partition's queue on the storage executor, ``executor.py``: never the event loop); ``read``,
      ``offset_for_timestamp`` and the properties may be called from any thread at any time, as may the
      background maintenance (``delete_old_segments``, ``flush``, the cleaner). The high watermark is the
      log's (``maybe_increment_high_watermark``: forward only, capped at the log end).
    * ``_lock`` guards the segment list, the offsets (start, end, recovery point) and the active segment's
      writes. It is held for an append's one ``pwrite`` and index update, for renames and list swaps, and
      never for a compaction pass or a read's I/O. It is not held for fsyncs either, with two rare
      exceptions: rewriting the leader-epoch checkpoint on a leadership change, and a roll's flush when
      the log was opened without a ``scheduler`` (standalone use; ``LogManager`` always passes one).
    * Readers take a snapshot (segment list, log end offset, active size) under the lock, then read
      without it via ``pread``: closed segments never change, and the active segment is read only up to
      the snapshot size. A segment removed by retention, truncation or compaction is renamed to
      ``.deleted`` and its descriptor stays open for ``file.delete.delay.ms`` before it is unlinked, so an
      in-flight read finishes on the old bytes. Compaction writes a new file and swaps it in under the
      lock; a reader sees the old segment or the new one, never a half-written one.
    * Lock order: Log lock -> LeaderEpochCache lock. Nothing here calls out while holding the Log lock.

    Flushing: by default never on a schedule (see ``config.py`` for why: replication is the durability).
    ``flush.messages`` fsyncs inline after an append; ``flush.ms`` is honoured by ``LogManager``'s
    background thread (``flush_if_due``). A roll always flushes the finished segment, via the optional
    ``scheduler`` (off the append path) or inline if none was given, advancing the recovery point.
    """

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        now: Callable[[], float] = time.time,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        first_dirty_offset: int | None = None,
        clean_shutdown: bool = False,
        scheduler: Scheduler | None = None,
    ) -> Log:
        """Open (creating if needed) the log in ``directory`` and recover it.

        Startup, as Kafka's ``Log.loadSegments``: delete ``.cleaned`` and ``.deleted`` leftovers, complete
        an interrupted compaction swap (``.swap``), then load every segment. Unless ``clean_shutdown``,
        each segment at or after ``recovery_point`` is scanned batch by batch and its indexes rebuilt; at
        the first invalid batch the segment is truncated and every later segment deleted. Indexes of
        other segments are sanity-checked and rebuilt when missing or corrupt.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self = cls(path, config or LogConfig(), now, scheduler)
        now_ms = self._now_ms()
        self.epoch_cache = LeaderEpochCache.load(path)
        remove_leftovers(path)
        complete_swaps(path)
        segments, self.recovered_bytes_truncated = load_segments(
            path, self.config, now_ms, recovery_point=recovery_point, clean_shutdown=clean_shutdown,
            epoch_cache=self.epoch_cache,
        )
        start = log_start_offset if log_start_offset is not None else 0
        if not segments:
            segments.append(LogSegment.create(path, start, self.config, now_ms))
            self._dir_dirty = True
        self._segments = segments
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = max(start, segments[0].base_offset)
        if self._log_end_offset < self._log_start_offset:
            log.warning(
                "%s: log end %d is below the log start %d; starting empty at %d",
                path,
                self._log_end_offset,
                self._log_start_offset,
                self._log_start_offset,
            )
            self._reset_locked(self._log_start_offset, now_ms)
        self._publish()
        self.recovery_point = min(recovery_point, self._log_end_offset)
        dirty = first_dirty_offset if first_dirty_offset is not None else self._log_start_offset
        self.first_dirty_offset = min(max(dirty, self._log_start_offset), self._log_end_offset)
        self.epoch_cache.truncate_from_end(self._log_end_offset)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self._last_flush_ms = now_ms
        return self


    # ------------------------------------------------------------------------------------------ appends

    @overload
    def append(self, batches: bytes | bytearray | memoryview, *, leader_epoch: int,
               page_cache_only: Literal[False] = False) -> AppendResult: ...

    @overload
    def append(self, batches: bytes | bytearray | memoryview, *, leader_epoch: int,
               page_cache_only: bool) -> AppendResult | None: ...

    def append(self, batches: bytes | bytearray | memoryview, *, leader_epoch: int,
               page_cache_only: bool = False) -> AppendResult | None:
        """Leader path: validate, then assign offsets from the log end by rewriting each batch header.

        Only headers are parsed (CRC over a memoryview, no record decoding) except on compacted topics,
        where, as in Kafka, every record must have a key. The records are not even copied: each batch goes
        to disk as a stamped copy of its first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch)
        followed by a view of the rest, all in one ``pwritev``. Under LogAppendTime the header's max
        timestamp and CRC change too, so those batches are copied and re-checksummed.

        ``page_cache_only`` (the event loop appending): None, with nothing changed, if the append would wait on
        more than a page-cache write (``_waits_on_more``).

        Raises:
            CorruptRecordError, RecordTooLargeError, InvalidRecordError: the input, with the log unchanged.
            KafkaStorageError: the write failed (the segment is cut back to its previous size).
        """
        headers = validate_batches(batches, self.config.max_message_bytes, allow_empty=False)
        count = 0
        for h in headers:
            if h.record_count != h.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"a producer batch of {h.record_count} records has last offset delta {h.last_offset_delta}"
                )
            count += h.record_count
        if self.config.compact:
            self._require_keys(batches, headers)
        view = memoryview(batches)
        now_ms = self._now_ms()
        log_append_time = now_ms if self.config.log_append_time else None
        if not self._lock.acquire(blocking=not page_cache_only):
            return None
        try:
            self._check_open()
            offset = first = self._log_end_offset
            infos: list[tuple[int, int, int, int]] = []
            parts: list[bytes | bytearray | memoryview] = []
            pos = 0
            max_ts = -1
            stamp = _STAMP.pack
            for h in headers:
                size = h.batch_length + LOG_OVERHEAD
                end = pos + size
                if log_append_time is None:
                    parts += (stamp(offset, h.batch_length, leader_epoch), view[pos + _STAMP.size : end])
                    ts = h.max_timestamp
                else:
                    whole = bytearray(view[pos:end])
                    set_base_offset(whole, 0, offset, leader_epoch)
                    set_log_append_time(whole, 0, log_append_time)
                    parts.append(whole)
                    ts = log_append_time
                nxt = offset + h.last_offset_delta + 1
                infos.append((offset, nxt, ts, size))
                if ts > max_ts:
                    max_ts = ts
                offset = nxt
                pos = end
            if page_cache_only and self._waits_on_more(leader_epoch, pos, infos, now_ms):
                return None
            if leader_epoch > self.epoch_cache.latest_epoch:  # before the records: see append_replicated
                self.epoch_cache.assign(leader_epoch, first)
            self.epoch_cache.flush_if_dirty()
            self._append_locked(parts, infos, pos, now_ms)
            result = AppendResult(first, offset - 1, count, max_ts, log_append_time, self._log_start_offset)
        finally:
            self._lock.release()
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return result

    def append_replicated(self, batches: bytes | bytearray | memoryview) -> AppendResult:
        """Follower path: keep the leader's offsets and epochs; they must not go back before the log end.

        A batch may start *after* the log end: a compacted leader log has offset gaps, and copying it
        byte for byte copies the gaps (Kafka only refuses offsets below the log end). Batch leader epochs
        feed the epoch cache.

        Raises:
            CorruptRecordError, RecordTooLargeError, InvalidRecordError: as ``append``, plus offsets that
            are below the log end offset or not increasing.
        """
        result = self._append_replicated(batches, page_cache_only=False)
        assert result is not None
        return result

    def append_replicated_to_page_cache(self, batches: bytes | bytearray | memoryview) -> AppendResult | None:
        """``append_replicated`` if it is only a write into the page cache, else None with nothing changed.

        None when the append would wait on anything else: the log's lock held by another thread, a roll
        (new files), a new leader epoch (the checkpoint's fsync) or ``flush.messages`` (an fsync). So the
        event loop may call it (a follower's small append, without the storage hop's two thread wake-ups) and
        fall back to the storage executor on None. Raises as ``append_replicated``.
        """
        return self._append_replicated(batches, page_cache_only=True)

    def _append_replicated(self, batches: bytes | bytearray | memoryview, *,
                           page_cache_only: bool) -> AppendResult | None:
        headers = validate_batches(batches, self.config.max_message_bytes, allow_empty=True)
        now_ms = self._now_ms()
        if not self._lock.acquire(blocking=not page_cache_only):
            return None
        try:
            self._check_open()
            expected = self._log_end_offset
            infos: list[tuple[int, int, int, int]] = []
            for h in headers:
                if h.base_offset < expected:
                    raise InvalidRecordError(
                        f"replicated batch at offset {h.base_offset} is below the expected offset {expected}",
                        log_end_offset=self._log_end_offset,
                    )
                infos.append((h.base_offset, h.next_offset, h.max_timestamp, h.size))
                expected = h.next_offset
            size = len(memoryview(batches))
            if page_cache_only and self._waits_on_more(headers[-1].partition_leader_epoch, size, infos, now_ms):
                return None  # (the last batch's epoch is the largest: epochs never go back in a log)
            # Epochs first: a checkpoint that cannot be written (a full disk) fails the append before any record
            # is written, so the caller's retry finds the log and its producer state as they were.
            for h in headers:
                if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            self.epoch_cache.flush_if_dirty()
            self._append_locked([memoryview(batches)], infos, size, now_ms)
            result = AppendResult(
                headers[0].base_offset,
                expected - 1,
                sum(h.record_count for h in headers),
                max(h.max_timestamp for h in headers),
                None,
                self._log_start_offset,
            )
        finally:
            self._lock.release()
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return result

    def _waits_on_more(self, leader_epoch: int, size: int, infos: list[tuple[int, int, int, int]],
                       now_ms: int) -> bool:
        """Whether an append (under the lock) would do more than write into the page cache: begin an epoch (the
        checkpoint's fsync), roll (new files, the old segment's flush) or reach ``flush.messages`` (an fsync)."""
        return (leader_epoch > self.epoch_cache.latest_epoch
                or self._should_roll(self._segments[-1], size, infos[-1][1] - 1, len(infos), now_ms)
                or self._unflushed_messages + infos[-1][1] - infos[0][0] >= self.config.flush_messages)

    def _require_keys(self, batches: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        pos = 0
        for h in headers:
            if not h.is_control and any(r.key is None for r in decode_batch(batches, pos, verify_crc=False)):
                raise InvalidRecordError("Compacted topic cannot accept message without key")
            pos += h.size

    def _append_locked(
        self,
        parts: list[bytes | bytearray | memoryview],
        infos: list[tuple[int, int, int, int]],
        size: int,
        now_ms: int,
    ) -> None:
        seg = self._segments[-1]
        if self._should_roll(seg, size, infos[-1][1] - 1, len(infos), now_ms):
            seg = self._roll_locked(infos[0][0], now_ms)
        seg.append(parts, infos, now_ms)
        self._log_end_offset = infos[-1][1]
        self._unflushed_messages += infos[-1][1] - infos[0][0]

    def _should_roll(self, seg: LogSegment, size: int, last_offset: int, batches: int, now_ms: int) -> bool:
        """Kafka's ``shouldRoll``: full by size, old by ``segment.ms``, index full, or offset overflow.

        An empty segment only "rolls" for an offset overflow (a follower jumping far ahead), which
        replaces it by one based at the incoming offset.
        """
        if last_offset - seg.base_offset > INT32_MAX:
            return True
        if seg.is_empty:
            return False
        cfg = self.config
        return (
            seg.size + size > cfg.segment_bytes
            or (seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms > cfg.segment_ms)
            or seg.index_room() < batches
        )

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active segment is empty)."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self._log_end_offset, self._now_ms())

    def _roll_locked(self, base_offset: int, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        if old.is_empty:
            if old.base_offset == base_offset:
                return old
            self._segments.pop()
            self._schedule_delete_locked([old], now_ms)
        else:
            old.seal()
        seg = LogSegment.create(self.dir, base_offset, self.config, now_ms)
        self._dir_dirty = True
        self._segments.append(seg)
        self._publish()
        sealed = None if old.is_empty else old
        if self._scheduler is not None:
            self._scheduler(lambda: self.flush(base_offset, sealed=sealed))
        else:
            self._flush_segments_locked(base_offset, sealed)
        return seg

    # --------------------------------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns the new log end offset.

        For replication: a follower drops its divergent tail. Batches are atomic, so a batch straddling
        ``offset`` goes whole and the log end becomes its base offset. Below the log start this is
        ``truncate_fully_and_start_at``, as in Kafka.
        """
        now_ms = self._now_ms()
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return self._log_end_offset
            if offset < self._log_start_offset:
                self._reset_locked(offset, now_ms)
                return offset
            self.generation += 1
            keep = [s for s in self._segments if s.base_offset <= offset]
            drop = self._segments[len(keep) :]
            self._segments = keep
            self._schedule_delete_locked(drop, now_ms)
            active = keep[-1]
            active.truncate_to(offset)
            self._log_end_offset = active.next_offset
            self._publish()
            self._after_truncation_locked()
            return self._log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart empty at ``offset`` (a follower far behind the leader's start)."""
        now_ms = self._now_ms()
        with self._lock:
            self._check_open()
            self._reset_locked(offset, now_ms)

    def _reset_locked(self, offset: int, now_ms: int) -> None:
        self.generation += 1
        old, self._segments = self._segments, []
        self._schedule_delete_locked(old, now_ms)
        self._segments = [LogSegment.create(self.dir, offset, self.config, now_ms)]
        self._dir_dirty = True
        self._log_start_offset = self._log_end_offset = offset
        self._publish()
        self.epoch_cache.clear()
        self.recovery_point = offset
        self.first_dirty_offset = offset
        self._unflushed_messages = 0

    def _after_truncation_locked(self) -> None:
        end = self._log_end_offset
        self.epoch_cache.truncate_from_end(end)
        self.recovery_point = min(self.recovery_point, end)
        self.first_dirty_offset = min(self.first_dirty_offset, end)
        if self._high_watermark is not None and self._high_watermark > end:
            self._high_watermark = end

    # -------------------------------------------------------------------------------------------- flush

    def flush(self, offset: int | None = None, *, sealed: LogSegment | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery point, offset)``; advance the recovery point.

        ``offset=None`` means the log end. The fsyncs run without the lock, so appends continue meanwhile.
        Only closed segments get their indexes synced (``sealed`` is the one a roll just closed): the
        active segment is always re-scanned after a crash, so its data is all that needs to be durable.
        The directory is synced only when segment files were created since the last time.
        """
        with self._lock:
            if self._closed:
                return
            end = self._log_end_offset
            target = end if offset is None else min(offset, end)
            if target <= self.recovery_point and sealed is None and not (target == end and self._unflushed_messages):
                return
            todo = self._segments_from_locked(self.recovery_point, target)
            if sealed is not None and sealed not in todo:
                todo.append(sealed)
            active = self._segments[-1]
            unflushed = self._unflushed_messages
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        for seg in todo:
            try:
                seg.flush(indexes=seg is not active)
            except OSError:
                if not seg.deleted:  # retention may close a segment under us; then there is nothing to sync
                    raise
        if dir_dirty:
            fsync_dir(self.dir)
        with self._lock:
            self.recovery_point = max(self.recovery_point, target)
            if target >= end:  # a partial (roll) flush must not restart the flush.ms clock
                self._last_flush_ms = self._now_ms()
                self._unflushed_messages = max(0, self._unflushed_messages - unflushed)

    def _segments_from_locked(self, start: int, end: int) -> list[LogSegment]:
        """Segments that may hold offsets in ``[start, end]`` (the last one included: it may be partial)."""
        segs = self._segments
        return [
            s
            for i, s in enumerate(segs)
            if s.base_offset <= end and (i == len(segs) - 1 or segs[i + 1].base_offset > start)
        ]

    def _flush_segments_locked(self, offset: int, sealed: LogSegment | None) -> None:
        todo = self._segments_from_locked(self.recovery_point, offset)
        for seg in todo if sealed is None or sealed in todo else [*todo, sealed]:
            seg.flush()
        fsync_dir(self.dir)
        self._dir_dirty = False
        self.recovery_point = max(self.recovery_point, min(offset, self._log_end_offset))

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """``flush.ms``: flush when the last flush is older than that and something is unflushed."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    def update_config(self, config: LogConfig) -> None:
        """Apply a topic config change; sizes and intervals take effect at the next roll or pass."""
        with self._lock:
            self.config = config

    # ---------------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Seal and fsync everything, then close the files: the next open need not recover this log."""
        with self._lock:
            if self._closed:
                self._close_locked()
                return
            self._segments[-1].seal()
            for seg in self._segments_from_locked(self.recovery_point, self._log_end_offset):
                seg.flush()
            fsync_dir(self.dir)
            self.recovery_point = self._log_end_offset
            self._close_locked()

    def close_handlers(self) -> None:
        """Close file descriptors without sealing or flushing (a failed disk, or a simulated crash)."""
        with self._lock:
            self._close_locked()

    def retire(self) -> None:
        """Refuse new operations but keep descriptors open for in-flight reads (topic deletion); the
        caller calls ``close_handlers`` after ``file.delete.delay.ms``."""
        with self._lock:
            self._closed = True

    def _close_locked(self) -> None:
        self._closed = True
        if self._files_closed:
            return
        for seg in self._segments:
            seg.close()
        for _, seg in self._pending_deletes:
            seg.delete_files()
        self._pending_deletes = []
        self._files_closed = True

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion)."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Log({self.dir.name}, [{self._log_start_offset}, {self._log_end_offset}))"


