"""The state every part of a partition log shares: offsets, the segment list, the high watermark.

``Log`` (``log.py``) is assembled from this base and two concerns kept apart so that no module grows past a
screenful of concepts: reading (``reads.py``) and retention and compaction hooks (``retention.py``); recovery
at open is in ``recovery.py``. See ``Log`` for the concurrency contract, which covers all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from odradek.protocol.errors import KafkaStorageError

from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .segment import LogSegment

Scheduler = Callable[[Callable[[], None]], None]


class AppendResult(NamedTuple):  # NamedTuples: built on every append and read, and cheaper than dataclasses
    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    log_append_time: int | None  # the broker time stamped on the batches, when LogAppendTime is in force
    log_start_offset: int


class ReadResult(NamedTuple):
    data: bytes | bytearray  # whole batches; the first may begin before the requested offset
    next_offset: int  # offset after the last batch returned (the requested offset when data is empty)
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class SegmentsView:
    """An immutable snapshot of the segment list, replaced whenever the list changes."""

    bases: tuple[int, ...]
    segments: tuple[LogSegment, ...]



class LogBase:
    """Fields and small helpers shared by the log's parts (not used on its own)."""

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
        """Initialise it (from the replication checkpoint at startup, or in tests): replication moves it only
        through ``maybe_increment_high_watermark``."""
        self._high_watermark = value

    def maybe_increment_high_watermark(self, value: int) -> bool:
        """Move the high watermark forward to ``value``, never past the log end and never back (Kafka's
        ``Log.maybeIncrementHighWatermark``); returns whether it moved, so only then are waiters woken.

        Called on the event loop while a storage thread may be appending: the log end only grows under an
        append, so a value capped by a slightly stale log end is still safe. Only a truncation (a follower
        cutting its divergent tail) lowers the high watermark, to the new log end.
        """
        value = min(value, self._log_end_offset)
        if value > self.high_watermark:
            self._high_watermark = value
            return True
        return False

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

    def _roll_locked(self, base_offset: int, now_ms: int) -> LogSegment:
        raise NotImplementedError  # log.py: retention rolls an expired active segment before deleting it
