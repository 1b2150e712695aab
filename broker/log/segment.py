"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex`` (see ``index.py``).

Files are named after the segment's base offset, zero-padded to 20 digits, so a directory listing sorts in
offset order and the base offset of an empty segment survives a restart. ``.log`` holds whole v2 record
batches back to back (the layout is in ``odradek.protocol.records``), exactly the bytes the producer sent except the
12 header bytes the leader stamps. Temporary suffixes: ``.cleaned`` (compaction output being written),
``.swap`` (complete compaction output about to replace segments), ``.deleted`` (waiting out
``file.delete.delay.ms`` so in-flight readers can finish).

Concurrency: **not thread-safe**; the owning ``Log`` serialises every mutation under its lock. Reads are
lock-free: a reader passes the segment size it saw under the lock (``limit``) and reads with ``os.pread``
on a file descriptor that stays open until the file is finally deleted, so appends beyond ``limit``, a
rename to ``.deleted`` or a compaction swap never show it half a batch or a closed descriptor.

The positions of the last batches this process appended (``_Tail``) stay in memory, so a read at the log end (a
follower's round, a consumer at the tail) finds its batches without reading headers from the file: one ``pread``
of the bytes to send, or none for a file range. Anything that is not a plain append at the end (truncation,
recovery, the roll that seals the segment) drops them, and reads fall back to the index and a header walk.

A read may be asked not to wait (``nowait``: the event loop reading, see ``LogReads.read_cached``): every
``pread`` of it is then ``preadv2(RWF_NOWAIT)``, which the kernel answers only from the page cache, and anything
short of the whole range (pages not cached, a filesystem that cannot tell, a file shorter than the reader saw)
raises ``WouldBlock`` for the caller to read the waiting way instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c as _crc

from odradek.protocol.errors import InvalidRecordError, KafkaStorageError
from odradek.protocol.records import (
    ATTRIBUTES_POS,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    check_counts,
    decode_batch,
)

from .config import LogConfig
from .index import OffsetIndex, TimeIndex

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
READ_CHUNK = 8192  # bytes per pread when walking headers


class WouldBlock(Exception):
    """A ``nowait`` read needed bytes the page cache does not hold (or could not tell): read the waiting way."""


def pread(fd: int, length: int, pos: int, nowait: bool = False) -> bytes | bytearray:
    """``length`` bytes at ``pos`` (fewer at the end of the file). ``nowait``: all of them from the page cache,
    or ``WouldBlock`` (never a short read, never a wait on the disk)."""
    if not nowait:
        return os.pread(fd, length, pos)
    buf = bytearray(length)
    try:
        got = os.preadv(fd, (buf,), pos, os.RWF_NOWAIT)
    except OSError as e:  # EAGAIN: not (all) cached; EOPNOTSUPP: tmpfs and the like; anything else: the slow path's
        raise WouldBlock from e
    if got != length:  # partly cached, or shorter than the snapshot said: the waiting read decides what it means
        raise WouldBlock
    return buf


def read_span(size: int, pos: int, max_bytes: int, limit: int) -> int:
    """The bytes a read from a batch of ``size`` bytes at ``pos`` looks at: that first batch whole whatever its
    size, else up to ``max_bytes``, never past ``limit``."""
    return min(max(max_bytes, size), limit - pos)
SCAN_CHUNK = 4 << 20  # bytes per pread when scanning whole segments (recovery, compaction)
_LAST_DELTA = struct.Struct(">qi11xi")  # baseOffset, batchLength, lastOffsetDelta
TAIL_BATCHES = 256  # the last appended batches whose positions a segment keeps (up to twice as many between trims)


class _Tail(NamedTuple):
    """Where the last batches appended by this process lie: batch k holds offsets ``bases[k]`` to ``nexts[k] - 1``
    and the bytes ``[ends[k - 1], ends[k])`` (``[first_pos, ends[0])`` for the first). Appends extend the lists in
    the order ``ends``, ``bases``, ``nexts``, so a reader on another thread that finds k below ``len(nexts)`` finds
    the other two filled; a trim builds a new tuple, so a reader's snapshot never shifts under it."""

    first_pos: int
    bases: list[int]
    nexts: list[int]
    ends: list[int]


def file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 and suffix ``.log``."""
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def iter_file_batches(fd: int, start: int, end: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """``(position, header, batch bytes)`` for each whole batch in ``[start, end)`` of a file.

    Stops silently at the first batch that is not whole (torn header, length past ``end``, absurd length):
    the caller compares the last position reached with ``end`` to tell a clean end from a damaged tail.
    Reads in large chunks; only a batch bigger than a chunk costs a read of its own.
    """
    pos = start
    buf = b""
    buf_start = start
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    while pos < end:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            buf = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
            buf_start, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        h = make(unpack(buf, rel))
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < MIN_BATCH_LENGTH or pos + size > end:
            return
        if rel + size > len(buf):
            buf = os.pread(fd, max(size, min(SCAN_CHUNK, end - pos)), pos)
            buf_start, rel = pos, 0
            if len(buf) < size:
                return
        yield pos, h, memoryview(buf)[rel : rel + size]
        pos += size


class LogSegment:
    """A ``.log`` file and its indexes; see the module docstring for the concurrency contract."""

    def __init__(self, directory: Path, base_offset: int, fd: int, config: LogConfig, now_ms: int) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self._fd = fd
        self.size = os.fstat(fd).st_size
        self.offset_index = OffsetIndex(self._path(".index"), base_offset, config.segment_index_bytes // 8)
        self.time_index = TimeIndex(self._path(".timeindex"), base_offset, config.segment_index_bytes // 12)
        self.index_interval_bytes = config.index_interval_bytes
        self.next_offset = base_offset  # last offset + 1; base_offset while empty
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # base offset of the batch holding max_timestamp
        self._bytes_since_index = 0
        self.rolling_base_ms: int | None = None  # wall clock of the first append: segment.ms counts from it
        self.deleted = False
        self._log_suffix = ".log"  # ".log.cleaned" / ".log.swap" while compaction output
        self._tail: _Tail | None = None  # positions of the last batches appended here (module docstring)

    def _path(self, suffix: str) -> Path:
        return self.dir / file_name(self.base_offset, suffix)

    @property
    def path(self) -> Path:
        return self._path(self._log_suffix)

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def __repr__(self) -> str:
        return f"LogSegment({self.base_offset}..{self.next_offset}, {self.size} bytes)"

    # ---------------------------------------------------------------------------------------- lifecycle

    @staticmethod
    def _open_log_file(path: Path, flags: int) -> int:
        """A ``.log`` file's descriptor, reads on it leaving the access time alone (``O_NOATIME``) where the
        process may ask that (it owns the file; else without). Why: with ``relatime`` (the usual mount) a read of
        a file written since its last access updates its atime, which dirties the inode and takes a journal handle
        in ext4, so the event loop's reads that never wait (``RWF_NOWAIT``) and its ``sendfile`` waited anyway,
        behind the journal commit of another partition's fsync (0.30 s in tests/integration/test_storage_isolation.py).
        The descriptor is shared by every read of the segment (and dup'ed for zero-copy answers)."""
        try:
            return os.open(path, flags | getattr(os, "O_NOATIME", 0), 0o644)
        except PermissionError:  # O_NOATIME on a file another user owns
            return os.open(path, flags, 0o644)

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """A new empty segment. A leftover file of the same name (a crashed roll) is overwritten."""
        for suffix in (".index", ".timeindex"):
            fd = os.open(directory / file_name(base_offset, suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
        fd = cls._open_log_file(directory / file_name(base_offset, ".log"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        return cls(directory, base_offset, fd, config, now_ms)

    @classmethod
    def create_cleaned(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """Compaction output: ``<base>.log.cleaned`` and ``.index.cleaned``/``.timeindex.cleaned``.

        Filled with ``append``, then ``mark_swap`` (fsync, rename to ``.log.swap``) and, under the Log
        lock, ``install_swap``. Files with a ``.cleaned`` suffix are deleted at startup: a crash before the
        rename to ``.swap`` simply loses the pass.
        """
        names = [file_name(base_offset, ext + ".cleaned") for ext in (".index", ".timeindex", ".log")]
        for name in names[:2]:
            os.close(os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        fd = cls._open_log_file(directory / names[2], os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        seg = cls(directory, base_offset, fd, config, now_ms)
        seg._log_suffix = ".log.cleaned"
        seg.offset_index.path = directory / names[0]
        seg.time_index.path = directory / names[1]
        return seg

    def mark_swap(self) -> None:
        """Make the compaction output durable and mark it complete (``.log.cleaned`` -> ``.log.swap``)."""
        self.seal()
        self.flush()
        swap = self._path(".log.swap")
        os.replace(self.path, swap)
        self._log_suffix = ".log.swap"

    def install_swap(self) -> None:
        """Give the output its final names; the segments it replaces must already be renamed away."""
        self.offset_index.rename(self._path(".index"))
        self.time_index.rename(self._path(".timeindex"))
        os.replace(self.path, self._path(".log"))
        self._log_suffix = ".log"

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        now_ms: int,
        *,
        recover: bool,
        on_batch: Callable[[BatchHeader], None] | None = None,
    ) -> tuple[LogSegment, int]:
        """Open an existing segment; returns it and the number of bytes recovery cut off its tail.

        With ``recover`` every batch is checked (length, magic, CRC, counts, offsets) and the indexes are
        rebuilt; otherwise the indexes are loaded and sanity-checked, and only the stretch after the last
        index entry is walked to find the next offset. A failed check there falls back to recovery.
        """
        path = directory / file_name(base_offset, ".log")
        fd = cls._open_log_file(path, os.O_RDWR)
        seg = cls(directory, base_offset, fd, config, now_ms)
        if not recover and not seg._load():
            log.warning("%s: index missing or inconsistent, rebuilding it", path)
            recover = True
        truncated = seg.recover(on_batch) if recover else 0
        if not seg.is_empty:
            first = seg._header_at(0)
            seg.rolling_base_ms = min(now_ms, first.max_timestamp) if first is not None else now_ms
        return seg, truncated

    def _load(self) -> bool:
        """Load the indexes and find the segment's end from the last index entry; False if anything is off."""
        offset_index = OffsetIndex.load(
            self.offset_index.path, self.base_offset, self.offset_index.max_entries, self.size
        )
        time_index = TimeIndex.load(self.time_index.path, self.base_offset, self.time_index.max_entries)
        if offset_index is None or time_index is None:
            return False
        if not len(offset_index) and self.size > max(self.index_interval_bytes, 1) * 4 + (1 << 20):
            return False  # an empty index over a big segment: rebuilding costs what using it would
        start_offset, start_pos = offset_index.lookup(2**63 - 1)
        if start_pos:
            h = self._header_at(start_pos)
            if h is None or h.base_offset != start_offset:
                return False
        self.offset_index, self.time_index = offset_index, time_index
        last_time = time_index.last()
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
        next_offset = start_offset if start_pos else self.base_offset
        pos = start_pos
        for pos_, h, _ in iter_file_batches(self._fd, start_pos, self.size):
            if h.magic != MAGIC or h.base_offset < next_offset:
                return False
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.base_offset
            next_offset = h.next_offset
            pos = pos_ + h.size
        if pos != self.size or (last_time is not None and last_time[1] >= next_offset):
            return False
        self.next_offset = next_offset
        self._bytes_since_index = self.size - start_pos
        return True

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch, rebuild both indexes, truncate a damaged tail; returns bytes removed.

        A batch is valid when it is whole, has magic 2, matches its CRC, has sane counts and offsets that
        increase and fit the index's int32 relative offsets. Everything from the first invalid batch on is
        cut: after a crash the tail can be torn, zero-filled or garbage, and nothing past it can be trusted.
        """
        self._tail = None
        base = self.base_offset
        interval = self.index_interval_bytes
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        max_ts, off_max, last_time_ts = -1, base, -1
        since = 0
        next_offset = base
        valid_end = 0
        for pos, h, view in iter_file_batches(self._fd, 0, self.size):
            if h.magic != MAGIC or _crc(view[ATTRIBUTES_POS:]) != h.crc:
                break
            try:
                check_counts(h, pos)
            except InvalidRecordError:
                break
            if h.base_offset < next_offset or h.base_offset + h.last_offset_delta - base > INT32_MAX:
                break
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, h.base_offset
            if since > interval:
                offset_entries.append((h.base_offset - base, pos))
                if max_ts > last_time_ts:
                    time_entries.append((max_ts, off_max - base))
                    last_time_ts = max_ts
                since = 0
            since += h.size
            if on_batch is not None:
                on_batch(h)
            next_offset = h.next_offset
            valid_end = pos + h.size
        truncated = self.size - valid_end
        if truncated:
            log.warning(
                "%s: truncating %d bytes of invalid data at position %d (next offset %d)",
                self.path,
                truncated,
                valid_end,
                next_offset,
            )
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        if max_ts > last_time_ts:
            time_entries.append((max_ts, off_max - base))
        self.offset_index.rewrite(*_split(OffsetIndex, offset_entries))
        self.time_index.rewrite(*_split(TimeIndex, time_entries))
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.next_offset = next_offset
        self._bytes_since_index = since
        return truncated

    # ------------------------------------------------------------------------------------------- writes

    def index_room(self) -> int:
        """How many more index entries fit: an append of n batches needs n in the worst case."""
        offsets, times = self.offset_index, self.time_index
        return min(offsets.max_entries - len(offsets._arrays[1]), times.max_entries - len(times._arrays[1]) - 1)

    def append(
        self,
        parts: list[bytes | bytearray | memoryview] | bytes | bytearray | memoryview,
        batches: list[tuple[int, int, int, int]],
        now_ms: int,
    ) -> None:
        """Write ``parts`` (whole batches, possibly in pieces) at the end with one ``pwritev``; add an
        index entry per ``index.interval.bytes``.

        ``batches`` describes each batch written: ``(base_offset, next_offset, max_timestamp, size)``.
        On a write error the file is cut back to its previous size and KafkaStorageError is raised.
        """
        start = self.size
        try:
            _write_all(self._fd, [parts] if not isinstance(parts, list) else parts, start)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise KafkaStorageError(f"write to {self.path} failed: {exc}") from exc
        base = self.base_offset
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        max_ts, off_max = self.max_timestamp, self.offset_of_max_timestamp
        last_time_ts: int | None = None  # looked up only when an index entry is due
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        pos = start
        next_offset = self.next_offset
        tail = self._tail = self._tail_at(start)
        ends, bases, nexts = tail.ends, tail.bases, tail.nexts
        for batch_base, batch_next, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, off_max = batch_max_ts, batch_base
            if since > interval:
                offset_entries.append((batch_base - base, pos))
                if last_time_ts is None:
                    last = self.time_index.last()
                    last_time_ts = last[0] if last is not None else -1
                if max_ts > last_time_ts:
                    time_entries.append((max_ts, off_max - base))
                    last_time_ts = max_ts
                since = 0
            since += size
            pos += size
            next_offset = batch_next
            ends.append(pos)
            bases.append(batch_base)
            nexts.append(batch_next)
        if offset_entries:
            self.offset_index.append_many(offset_entries)
        if time_entries:
            self.time_index.append_many(time_entries)
        self._bytes_since_index = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.next_offset = next_offset
        self.size = pos
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms

    def _tail_at(self, start: int) -> _Tail:
        """The tail to extend with batches written at ``start``: the current one when it ends there (cut to its
        last ``TAIL_BATCHES`` once it holds twice as many), else a new one."""
        tail = self._tail
        if tail is None or (tail.ends[-1] if tail.ends else tail.first_pos) != start:
            return _Tail(start, [], [], [])
        drop = len(tail.nexts) - TAIL_BATCHES
        if drop < TAIL_BATCHES:
            return tail
        return _Tail(tail.ends[drop - 1], tail.bases[drop:], tail.nexts[drop:], tail.ends[drop:])

    def seal(self) -> None:
        """Record the exact max timestamp in the time index: retention reads it after a restart. A sealed segment
        takes no more appends, so it keeps no tail."""
        self._tail = None
        if self.max_timestamp >= 0:
            entry = self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            if entry:
                self.time_index.append_many(entry)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset`` (a batch that straddles it goes whole).

        Returns the number of bytes removed. The segment's next offset becomes the base offset of the
        first removed batch (or stays where it was when nothing is removed).
        """
        self._tail = None
        found = self.find(offset, self.size)
        if found is None:
            return 0
        cut, h = found
        removed = self.size - cut
        os.ftruncate(self._fd, cut)
        self.size = cut
        self.offset_index.truncate_to(h.base_offset)
        self.time_index.truncate_to(h.base_offset)
        self.next_offset = h.base_offset if cut else self.base_offset
        last_time = self.time_index.last()
        self.max_timestamp, self.offset_of_max_timestamp = last_time if last_time else (-1, self.base_offset)
        last_entry = self.offset_index.last()
        walk_from = last_entry[1] if last_entry else 0
        for _pos, bh, _ in iter_file_batches(self._fd, walk_from, cut):
            if bh.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = bh.max_timestamp, bh.base_offset
            self.next_offset = bh.next_offset
        self._bytes_since_index = cut - walk_from
        if cut == 0:
            self.rolling_base_ms = None
        return removed

    def flush(self, *, indexes: bool = True) -> None:
        """fsync the data (fdatasync suffices: size changes count as data for it) and the indexes."""
        os.fdatasync(self._fd)
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_to_deleted(self) -> None:
        """Step one of deletion: rename (readers keep the open fd); ``delete_files`` later unlinks."""
        self.deleted = True
        os.replace(self.path, self.dir / file_name(self.base_offset, ".log.deleted"))
        self.offset_index.rename(self.dir / file_name(self.base_offset, ".index.deleted"))
        self.time_index.rename(self.dir / file_name(self.base_offset, ".timeindex.deleted"))

    def delete_files(self) -> None:
        """Close and unlink: the ``.deleted`` names after ``rename_to_deleted``, else the live ones."""
        self.close()
        suffix = ".deleted" if self.deleted else ""
        for ext in (".log", ".index", ".timeindex"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.dir / file_name(self.base_offset, ext + suffix))

    # -------------------------------------------------------------------------------------------- reads

    def _header_at(self, pos: int) -> BatchHeader | None:
        data = os.pread(self._fd, HEADER_SIZE, pos)
        return BatchHeader._make(HEADER.unpack_from(data)) if len(data) == HEADER_SIZE else None

    def walk(self, pos: int, limit: int, nowait: bool = False) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``pos`` up to ``limit``, reading headers only."""
        fd = self._fd
        unpack = HEADER.unpack_from
        make = BatchHeader._make
        while pos + HEADER_SIZE <= limit:
            chunk = pread(fd, min(READ_CHUNK, limit - pos), pos, nowait)
            rel = 0
            while rel + HEADER_SIZE <= len(chunk):
                h = make(unpack(chunk, rel))
                if h.batch_length < MIN_BATCH_LENGTH:
                    return
                yield pos + rel, h
                rel += h.batch_length + LOG_OVERHEAD
            if rel == 0 and len(chunk) < HEADER_SIZE:
                return
            pos += rel

    def find(self, offset: int, limit: int, nowait: bool = False) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch (below ``limit`` bytes) whose last offset >= ``offset``."""
        entry_offset, pos = self.offset_index.lookup(offset)
        for bpos, h in self.walk(pos, limit, nowait):
            if bpos == pos and pos and h.base_offset != entry_offset:
                log.warning("%s: index entry for offset %d is wrong; walking from the top", self.path, offset)
                return self._find_from(0, offset, limit, nowait)
            if h.base_offset + h.last_offset_delta >= offset:
                return (bpos, h) if bpos + h.size <= limit else None
        return None

    def _find_from(self, pos: int, offset: int, limit: int, nowait: bool) -> tuple[int, BatchHeader] | None:
        for bpos, h in self.walk(pos, limit, nowait):
            if h.base_offset + h.last_offset_delta >= offset:
                return (bpos, h) if bpos + h.size <= limit else None
        return None

    def tail_span(self, offset: int, max_bytes: int, max_offset: int | None,
                  limit: int) -> tuple[int, int, int] | None:
        """``(position, length, next offset)`` of the bytes ``read`` would return for ``offset``, from the positions
        of the last batches appended here, without reading the file; None when ``offset`` is not within them or
        its batch ends past ``limit``. The same cut as ``read``: the first batch whole, then batches while the
        total stays within ``max_bytes``, none starting at or after ``max_offset``, none past ``limit``."""
        tail = self._tail
        if tail is None:
            return None
        nexts = tail.nexts
        n = len(nexts)  # read first: ends and bases hold at least as many
        k = bisect_right(nexts, offset, 0, n)  # the first batch whose last offset is >= offset
        bases = tail.bases
        if k >= n or offset < bases[0]:
            return None
        ends = tail.ends
        pos = ends[k - 1] if k else tail.first_pos
        if ends[k] > limit:
            return None
        if max_offset is not None and bases[k] >= max_offset:
            return pos, 0, offset
        bound = pos + min(max_bytes, limit - pos)
        last = bisect_right(ends, bound, k + 1, n)
        if max_offset is not None:
            last = min(last, bisect_left(bases, max_offset, k + 1, n))
        return pos, ends[last - 1] - pos, nexts[last - 1]

    def pread_span(self, pos: int, length: int, offset: int, nowait: bool = False) -> bytes | bytearray | None:
        """The ``length`` bytes at ``pos`` that ``tail_span`` gave for ``offset``; None if the file no longer
        holds them there (a truncation since the caller's look: read again the long way)."""
        data = pread(self._fd, length, pos, nowait)
        if len(data) != length:
            return None
        base_offset, batch_length, last_delta = _LAST_DELTA.unpack_from(data)
        if base_offset + last_delta < offset or batch_length + LOG_OVERHEAD > length:
            return None
        return data

    def read(self, offset: int, max_bytes: int, max_offset: int | None, limit: int,
             nowait: bool = False) -> tuple[bytes | bytearray, int] | None:
        """``(whole batches from the one holding offset, next offset)``; None if nothing at/after it here.

        At least one whole batch (even beyond ``max_bytes``), never a batch starting at/after
        ``max_offset`` (then the bytes are empty), never bytes past ``limit`` (the size the caller saw
        under the Log lock). The walk over the bytes read is per batch, never per record.
        """
        span = self.tail_span(offset, max_bytes, max_offset, limit)
        if span is not None:
            pos, length, next_offset = span
            if not length:
                return b"", next_offset
            data = self.pread_span(pos, length, offset, nowait)
            if data is not None:
                return data, next_offset
        found = self.find(offset, limit, nowait)
        return None if found is None else self.read_found(found, offset, max_bytes, max_offset, limit, nowait)

    def read_found(self, found: tuple[int, BatchHeader], offset: int, max_bytes: int, max_offset: int | None,
                   limit: int, nowait: bool = False) -> tuple[bytes | bytearray, int]:
        """``read`` from the batch ``find`` returned: one ``pread``, cut at batch boundaries in memory."""
        pos, h = found
        if max_offset is not None and h.base_offset >= max_offset:
            return b"", offset
        data = pread(self._fd, read_span(h.size, pos, max_bytes, limit), pos, nowait)
        unpack = _LAST_DELTA.unpack_from
        cut = 0
        end = len(data)
        next_offset = offset
        while cut + HEADER_SIZE <= end:
            base_offset, length, last_delta = unpack(data, cut)
            nxt = cut + length + LOG_OVERHEAD
            if nxt > end or (cut and nxt > max_bytes) or (max_offset is not None and base_offset >= max_offset):
                break
            cut = nxt
            next_offset = base_offset + last_delta + 1
        return (data if cut == end else data[:cut]), next_offset

    def offset_for_timestamp(self, timestamp: int, min_offset: int, limit: int) -> int | None:
        """Offset of the first record at/after ``min_offset`` with a timestamp >= ``timestamp``."""
        start = self.time_index.start_for(timestamp)
        start = max(start if start is not None else self.base_offset, min_offset)
        found = self.find(start, limit)
        if found is None:
            return None
        pos = found[0]
        for bpos, h in self.walk(pos, limit):
            if bpos + h.size > limit:
                break
            if h.max_timestamp < timestamp or h.record_count == 0:
                continue
            data = os.pread(self._fd, h.size, bpos)
            for record in decode_batch(data, verify_crc=False):
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    return record.offset
        return None

    def read_file(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Whole batches with their bytes, for compaction and tests."""
        return iter_file_batches(self._fd, start, end)


_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


def _write_all(fd: int, parts: list[bytes | bytearray | memoryview], pos: int) -> None:
    """``pwritev`` every part at ``pos``: one system call unless there are more parts than IOV_MAX or the
    kernel writes short (then the rest follows, so the bytes land contiguously either way)."""
    for i in range(0, len(parts), _IOV_MAX):
        chunk = parts[i : i + _IOV_MAX]
        total = sum(len(p) for p in chunk)
        written = os.pwritev(fd, chunk, pos)
        if written < total:
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                n = os.pwrite(fd, rest, pos + written)
                written += n
                rest = rest[n:]
        pos += total


def _split(cls: type[OffsetIndex] | type[TimeIndex], entries: list[tuple[int, int]]) -> tuple[array[int], array[int]]:
    return array(cls.key_code, (k for k, _ in entries)), array(cls.value_code, (v for _, v in entries))
