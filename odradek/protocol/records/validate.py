"""Validation of a client's record batches before a leader appends them: what Kafka's ``LogValidator`` checks.

``validate_batches`` (batch.py) checks framing, magic, CRC and header counts: enough for bytes the broker wrote
itself. A producer's bytes need more, because whatever is appended is served to every consumer and follower
for the topic's retention: one poison batch makes every later read of the partition fail. So, per batch:

* no control batches from clients (only the transaction coordinator writes COMMIT/ABORT markers; Kafka answers
  a client's control batch with INVALID_RECORD), and transactional batches only where the caller allows them
  (the binary path, for producers with an id and a sequence: docs/transactions.md);
* a known codec (none, gzip, lz4, zstd; snappy is not supported here) whose data decompresses, to at most
  ``max_decompressed_bytes``: decompression is streamed and stops at the cap, so a 1 MiB batch that inflates
  to 1 GiB costs the cap, not the gigabyte;
* at most ``max_records`` records, and the records are exactly what the header says: every record parses,
  the count matches, offset deltas are 0, 1, 2, ... (Kafka's "inner offsets" check) and nothing trails;
* timestamps (CreateTime) within ``max_timestamp_diff_ms`` of the broker's clock
  (``message.timestamp.difference.max.ms``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import lz4.frame
import zstandard

from odradek.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from odradek.protocol.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    validate_batches,
)
from odradek.protocol.records.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from odradek.protocol.records.decode import _decode_block

__all__ = ["BlockCheck", "check_block_records", "decompress_capped", "validate_client_batches"]

_CHUNK = 256 * 1024
LONG_MAX = 2**63 - 1

BlockCheck = Callable[[bytes, int, int, bool, int, int], bool]
"""(records block, record count, first timestamp, log-append-time, now ms, max timestamp diff) -> certainly valid"""


def _too_large(codec: int, cap: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"a codec {codec} batch inflates to more than {cap} bytes (max.decompressed.batch.bytes)", limit=cap)


def _gzip(data: bytes, cap: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)  # one gzip member; Kafka's producers write one
        chunk = rest
        while True:
            out += d.decompress(chunk, cap + 1 - len(out))
            if len(out) > cap:
                raise _too_large(GZIP, cap)
            if d.eof or not d.unconsumed_tail:
                break
            chunk = d.unconsumed_tail
        if not d.eof:
            raise CorruptRecordError("a gzip batch ends before its gzip stream does")
        rest = d.unused_data
    return bytes(out)


def _lz4(data: bytes, cap: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        chunk = rest
        while True:
            out += d.decompress(chunk, max_length=cap + 1 - len(out))
            if len(out) > cap:
                raise _too_large(LZ4, cap)
            if d.eof or d.needs_input:
                break
            chunk = b""
        if not d.eof:
            raise CorruptRecordError("an lz4 batch ends before its lz4 frame does")
        rest = d.unused_data
    return bytes(out)


def _zstd(data: bytes, cap: int) -> bytes:
    out = bytearray()
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while True:
            chunk = reader.read(min(_CHUNK, cap + 1 - len(out)))
            if not chunk:
                break
            out += chunk
            if len(out) > cap:
                raise _too_large(ZSTD, cap)
    return bytes(out)


_DECOMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {GZIP: _gzip, LZ4: _lz4, ZSTD: _zstd}


def decompress_capped(codec: int, data: bytes, cap: int) -> bytes:
    """Decompress a records block, streaming, refusing (RecordTooLargeError) once it exceeds ``cap`` bytes."""
    if codec == NONE:
        return data
    if codec == SNAPPY:
        raise UnsupportedCompressionTypeError("snappy batches are not supported here; use gzip, lz4 or zstd")
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise InvalidRecordError(f"unknown compression codec {codec} (Kafka's are 0-4)")
    try:
        return fn(data, cap)
    except (RecordTooLargeError, CorruptRecordError):
        raise
    except Exception as exc:  # zlib.error, lz4's RuntimeError, zstandard.ZstdError...
        raise CorruptRecordError(f"cannot decompress a codec {codec} batch: {exc}") from None


def validate_client_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int,
    max_records: int,
    max_decompressed_bytes: int,
    max_timestamp_diff_ms: int = LONG_MAX,
    now_ms: int = 0,
    allow_transactional: bool = False,
    check_block: BlockCheck | None = None,
) -> list[BatchHeader]:
    """Check every batch of a producer's request as described in this module's docstring; the headers.
    ``allow_transactional``: the binary path accepts transactional batches (docs/transactions.md) when they
    carry a producer id and sequence; control batches are refused whatever it says. ``check_block``: a faster
    twin of ``check_block_records`` (speedups.py passes the compiled one) answering True only when the block
    certainly passes; on False the reference runs and names the error.

    Raises the typed error of the first problem found; nothing has been written when it raises.
    """
    headers = validate_batches(buf, max_batch_bytes, allow_empty=False)
    view = memoryview(buf)
    pos = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        if h.attributes & CONTROL_MASK:
            raise InvalidRecordError("control batches are written by the broker, not by clients")
        if h.attributes & TRANSACTIONAL_MASK:
            if not allow_transactional:
                raise UnsupportedForMessageFormatError("transactional batches are not accepted on this path")
            if h.producer_id < 0 or h.base_sequence < 0:
                raise InvalidRecordError("a transactional batch needs a producer id and a base sequence")
        if h.record_count > max_records:
            raise InvalidRecordError(
                f"a batch of {h.record_count} records; at most {max_records} are accepted (max.records.per.batch)")
        if h.record_count != h.last_offset_delta + 1:
            raise InvalidRecordError(
                f"a batch of {h.record_count} records has last offset delta {h.last_offset_delta}")
        codec = h.attributes & COMPRESSION_MASK
        data: bytes | memoryview
        if codec == NONE and check_block is not None:
            data = view[pos + HEADER_SIZE : pos + size]  # the compiled check reads it in place: no copy
        else:
            data = decompress_capped(codec, bytes(view[pos + HEADER_SIZE : pos + size]), max_decompressed_bytes)
        log_append_time = bool(h.attributes & TIMESTAMP_TYPE_MASK)
        if check_block is None or not check_block(data, h.record_count, h.first_timestamp, log_append_time, now_ms,
                                                  max_timestamp_diff_ms):
            check_block_records(bytes(data), h.record_count, h.first_timestamp, log_append_time, now_ms,
                                max_timestamp_diff_ms, pos)
        pos += size
    return headers


def check_block_records(data: bytes, count: int, first_ts: int, log_append_time: bool, now_ms: int,
                        max_timestamp_diff_ms: int, pos: int = 0) -> None:
    """The records of one batch (``data``: its decompressed records block, the batch at ``pos`` of the request)
    are exactly what its header says, with CreateTime timestamps near the broker's clock; else the typed error."""
    try:
        records = _decode_block(data, count, 0, first_ts, None)
    except (ValueError, IndexError) as exc:  # a header key that is not UTF-8, a truncated varint
        raise CorruptRecordError(f"a record of the batch at position {pos} does not parse: {exc}") from None
    for i, r in enumerate(records):
        if r.offset != i:
            raise InvalidRecordError(f"record {i} of the batch at position {pos} has offset delta {r.offset}; "
                                     "offset deltas must be 0, 1, 2, ...")
        if not log_append_time and abs(r.timestamp - now_ms) > max_timestamp_diff_ms and r.timestamp >= 0:
            raise InvalidTimestampError(
                f"record {i} has timestamp {r.timestamp}, more than {max_timestamp_diff_ms} ms from the broker's "
                f"time {now_ms} (message.timestamp.difference.max.ms)")
