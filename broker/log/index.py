"""The two sparse per-segment indexes. Both are caches of the ``.log`` file and can always be rebuilt from it.

``<base>.index`` (offset index): 8-byte entries ``relativeOffset:int32, position:int32``, big-endian.
An entry says "the batch whose *base* offset is ``base + relativeOffset`` starts at byte ``position``".
One is added when more than ``index.interval.bytes`` were appended since the previous one, so a lookup is
a binary search for the greatest entry <= the target, then a short walk over batch headers in the ``.log``.
(Kafka's entry names the batch's last offset; the base offset makes the walk start exactly at a batch that
can hold the target, and lets a load verify an entry by reading the header it points at.)

``<base>.timeindex``: 12-byte entries ``timestamp:int64, relativeOffset:int32``. An entry (T, O) is added
next to an offset-index entry, when the segment's max timestamp grew: T is the max timestamp so far and O
the base offset of the batch holding it. Every record before that batch's end has a timestamp <= T, so a
search for the first record at or after ``ts`` may skip everything up to the last entry with T < ts.
When a segment is sealed (rolled, closed) a final entry records its exact max timestamp, which is what
time-based retention reads after a restart.

Unlike Kafka, the files are not preallocated and memory-mapped: entries live in two ``array``s (the same
bytes as the file), and new entries are buffered and appended to the file in batches: at the latest when
the segment is flushed, sealed, truncated or closed, or when 64 KiB are pending. That keeps index I/O off
the append path (Kafka gets the same from its mmap). Losing buffered entries in a crash costs nothing: the
segments they belong to are past the recovery point, and recovery rebuilds their indexes.

Concurrency: owned by the segment; mutated only under the Log lock. Readers search without the lock: the
two arrays are published as one tuple (``_arrays``) and replaced, never shrunk in place, on truncation;
appends grow keys before values, so a reader that bounds its search by ``len(values)`` sees whole entries.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import ClassVar

PENDING_LIMIT = 64 * 1024


class _SparseIndex:
    """An append-only file of fixed-size (key, value) entries mirrored by two arrays."""

    entry: ClassVar[struct.Struct]
    key_code: ClassVar[str]
    value_code: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._arrays: tuple[array[int], array[int]] = (array(self.key_code), array(self.value_code))
        self._fd: int | None = None
        self._pending = bytearray()  # entries in the arrays but not yet in the file

    # ------------------------------------------------------------------------------------------- file io

    @classmethod
    def _read_entries(cls, path: Path) -> tuple[array[int], array[int]] | None:
        """Entries of an existing file, or None when missing or not a whole number of entries."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % cls.entry.size:
            return None
        keys, values = array(cls.key_code), array(cls.value_code)
        if cls.key_code == cls.value_code:  # offset index: one array of ints, de-interleaved
            flat = array(cls.key_code, data)
            if sys.byteorder == "little":
                flat.byteswap()
            keys, values = flat[0::2], flat[1::2]
        else:
            for key, value in cls.entry.iter_unpack(data):
                keys.append(key)
                values.append(value)
        return keys, values

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, data)

    def write_pending(self) -> None:
        if self._pending:
            self._write(bytes(self._pending))
            self._pending.clear()

    def rewrite(self, keys: array[int], values: array[int]) -> None:
        """Replace every entry (after a rebuild or truncation) in memory and on disk."""
        self._pending.clear()
        self._arrays = (keys, values)
        pack = self.entry.pack
        data = b"".join(pack(k, v) for k, v in zip(keys, values, strict=True))
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, data)

    def append_many(self, entries: list[tuple[int, int]]) -> None:
        keys, values = self._arrays
        pack = self.entry.pack
        for key, value in entries:
            keys.append(key)
            values.append(value)
        self._pending += b"".join(pack(k, v) for k, v in entries)
        if len(self._pending) >= PENDING_LIMIT:
            self.write_pending()

    def truncate_entries(self, count: int) -> None:
        keys, values = self._arrays
        if count >= len(values):
            return
        self.write_pending()
        self._arrays = (keys[:count], values[:count])
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.ftruncate(self._fd, count * self.entry.size)

    def flush(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        self.write_pending()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, path)
        self.path = path

    # ------------------------------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._arrays[1])

    @property
    def is_full(self) -> bool:
        return len(self._arrays[1]) >= self.max_entries

    def entries(self) -> list[tuple[int, int]]:
        keys, values = self._arrays
        return list(zip(keys[: len(values)], values, strict=True))


class OffsetIndex(_SparseIndex):
    entry = struct.Struct(">ii")
    key_code = "i"
    value_code = "i"

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int, log_size: int) -> OffsetIndex | None:
        """The index on disk, or None if it is missing or fails the sanity checks (then: rebuild).

        Checked: whole entries, offsets and positions strictly increasing and within the log file. Whether
        the last entry really points at its batch is checked by the segment, which can read the header.
        """
        loaded = cls._read_entries(path)
        if loaded is None:
            return None
        keys, values = loaded
        if keys and (keys[0] < 0 or values[0] < 0 or values[-1] >= log_size):
            return None
        if any(keys[i] >= keys[i + 1] or values[i] >= values[i + 1] for i in range(len(keys) - 1)):
            return None
        index = cls(path, base_offset, max_entries)
        index._arrays = (keys, values)
        return index

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(base offset, position)`` of the last indexed batch starting at or before ``offset``.

        ``(segment base, 0)`` when no entry qualifies: the walk then starts at the top of the file.
        """
        keys, values = self._arrays
        n = len(values)
        i = bisect_right(keys, offset - self.base_offset, 0, n)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + keys[i - 1], values[i - 1]

    def last(self) -> tuple[int, int] | None:
        keys, values = self._arrays
        n = len(values)
        return (self.base_offset + keys[n - 1], values[n - 1]) if n else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches starting at or after ``offset``."""
        keys, values = self._arrays
        self.truncate_entries(bisect_left(keys, offset - self.base_offset, 0, len(values)))


class TimeIndex(_SparseIndex):
    entry = struct.Struct(">qi")
    key_code = "q"
    value_code = "i"

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int) -> TimeIndex | None:
        loaded = cls._read_entries(path)
        if loaded is None:
            return None
        keys, values = loaded
        if values and values[0] < 0:
            return None
        if any(keys[i] >= keys[i + 1] or values[i] > values[i + 1] for i in range(len(keys) - 1)):
            return None
        index = cls(path, base_offset, max_entries)
        index._arrays = (keys, values)
        return index

    def last(self) -> tuple[int, int] | None:
        """``(timestamp, absolute offset)`` of the newest entry."""
        keys, values = self._arrays
        n = len(values)
        return (keys[n - 1], self.base_offset + values[n - 1]) if n else None

    def start_for(self, timestamp: int) -> int | None:
        """Offset from which to look for the first record with timestamp >= ``timestamp`` (None: from the top)."""
        keys, values = self._arrays
        n = len(values)
        i = bisect_left(keys, timestamp, 0, n)  # entries before i have T < timestamp
        return self.base_offset + values[i - 1] if i else None

    def maybe_append(self, timestamp: int, offset: int) -> list[tuple[int, int]]:
        """The entry to add if ``timestamp`` is newer than the last one (as a list, for ``append_many``)."""
        keys, values = self._arrays
        n = len(values)
        if n and timestamp <= keys[n - 1]:
            return []
        return [(timestamp, offset - self.base_offset)]

    def truncate_to(self, offset: int) -> None:
        """Drop entries naming batches at or after ``offset``."""
        values = self._arrays[1]
        rel = offset - self.base_offset
        n = len(values)
        while n and values[n - 1] >= rel:
            n -= 1
        self.truncate_entries(n)
