"""Log compaction (``cleanup.policy=compact``): keep at least the latest record of every key.

The algorithm is Kafka's ``LogCleaner``:

1. **Choose.** The log splits into a *clean* part (log start .. ``first_dirty_offset``, compacted before)
   and a *dirty* part (``first_dirty_offset`` .. the first uncleanable offset). Uncleanable: the active
   segment, anything not entirely below the high watermark (it may still be truncated), and segments
   newer than ``min.compaction.lag.ms``. A log is cleaned when ``dirty / (clean + dirty)`` bytes exceeds
   ``min.cleanable.dirty.ratio``, or when its oldest dirty data is older than ``max.compaction.lag.ms``.
2. **Map.** Scan the dirty segments and map each key to the last offset that carries it. The map is
   bounded (``max_map_entries``); when full, this pass stops at a segment boundary and the next pass goes on.
3. **Copy.** Recopy every segment from the log start to the end of the mapped range, in groups no bigger
   than ``segment.bytes``, keeping a record unless the map holds a later offset for its key. Keyless
   records are dropped; control batches are kept untouched.
4. **Tombstones** (null values) survive ``delete.retention.ms`` after the first pass that keeps them, so
   consumers have that long to see a delete. As in Kafka 3.x (KIP-534), that pass stamps the batch with
   its *delete horizon* (now + ``delete.retention.ms``, attribute bit 6, in firstTimestamp); a later pass
   after the horizon drops them. Kafka 2.8 instead compared segment mtimes, but merging segments restarts
   that clock, and a tombstone in a merged segment could live for ever.
5. **Swap.** Output goes to ``<base>.log.cleaned``, is fsync'd, renamed ``.swap`` and swapped in under the
   Log lock (``Log.replace_segments``): readers see the old segments or the new one, never a half-written
   file, and the old files stay readable for ``file.delete.delay.ms``. A truncation during the pass makes
   the swap refuse (the log's ``generation`` changed) and the output is discarded.

Offsets never change: a kept batch keeps its base offset and last offset delta, so offsets have gaps. A batch
whose records all survive is copied byte for byte; a batch that loses some is re-encoded with its own codec.
Each group's last batch is always written, empty if need be, so the output's offset range, and hence what a
``.swap`` file replaces after a crash, is exactly the input's.

Concurrency: a pass runs on the cleaner thread without the Log lock, reading closed segments only; the lock is
taken by ``Log.snapshot`` and ``Log.replace_segments``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from odradek.protocol.errors import OdradekError
from odradek.protocol.records import BatchHeader, Record, decode_batch, parse_header, rebuild_batch

from .log import Log
from .segment import INT32_MAX, LogSegment, file_name

log = logging.getLogger(__name__)

DEFAULT_MAX_MAP_ENTRIES = 1_000_000
WRITE_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class CleanablePlan:
    """What one pass over one log would do."""

    log: Log
    segments: tuple[LogSegment, ...]  # every closed segment eligible for recopying, oldest first
    uppers: tuple[int, ...]  # each one's end: the next segment's base offset
    clean: tuple[LogSegment, ...]  # already-compacted prefix of ``segments``
    dirty: tuple[LogSegment, ...]  # the rest: to be mapped
    generation: int
    dirty_ratio: float
    must_clean: bool  # max.compaction.lag.ms exceeded


@dataclass(slots=True)
class CleanerStats:
    segments_read: int = 0
    segments_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    aborted: bool = False
    first_dirty_offset: int = 0


def plan(log_: Log, now_ms: int) -> CleanablePlan | None:
    """The clean/dirty split of ``log_`` right now, or None when it has nothing cleanable."""
    segments, first_dirty, hw, generation = log_.snapshot()
    cfg = log_.config
    lag_limit = now_ms - cfg.min_compaction_lag_ms
    eligible: list[LogSegment] = []
    uppers: list[int] = []
    for i, seg in enumerate(segments[:-1]):  # never the active segment
        upper = segments[i + 1].base_offset
        if upper > hw or (cfg.min_compaction_lag_ms > 0 and seg.max_timestamp > lag_limit):
            break
        eligible.append(seg)
        uppers.append(upper)
    clean = [s for s, upper in zip(eligible, uppers, strict=True) if upper <= first_dirty]
    dirty = eligible[len(clean) :]
    if not dirty:
        return None
    clean_bytes = sum(s.size for s in clean)
    dirty_bytes = sum(s.size for s in dirty)
    ratio = dirty_bytes / (clean_bytes + dirty_bytes) if dirty_bytes else 0.0
    oldest = min((s.max_timestamp for s in dirty if s.max_timestamp >= 0), default=now_ms)
    must = cfg.max_compaction_lag_ms < 2**63 - 1 and now_ms - oldest > cfg.max_compaction_lag_ms
    return CleanablePlan(log_, tuple(eligible), tuple(uppers), tuple(clean), tuple(dirty), generation, ratio, must)


def needs_cleaning(p: CleanablePlan) -> bool:
    return p.must_clean or p.dirty_ratio > p.log.config.min_cleanable_dirty_ratio


def _map_key(key: bytes) -> bytes:
    # Kafka's cleaner maps MD5(key): a fixed 16 bytes per key whatever the key size.
    return hashlib.md5(key, usedforsecurity=False).digest()


def build_offset_map(
    dirty: Sequence[LogSegment], uppers: Sequence[int], max_entries: int
) -> tuple[dict[bytes, int], int]:
    """Key digest -> last offset over ``dirty`` (whole segments); returns the map and the mapped end offset.

    ``uppers[i]`` is where ``dirty[i]`` ends. The first segment is always mapped whole, however many keys it
    holds, so every pass makes progress.
    """
    offset_map: dict[bytes, int] = {}
    end = dirty[0].base_offset
    for n, seg in enumerate(dirty):
        if n and len(offset_map) >= max_entries:
            break
        for _pos, h, view in seg.read_file(0, seg.size):
            if h.is_control or not h.record_count:
                continue
            for rec in decode_batch(view, verify_crc=False):
                if rec.key is not None:
                    offset_map[_map_key(rec.key)] = rec.offset
        end = uppers[n]
    return offset_map, end


def group_segments(
    segments: Sequence[LogSegment], uppers: Sequence[int], max_bytes: int, max_index_entries: int
) -> list[list[LogSegment]]:
    """Consecutive segments merged while size, index room and int32 relative offsets allow (Kafka's
    ``groupSegmentsBySize``), so compaction also stops small segments from piling up."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        entries = len(segments[i].offset_index)
        while i + 1 < len(segments):
            nxt = segments[i + 1]
            if (
                size + nxt.size > max_bytes
                or entries + len(nxt.offset_index) > max_index_entries
                or uppers[i + 1] - 1 - group[0].base_offset > INT32_MAX
            ):
                break
            group.append(nxt)
            size += nxt.size
            entries += len(nxt.offset_index)
            i += 1
        groups.append(group)
        i += 1
    return groups


def clean(
    log_: Log, now_ms: int, *, max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES, force: bool = False
) -> CleanerStats | None:
    """One compaction pass over ``log_`` if it needs one (or ``force``); None when nothing was done."""
    p = plan(log_, now_ms)
    if p is None or not (force or needs_cleaning(p)):
        return None
    stats = CleanerStats()
    try:
        offset_map, end = build_offset_map(p.dirty, p.uppers[len(p.clean) :], max_map_entries)
        todo = [s for s, u in zip(p.segments, p.uppers, strict=True) if u <= end]
        cfg = log_.config
        groups = group_segments(todo, p.uppers[: len(todo)], cfg.segment_bytes, cfg.segment_index_bytes // 8)
        for group in groups:
            if any(s.size for s in group) and not _clean_group(log_, group, offset_map, p.generation, now_ms, stats):
                stats.aborted = True
                break
    except (OdradekError, OSError):
        # Unreadable input is expected when a truncation or retention pulled segments from under the pass.
        if log_.generation == p.generation and not any(s.deleted for s in p.segments):
            raise
        stats.aborted = True
    if stats.aborted:
        log.info("%s: compaction pass aborted (the log changed under it)", log_.dir)
        return stats
    log_.mark_cleaned(end, p.generation)
    stats.first_dirty_offset = end
    log.info(
        "%s: compacted %d segment(s) into %d, %d -> %d bytes, %d records removed (%d tombstones)",
        log_.dir,
        stats.segments_read,
        stats.segments_written,
        stats.bytes_before,
        stats.bytes_after,
        stats.records_removed,
        stats.tombstones_removed,
    )
    return stats


def _clean_group(
    log_: Log,
    group: list[LogSegment],
    offset_map: dict[bytes, int],
    generation: int,
    now_ms: int,
    stats: CleanerStats,
) -> bool:
    out = LogSegment.create_cleaned(log_.dir, group[0].base_offset, log_.config, now_ms)
    try:
        pending: list[bytes] = []
        infos: list[tuple[int, int, int, int]] = []
        pending_size = 0
        last_seg = group[-1]
        for seg in group:
            stats.segments_read += 1
            stats.bytes_before += seg.size
            batches = list(seg.read_file(0, seg.size))
            for n, (_pos, h, view) in enumerate(batches):
                keep_empty = seg is last_seg and n == len(batches) - 1
                data = _filter_batch(h, view, offset_map, now_ms, log_.config.delete_retention_ms, keep_empty, stats)
                if data is None:
                    continue
                pending.append(data)
                written = parse_header(data)
                infos.append((h.base_offset, h.next_offset, written.max_timestamp, len(data)))
                pending_size += len(data)
                if pending_size >= WRITE_CHUNK:
                    out.append(list(pending), infos, now_ms)
                    pending, infos, pending_size = [], [], 0
        if pending:
            out.append(list(pending), infos, now_ms)
        stats.bytes_after += out.size
        out.mark_swap()
        if log_.replace_segments(group, out, generation):
            stats.segments_written += 1
            return True
    except BaseException:
        _discard(out)
        raise
    _discard(out)
    return False


def _filter_batch(
    h: BatchHeader,
    view: memoryview,
    offset_map: dict[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    keep_empty: bool,
    stats: CleanerStats,
) -> bytes | None:
    """The batch as it should be written: unchanged, re-encoded with fewer records, empty, or None."""
    if h.is_control:
        return bytes(view)
    if not h.record_count:
        return bytes(view) if keep_empty else None
    records = decode_batch(view, verify_crc=False)
    horizon = h.delete_horizon_ms
    kept: list[Record] = []
    tombstones = 0
    for rec in records:
        if rec.key is None:
            continue
        latest = offset_map.get(_map_key(rec.key))
        if latest is not None and rec.offset < latest:
            continue
        if rec.value is None:
            if horizon is not None and now_ms >= horizon:
                stats.tombstones_removed += 1
                continue
            tombstones += 1
        kept.append(rec)
    removed = len(records) - len(kept)
    stats.records_removed += removed
    new_horizon = now_ms + delete_retention_ms if tombstones and horizon is None else None
    if not removed and new_horizon is None:
        return bytes(view)
    if not kept and not keep_empty:
        return None
    return rebuild_batch(h, kept, delete_horizon_ms=new_horizon)


def _discard(seg: LogSegment) -> None:
    seg.close()
    for suffix in (".log.cleaned", ".log.swap", ".index.cleaned", ".timeindex.cleaned"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.dir / file_name(seg.base_offset, suffix))
