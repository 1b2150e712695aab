"""Response frames as pieces: bytes, and file ranges the socket server sends with ``sendfile`` (Kafka's
``FileRecords`` in a ``FetchResponse``, written by its ``TransportLayer.transferFrom``).

Why: a Fetch answer is mostly record batches that are already in a segment file. Joining them into one ``bytes``
copies megabytes in the event loop (``pread`` into bytes on a storage thread, then the frame's join, then the
transport's buffer); naming them as file ranges lets the kernel copy them from the page cache to the socket.

How: a partition's ``records`` are a :class:`FileRecordsValue` instead of bytes, and the Fetch response's
writer (broker/kafka/fetch_response.py) puts the records' exact length prefix before them and their file ranges
into the frame's pieces; bytes pieces around them (small ones joined) and the ranges, written in order, are byte
for byte the answer with the records as bytes, and the frame's size prefix counts the ranges' lengths.

Ownership: each :class:`FileRecordsValue` owns its ranges' duplicated descriptors (see broker/log/reads.py: a
duplicate keeps a segment deleted meanwhile readable). They are closed exactly once: by ``close`` (the frame's,
once sent, or failed, or cancelled), or by a finalizer when the value is dropped unsent on a path nobody
foresaw (an exception between the read and the send). This module imports nothing of the broker: the socket
server (broker/kafka/network.py) stays free of the fetch service and the log, and file ranges are anything with
``fd``, ``position`` and ``length`` (the log's ``FileSlice``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Protocol

__all__ = ["FileRange", "FileRangeSet", "FileRecordsValue", "Piece", "ResponseFrame", "is_file_range"]


class FileRange(Protocol):
    """``length`` bytes at ``position`` of the open file ``fd`` (the log's ``FileSlice``)."""

    @property
    def fd(self) -> int: ...

    @property
    def position(self) -> int: ...

    @property
    def length(self) -> int: ...


class FileRangeSet(Protocol):
    """A read's batches as file ranges (the fetch service's ``FileRecords``): ``size`` is the ranges' total, and
    ``close`` closes their descriptors."""

    @property
    def slices(self) -> Sequence[FileRange]: ...

    @property
    def size(self) -> int: ...

    def close(self) -> None: ...


Piece = bytes | bytearray | memoryview | FileRange


def is_file_range(piece: Piece) -> bool:
    """Whether a frame piece is a file range (every other piece is bytes-like)."""
    return not isinstance(piece, bytes | bytearray | memoryview)


class FileRecordsValue:
    """A partition's ``records`` in a response body, as file ranges: what the writers put in the pieces list.

    ``len()`` is the ranges' byte total, so the writers' length prefix (int32 before v12, a compact varint from
    v12) is the one the bytes would have had. Owns the ranges' descriptors (see the module docstring)."""

    __slots__ = ("__weakref__", "_release", "records")

    def __init__(self, records: FileRangeSet) -> None:
        self.records = records
        self._release = weakref.finalize(self, records.close)

    def __len__(self) -> int:
        return self.records.size

    def __repr__(self) -> str:
        return f"FileRecordsValue({self.records.size} bytes in {len(self.records.slices)} file ranges)"

    def close(self) -> None:
        """Close the ranges' descriptors; idempotent (the finalizer runs at most once)."""
        self._release()

    def read(self) -> bytes:
        """The ranges' bytes (tests; and any reader that must have bytes). Short if a file shrank under it."""
        return b"".join(os.pread(s.fd, s.length, s.position) for s in self.records.slices)


class ResponseFrame:
    """A whole response frame, size prefix included, as ``pieces`` to write in order: bytes-like pieces and file
    ranges (``is_file_range``). ``len()`` is the frame's size on the wire (what a fetch quota counts).

    Invariants: the first piece is bytes starting with the size prefix, which equals ``len(frame) - 4``; the file
    ranges are those of ``records`` (the values the body held), which the frame owns until ``close``."""

    __slots__ = ("pieces", "records", "size")

    def __init__(self, pieces: list[Piece], records: tuple[FileRecordsValue, ...]) -> None:
        self.pieces = pieces
        self.records = records
        self.size = sum(p.length if is_file_range(p) else len(p) for p in pieces)  # type: ignore[union-attr,arg-type]

    def __len__(self) -> int:
        return self.size

    @property
    def file_bytes(self) -> int:
        """The bytes that go out as file ranges (with ``sendfile``)."""
        return sum(len(r) for r in self.records)

    def close(self) -> None:
        """Close every descriptor the frame owns; idempotent. After sending, or when the send failed."""
        for r in self.records:
            r.close()

    def to_bytes(self) -> bytes:
        """The frame as one ``bytes``, the file ranges read back (tests; the socket server never needs it)."""
        return b"".join(os.pread(p.fd, p.length, p.position) if is_file_range(p) else bytes(p)  # type: ignore
                        for p in self.pieces)
