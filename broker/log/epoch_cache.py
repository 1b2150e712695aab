"""The leader-epoch cache: which offset each leader epoch started at (KIP-101, KIP-279).

Replication truncates a follower's divergent tail by asking the leader "where did my latest epoch end?"
(``end_offset_for``) instead of trusting the high watermark, which is what loses or forks data when leaders
change quickly. The cache is a short list of ``(epoch, start_offset)``, both strictly increasing, persisted
in ``<partition dir>/leader-epoch-checkpoint`` in Kafka's checkpoint format (``<epoch> <startOffset>`` per
line; see ``checkpoint.py``) and rewritten on every change. Changes are rare (one per leadership change),
so rewriting the whole file, fsync'd, is cheap.

The Log keeps it in step: leader appends and replicated batches assign epochs, truncation trims the end,
deleting records or segments trims the start, and recovery refills it from the batches it scans.

Concurrency: thread-safe. ``_lock`` guards the list only and is never held for I/O, so a query (a leader
answering ``end_offset_for`` on the event loop) never waits for a checkpoint's fsync; ``_file_lock`` orders the
rewrites, each of which writes the list as it is when its turn comes, so the last write holds the last state.
Lock order: Log lock -> ``_file_lock`` -> ``_lock``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from bisect import bisect_right
from pathlib import Path

from odradek.protocol.errors import KafkaStorageError

from .checkpoint import read_lines, write_lines

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    """Epoch -> start offset for one partition replica; see the module docstring."""

    def __init__(self, path: Path | None, entries: list[tuple[int, int]] | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._entries: list[tuple[int, int]] = list(entries or [])
        self._dirty = False  # a rewrite failed (a full disk): the file lags the list until one succeeds

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """Read the checkpoint; a corrupt file is dropped (recovery refills what the log's batches say)."""
        path = directory / FILE_NAME
        try:
            rows = read_lines(path, 2)
            entries = [(int(e), int(o)) for e, o in rows]
        except (KafkaStorageError, ValueError):
            log.warning("%s is corrupt; rebuilding the leader-epoch cache from the log", path)
            entries = []
        cache = cls(path)
        for epoch, start in entries:  # keep only a monotonic prefix, whatever the file says
            if not cache._entries or (epoch > cache._entries[-1][0] and start >= cache._entries[-1][1]):
                cache._entries.append((epoch, start))
        return cache

    # ------------------------------------------------------------------------------------------ queries

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose leader wrote ``offset`` (the last entry starting at or before it)."""
        with self._lock:
            i = bisect_right([s for _, s in self._entries], offset)
            return self._entries[i - 1][0] if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` answering OffsetsForLeaderEpoch, as Kafka 2.8 does (KIP-279).

        * unknown requested epoch or empty cache: ``(-1, -1)``;
        * the latest epoch: ``(latest, log_end_offset)``;
        * an older epoch: the start offset of the first *higher* epoch (where the requested epoch ended),
          paired with the largest epoch <= the requested one (which may be lower than requested when the
          requested epoch never had a leader append here); ``(requested, start of first entry)`` when the
          requested epoch precedes every entry;
        * an epoch above every entry: ``(-1, -1)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            latest = self._entries[-1][0]
            if requested_epoch == latest:
                return latest, log_end_offset
            epochs = [e for e, _ in self._entries]
            i = bisect_right(epochs, requested_epoch)  # entries[i] is the first epoch > requested
            if i == len(self._entries):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher_start = self._entries[i][1]
            if i == 0:
                return requested_epoch, higher_start
            return self._entries[i - 1][0], higher_start

    # ---------------------------------------------------------------------------------------- mutations

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        The latest epoch again is a no-op unless it moves the start earlier. A new entry first evicts entries
        it contradicts (an epoch >= it or a start offset >= its), which happens when a follower takes
        batches from a leader whose history diverged from ours after our tail was truncated.
        """
        if epoch < 0 or start_offset < 0:
            return False
        with self._lock:
            if self._entries and self._entries[-1][0] == epoch and start_offset >= self._entries[-1][1]:
                return False
            kept = [(e, s) for e, s in self._entries if e < epoch and s < start_offset]
            if len(kept) != len(self._entries):
                log.warning(
                    "leader epoch %d at offset %d evicts entries %s", epoch, start_offset, self._entries[len(kept) :]
                )
            kept.append((epoch, start_offset))
            self._entries = kept
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (the log was truncated to it)."""
        with self._lock:
            kept = [(e, s) for e, s in self._entries if s < end_offset]
            if len(kept) == len(self._entries):
                return
            self._entries = kept
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs that ended before ``start_offset``; the one spanning it now starts there."""
        with self._lock:
            before = [(e, s) for e, s in self._entries if s <= start_offset]
            if not before:
                return
            rest = self._entries[len(before) :]
            first = (before[-1][0], start_offset)
            if [first, *rest] == self._entries:
                return
            self._entries = [first, *rest]
        self._flush()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
        self._flush()

    def delete_file(self) -> None:
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)

    def _flush(self) -> None:
        """Rewrite the checkpoint with the current list (called without ``_lock``: see the module docstring)."""
        if self._path is None:
            return
        with self._file_lock:
            with self._lock:
                entries = self._entries  # replaced, never mutated in place: a stable snapshot
            try:
                write_lines(self._path, (f"{e} {s}" for e, s in entries))
            except OSError:
                self._dirty = True
                raise
            self._dirty = False

    def flush_if_dirty(self) -> None:
        """Rewrite the checkpoint if a rewrite failed since the last good one. The log calls it before writing
        records, so no record is on disk whose epoch the file does not hold (an ``OSError`` stops the write)."""
        if self._dirty:
            self._flush()
