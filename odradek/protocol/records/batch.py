"""Kafka's v2 record batch (magic 2): its header layout, the encoder, compaction's rebuild, the leader's in-place
stamping and the validation that guards appends.

Record batch (all integers big-endian; 61-byte header)::

    offset  size  field                 notes
    0       8     baseOffset  int64     offset of the first record; assigned by the leader
    8       4     batchLength int32     bytes after this field: whole batch = batchLength + 12 (LOG_OVERHEAD)
    12      4     partitionLeaderEpoch  set by the leader; NOT covered by the CRC
    16      1     magic       int8      2
    17      4     crc         uint32    CRC-32C (Castagnoli) of bytes 21 .. end of batch
    21      2     attributes  int16     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                        bit 3 timestamp type (0 CreateTime, 1 LogAppendTime),
                                        bit 4 transactional, bit 5 control, bit 6 delete horizon
                                        set (KIP-534: then firstTimestamp is that horizon)
    23      4     lastOffsetDelta       last offset - baseOffset (kept by compaction even if records go)
    27      8     firstTimestamp        timestamp of the first record; record timestamps are deltas from it
    35      8     maxTimestamp          largest record timestamp, or the broker's clock for LogAppendTime
    43      8     producerId            -1 when not idempotent
    51      2     producerEpoch         -1
    53      4     baseSequence          -1
    57      4     recordsCount          number of records that follow
    61      ...   records               the whole block compressed when bits 0-2 say so

Record (varints are zig-zag, as in protobuf; "varlong" is the 64-bit flavour)::

    length varint | attributes int8 (0) | timestampDelta varlong | offsetDelta varint
    | keyLength varint (-1 = null) | key | valueLength varint (-1 = null: a tombstone) | value
    | headerCount varint | headerCount x [keyLength varint | key utf-8 | valueLength varint (-1=null) | value]

Why baseOffset and partitionLeaderEpoch sit outside the CRC: the leader stamps them on every append, and
keeping them out of the checksum lets it do so by rewriting 12 bytes in place instead of re-checksumming (or
worse, re-encoding) the batch. The flip side, inherited from Kafka: a flipped bit in those two fields is not
detectable by the CRC, only by offset sanity checks.

The hot paths (validate, offset assignment, fetch) only ever touch headers: one ``struct.unpack_from`` per
batch and one CRC over a memoryview; records are decoded in ``decode.py``, only when somebody wants them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import crc32c as _crc32c

from odradek.protocol.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from odradek.protocol.records.compression import NONE, compress
from odradek.protocol.records.varint import NULL_VARINT, VARINT_CACHE, encode_varint

__all__ = [
    "ATTRIBUTES_POS",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_POS",
    "CREATE_TIME",
    "DELETE_HORIZON_MASK",
    "EPOCH_POS",
    "HEADER",
    "HEADER_SIZE",
    "LENGTH_POS",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_POS",
    "MAX_TIMESTAMP_POS",
    "MIN_BATCH_LENGTH",
    "MIN_RECORD_SIZE",
    "NO_TIMESTAMP",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchHeader",
    "NewRecord",
    "Record",
    "RecordLike",
    "check_counts",
    "encode_batch",
    "iter_batch_headers",
    "last_batch_header",
    "parse_header",
    "rebuild_batch",
    "set_base_offset",
    "set_log_append_time",
    "validate_batches",
]

# ------------------------------------------------------------------------------------------------ constants

MAGIC = 2
CREATE_TIME, LOG_APPEND_TIME = 0, 1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: firstTimestamp holds the time after which tombstones may go

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what precedes the bytes batchLength counts
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # smallest legal batchLength (an empty batch)
LENGTH_POS, EPOCH_POS, MAGIC_POS, CRC_POS, ATTRIBUTES_POS = 8, 12, 16, 17, 21
MAX_TIMESTAMP_POS = 35
MIN_RECORD_SIZE = 7  # length, attributes, tsDelta, offsetDelta, keyLen, valueLen, headerCount: 1 byte each
NO_TIMESTAMP = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_crc = _crc32c.crc32c

# ---------------------------------------------------------------------------------------------------- types


class BatchHeader(NamedTuple):
    """The 61-byte batch header, parsed by one ``struct.unpack_from`` (field order is the wire order)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """Set by compaction on batches holding tombstones (KIP-534); None when absent."""
        return self.first_timestamp if self.attributes & DELETE_HORIZON_MASK else None


class Record(NamedTuple):
    """One decoded record. ``value is None`` is a tombstone; headers are ``(str, bytes | None)`` pairs."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class NewRecord(NamedTuple):
    """A record to encode; a plain ``(key, value, timestamp_ms, headers)`` tuple works as well.

    ``timestamp_ms=None`` takes the encoder's ``now_ms`` argument: the codec never reads the clock itself, so
    encoding is deterministic and testable.
    """

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()


RecordLike = tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes | None]]]


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller has made sure 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


# ------------------------------------------------------------------------------------------------- encoding


def _encode_records(
    records: Iterable[tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
) -> tuple[bytes, int]:
    """Encode ``(offset_delta, timestamp_delta, key, value, headers)`` records; returns (block, count)."""
    vi = encode_varint
    cache = VARINT_CACHE
    null = NULL_VARINT
    parts: list[bytes] = []
    add = parts.append
    count = 0
    for offset_delta, ts_delta, key, value, headers in records:
        fields = [b"\x00", vi(ts_delta), vi(offset_delta)]
        if key is None:
            fields.append(null)
        else:
            fields.append(vi(len(key)))
            fields.append(key)
        if value is None:
            fields.append(null)
        else:
            fields.append(vi(len(value)))
            fields.append(value)
        if headers:
            fields.append(vi(len(headers)))
            for h_key, h_value in headers:
                hk = h_key.encode()
                fields.append(vi(len(hk)))
                fields.append(hk)
                if h_value is None:
                    fields.append(null)
                else:
                    fields.append(vi(len(h_value)))
                    fields.append(h_value)
        else:
            fields.append(cache[0])
        body = b"".join(fields)
        add(vi(len(body)))
        add(body)
        count += 1
    return b"".join(parts), count


def _frame(
    block: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
) -> bytes:
    out = bytearray(HEADER_SIZE + len(block))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(block),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out[HEADER_SIZE:] = block
    _U32.pack_into(out, CRC_POS, _crc(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)


def encode_batch(
    records: Iterable[RecordLike | NewRecord],
    *,
    base_offset: int = 0,
    compression: int = NONE,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    now_ms: int | None = None,
) -> bytes:
    """Encode records as one v2 batch with offsets ``base_offset ..``: what a producer sends.

    Records are ``(key, value, timestamp_ms, headers)`` (or :class:`NewRecord`). A ``None`` timestamp takes
    ``now_ms``, which is then required: the codec does not read the clock itself. At least one record is
    needed (Kafka rejects empty producer batches; compaction's empty batches come from
    :func:`rebuild_batch`).
    """
    rows: list[tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]] = []
    first_ts = max_ts = None
    for i, rec in enumerate(records):
        key, value, ts, headers = rec
        if ts is None:
            if now_ms is None:
                raise InvalidRecordError("a record without a timestamp needs now_ms")
            ts = now_ms
        if first_ts is None:
            first_ts = max_ts = ts
        elif ts > max_ts:  # type: ignore[operator]
            max_ts = ts
        rows.append((i, ts - first_ts, key, value, headers or ()))
    if first_ts is None or max_ts is None:
        raise InvalidRecordError("a record batch needs at least one record")
    block, count = _encode_records(rows)
    if compression != NONE:
        block = compress(compression, block)
    attributes = compression | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
    attributes |= (TRANSACTIONAL_MASK if is_transactional else 0) | (CONTROL_MASK if is_control else 0)
    return _frame(
        block,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=count - 1,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=count,
    )


def rebuild_batch(header: BatchHeader, records: Sequence[Record], *, delete_horizon_ms: int | None = None) -> bytes:
    """Re-encode a batch keeping only ``records`` (a subset of its own, in order): compaction's output.

    Kept from the original: base offset and last offset delta (so offsets and the batch's span survive,
    leaving gaps), leader epoch, codec, attribute bits and producer fields. The max timestamp is recomputed
    from the kept records, except under LogAppendTime where the batch's max timestamp *is* every record's
    timestamp. With no records left this writes Kafka's empty batch (header only, count 0, no codec), which
    compaction uses to keep a segment's last offset on disk.

    ``delete_horizon_ms`` (or the original batch's, if it had one) is stored as in Kafka 3.x (KIP-534):
    attribute bit 6 set and firstTimestamp holding the horizon, record timestamp deltas taken from it, so
    every record keeps its timestamp and any v2 decoder still reads them right.
    """
    if not records:  # Kafka's writeEmptyHeader
        return _frame(
            b"",
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK),
            last_offset_delta=header.last_offset_delta,
            first_timestamp=header.max_timestamp,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            count=0,
        )
    base = header.base_offset
    log_append = header.timestamp_type == LOG_APPEND_TIME
    horizon = delete_horizon_ms if delete_horizon_ms is not None else header.delete_horizon_ms
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    if horizon is not None:
        first_ts = horizon
        attributes |= DELETE_HORIZON_MASK
    else:
        first_ts = header.first_timestamp if log_append else records[0].timestamp
    max_ts = header.max_timestamp if log_append else max(r.timestamp for r in records)
    block, count = _encode_records(
        (r.offset - base, 0 if log_append else r.timestamp - first_ts, r.key, r.value, r.headers) for r in records
    )
    codec = header.compression
    if codec != NONE:
        block = compress(codec, block)
    return _frame(
        block,
        base_offset=base,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        count=count,
    )


# ------------------------------------------------------------------------------------- in-place header edits


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Stamp a batch's base offset and leader epoch in place. Neither is under the CRC: no recompute."""
    _I64.pack_into(buf, pos, base_offset)
    _I32.pack_into(buf, pos + EPOCH_POS, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, now_ms: int) -> None:
    """Mark a batch LogAppendTime with the broker's clock; both fields are under the CRC, so recompute it."""
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_POS)
    _I16.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, now_ms)
    (length,) = _I32.unpack_from(buf, pos + LENGTH_POS)
    view = memoryview(buf)
    _U32.pack_into(buf, pos + CRC_POS, _crc(view[pos + ATTRIBUTES_POS : pos + LOG_OVERHEAD + length]))


# ----------------------------------------------------------------------------------------------- validation


def iter_batch_headers(buf: bytes | bytearray | memoryview, offset: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch from ``offset``; stop at a partial tail.

    No CRC check: this is for bytes already validated (the log's own files, a fetch response).
    """
    end = len(buf)
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    pos = offset
    while pos + HEADER_SIZE <= end:
        h = make(unpack(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < MIN_BATCH_LENGTH or pos + size > end:
            return
        yield pos, h
        pos += size


def last_batch_header(buf: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader | None:
    """The header ``iter_batch_headers`` would yield last, or None: on the way only each batch's length is read
    (a REST read answer's next offset needs the last batch alone, and a read holds dozens)."""
    end = len(buf)
    length_at = _I32.unpack_from
    pos, last = offset, -1
    while pos + HEADER_SIZE <= end:
        (length,) = length_at(buf, pos + LENGTH_POS)
        if length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > end:
            break
        last = pos
        pos += length + LOG_OVERHEAD
    return None if last < 0 else BatchHeader._make(HEADER.unpack_from(buf, last))


def validate_batches(
    buf: bytes | bytearray | memoryview,
    max_batch_bytes: int = 1 << 31,
    *,
    allow_empty: bool = True,
) -> list[BatchHeader]:
    """Check framing, magic, CRC and counts of every batch in ``buf``; return their headers in order.

    ``buf`` must be whole batches and nothing else: a partial tail is an error here, because this guards
    appends, and half a batch on disk is what crash recovery exists to remove. Sizes are checked before the
    CRC so an absurd length never makes us checksum (or read) past the buffer.

    Raises:
        CorruptRecordError: truncated or inconsistent length, wrong magic, wrong CRC.
        RecordTooLargeError: one batch is larger than ``max_batch_bytes``.
        InvalidRecordError: impossible record count or offset delta, or an empty batch when not allowed.
    """
    view = memoryview(buf)
    end = len(view)
    if end == 0:
        raise InvalidRecordError("no record batches")
    unpack = HEADER.unpack_from
    make = BatchHeader._make
    crc = _crc
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{end - pos} trailing bytes at position {pos} are not a whole batch header")
        h = make(unpack(view, pos))
        length = h.batch_length
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at position {pos} has length {length} < {MIN_BATCH_LENGTH}")
        size = length + LOG_OVERHEAD
        if size > max_batch_bytes:
            raise RecordTooLargeError(
                f"batch at position {pos} is {size} bytes, more than the limit {max_batch_bytes}",
                size=size,
                limit=max_batch_bytes,
            )
        if pos + size > end:
            raise CorruptRecordError(f"batch at position {pos} claims {size} bytes but only {end - pos} remain")
        if h.magic != MAGIC:
            raise CorruptRecordError(f"batch at position {pos} has magic {h.magic}; only magic 2 is supported")
        actual = crc(view[pos + ATTRIBUTES_POS : pos + size])
        if actual != h.crc:
            raise CorruptRecordError(
                f"batch at position {pos} failed its CRC: stored {h.crc:#010x}, computed {actual:#010x}"
            )
        check_counts(h, pos, allow_empty=allow_empty)
        headers.append(h)
        pos += size
    return headers


def check_counts(h: BatchHeader, pos: int = 0, *, allow_empty: bool = True) -> None:
    """Reject record counts and offset deltas that no encoder produces (cheap, header-only)."""
    count = h.record_count
    if h.last_offset_delta < 0 or count < 0 or count > h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch at position {pos} has {count} records but last offset delta {h.last_offset_delta}"
        )
    if count == 0 and not allow_empty:
        raise InvalidRecordError(f"batch at position {pos} has no records")
    if h.attributes & COMPRESSION_MASK == NONE and count * MIN_RECORD_SIZE > h.batch_length - MIN_BATCH_LENGTH:
        raise InvalidRecordError(
            f"batch at position {pos} claims {count} records in {h.batch_length - MIN_BATCH_LENGTH} bytes"
        )
