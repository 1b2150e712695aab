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

import bisect
import contextlib
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from odradek.protocol.errors import InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError
from odradek.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)

from .checkpoint import fsync_dir
from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .segment import INT32_MAX, LogSegment, file_name, iter_file_batches, parse_base_offset

log = logging.getLogger(__name__)

Scheduler = Callable[[Callable[[], None]], None]
_STAMP = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: what a leader append rewrites


class AppendResult(NamedTuple):  # NamedTuples: built on every append and read, and cheaper than dataclasses
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int | None  # the broker time stamped on the batches, when LogAppendTime is in force
    log_start_offset: int


class ReadResult(NamedTuple):
    data: bytes  # whole batches; the first may begin before the requested offset
    next_offset: int  # offset after the last batch returned (the requested offset when data is empty)
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class SegmentsView:
    """An immutable snapshot of the segment list, replaced whenever the list changes."""

    bases: tuple[int, ...]
    segments: tuple[LogSegment, ...]


class Log:
    """One partition replica's log.

    Concurrency contract:

    * ``append`` / ``append_replicated`` are called by one thread at a time per log (the broker's event
      loop); ``read``, ``offset_for_timestamp`` and the properties may be called from any thread at any
      time, as may the background maintenance (``delete_old_segments``, ``flush``, the cleaner).
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

    def __init__(
        self, directory: Path, config: LogConfig, now: Callable[[], float], scheduler: Scheduler | None
    ) -> None:
        self.dir = directory
        self.config = config
        self._now = now
        self._scheduler = scheduler
        self._lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._view = SegmentsView((), ())
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark: int | None = None
        self.recovery_point = 0
        self.first_dirty_offset = 0  # compaction: where the not-yet-cleaned part starts
        self.generation = 0  # bumped by truncation: a compaction pass started before it must not swap
        self._unflushed_messages = 0
        self._last_flush_ms = 0
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False  # no new operations (closed, or retired by topic deletion)
        self._files_closed = False
        self._dir_dirty = False  # segment files created since the directory was last fsync'd
        self.epoch_cache = LeaderEpochCache(None)
        self.recovered_bytes_truncated = 0  # what the last open cut off (for logs and tests)

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
        self._remove_leftovers()
        self._complete_swaps(now_ms)
        bases = sorted(b for b in (parse_base_offset(p.name) for p in path.glob("*.log")) if b is not None)
        segments: list[LogSegment] = []
        epoch_cache = self.epoch_cache

        def on_batch(h: BatchHeader) -> None:
            if h.partition_leader_epoch > epoch_cache.latest_epoch:
                epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

        for i, base in enumerate(bases):
            if segments and base < segments[-1].next_offset:
                log.error("%s: segment %d overlaps its predecessor; dropping it and all later ones", path, base)
                for b in bases[i:]:
                    _unlink_segment_files(path, b)
                break
            is_last = i == len(bases) - 1
            needs_recovery = not clean_shutdown and (is_last or bases[i + 1] > recovery_point)
            seg, truncated = LogSegment.open(
                path, base, self.config, now_ms, recover=needs_recovery, on_batch=on_batch if needs_recovery else None
            )
            segments.append(seg)
            self.recovered_bytes_truncated += truncated
            if truncated and not is_last:
                log.error(
                    "%s: corruption in segment %d; deleting the %d segments after it", path, base, len(bases) - i - 1
                )
                for b in bases[i + 1 :]:
                    _unlink_segment_files(path, b)
                break
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

    def _remove_leftovers(self) -> None:
        for p in self.dir.iterdir():
            if p.name.endswith((".cleaned", ".deleted", ".tmp")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()

    def _complete_swaps(self, now_ms: int) -> None:
        """Finish a compaction swap that a crash interrupted (the ``.swap`` file is complete and fsync'd).

        A ``.swap`` replaces every segment whose base offset lies in its offset range; the cleaner always
        ends its output with the group's last batch (an empty one if no record survived), so that range is
        exactly the range of the segments it was made from.
        """
        for swap in sorted(self.dir.glob("*.log.swap")):
            base = parse_base_offset(swap.name)
            if base is None:
                continue
            fd = os.open(swap, os.O_RDONLY)
            try:
                end = base
                for _pos, h, _ in iter_file_batches(fd, 0, os.fstat(fd).st_size):
                    end = h.next_offset
            finally:
                os.close(fd)
            for p in self.dir.glob("*.log"):
                b = parse_base_offset(p.name)
                if b is not None and base <= b < max(end, base + 1):
                    _unlink_segment_files(self.dir, b)
            _unlink_segment_files(self.dir, base)
            os.replace(swap, self.dir / file_name(base, ".log"))
            log.info("%s: completed an interrupted compaction swap of offsets [%d, %d)", self.dir, base, end)

    # ------------------------------------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        """Set by the caller (the partition); retention and compaction never touch offsets at or above it."""
        hw = self._high_watermark
        return self._log_end_offset if hw is None else min(hw, self._log_end_offset)

    @high_watermark.setter
    def high_watermark(self, value: int | None) -> None:
        self._high_watermark = value

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    def segments(self) -> tuple[LogSegment, ...]:
        return self._view.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._view.segments[-1]

    def _now_ms(self) -> int:
        return int(self._now() * 1000)

    def _publish(self) -> None:
        self._view = SegmentsView(tuple(s.base_offset for s in self._segments), tuple(self._segments))

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    # ------------------------------------------------------------------------------------------ appends

    def append(self, batches: bytes | bytearray | memoryview, *, leader_epoch: int) -> AppendResult:
        """Leader path: validate, then assign offsets from the log end by rewriting each batch header.

        Only headers are parsed (CRC over a memoryview, no record decoding) except on compacted topics,
        where, as in Kafka, every record must have a key. The records are not even copied: each batch goes
        to disk as a stamped copy of its first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch)
        followed by a view of the rest, all in one ``pwritev``. Under LogAppendTime the header's max
        timestamp and CRC change too, so those batches are copied and re-checksummed.

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
        with self._lock:
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
            self._append_locked(parts, infos, pos, now_ms)
            if leader_epoch > self.epoch_cache.latest_epoch:
                self.epoch_cache.assign(leader_epoch, first)
            result = AppendResult(first, offset - 1, count, max_ts, log_append_time, self._log_start_offset)
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
        headers = validate_batches(batches, self.config.max_message_bytes, allow_empty=True)
        now_ms = self._now_ms()
        with self._lock:
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
            self._append_locked([memoryview(batches)], infos, len(memoryview(batches)), now_ms)
            for h in headers:
                if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            result = AppendResult(
                headers[0].base_offset,
                expected - 1,
                sum(h.record_count for h in headers),
                max(h.max_timestamp for h in headers),
                None,
                self._log_start_offset,
            )
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return result

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

    # -------------------------------------------------------------------------------------------- reads

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


def _unlink_segment_files(directory: Path, base: int) -> None:
    for ext in (".log", ".index", ".timeindex"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / file_name(base, ext))
