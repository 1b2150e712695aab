"""Opening a partition log after a crash: leftovers, interrupted compaction swaps, and the segment scan.

As Kafka's ``Log.loadSegments``: delete ``.cleaned``/``.deleted``/``.tmp`` leftovers, complete an interrupted
compaction swap (``.swap``), then load every segment. Segments at or after the recovery point are scanned
batch by batch (the leader-epoch cache is refilled from what they hold); at the first invalid batch the
segment is truncated and every later segment deleted, because offsets after a hole cannot be trusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from odradek.protocol.records import BatchHeader

from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .segment import LogSegment, file_name, iter_file_batches, parse_base_offset

log = logging.getLogger(__name__)


def remove_leftovers(directory: Path) -> None:
    for p in directory.iterdir():
        if p.name.endswith((".cleaned", ".deleted", ".tmp")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def complete_swaps(directory: Path) -> None:
    """Finish a compaction swap that a crash interrupted (the ``.swap`` file is complete and fsync'd).

    A ``.swap`` replaces every segment whose base offset lies in its offset range; the cleaner always
    ends its output with the group's last batch (an empty one if no record survived), so that range is
    exactly the range of the segments it was made from.
    """
    for swap in sorted(directory.glob("*.log.swap")):
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
        for p in directory.glob("*.log"):
            b = parse_base_offset(p.name)
            if b is not None and base <= b < max(end, base + 1):
                unlink_segment_files(directory, b)
        unlink_segment_files(directory, base)
        os.replace(swap, directory / file_name(base, ".log"))
        log.info("%s: completed an interrupted compaction swap of offsets [%d, %d)", directory, base, end)


def load_segments(path: Path, config: LogConfig, now_ms: int, *, recovery_point: int, clean_shutdown: bool,
                  epoch_cache: LeaderEpochCache) -> tuple[list[LogSegment], int]:
    """Open every segment, recovering those that may hold unflushed data; returns (segments, bytes cut)."""
    bases = sorted(b for b in (parse_base_offset(p.name) for p in path.glob("*.log")) if b is not None)
    segments: list[LogSegment] = []
    cut = 0

    def on_batch(h: BatchHeader) -> None:
        if h.partition_leader_epoch > epoch_cache.latest_epoch:
            epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    for i, base in enumerate(bases):
        if segments and base < segments[-1].next_offset:
            log.error("%s: segment %d overlaps its predecessor; dropping it and all later ones", path, base)
            for b in bases[i:]:
                unlink_segment_files(path, b)
            break
        is_last = i == len(bases) - 1
        needs_recovery = not clean_shutdown and (is_last or bases[i + 1] > recovery_point)
        seg, truncated = LogSegment.open(
            path, base, config, now_ms, recover=needs_recovery, on_batch=on_batch if needs_recovery else None
        )
        segments.append(seg)
        cut += truncated
        if truncated and not is_last:
            log.error("%s: corruption in segment %d; deleting the %d segments after it", path, base, len(bases) - i - 1)
            for b in bases[i + 1 :]:
                unlink_segment_files(path, b)
            break
    return segments, cut


def unlink_segment_files(directory: Path, base: int) -> None:
    for ext in (".log", ".index", ".timeindex"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / file_name(base, ext))
