"""Kafka's v2 record batch (magic 2), byte for byte: the one codec of the broker, clients and replication.

Everything Odradek stores or sends is a concatenation of record batches in exactly this layout, so a batch a
producer encodes is the batch the leader writes to disk, the batch a follower copies and the batch a consumer
decodes. The broker never re-encodes records: it rewrites the two header fields that the CRC does not cover.

The codec is split by concern, and this package re-exports every public name, so callers keep writing
``from odradek.protocol import records as r`` or ``from odradek.protocol.records import encode_batch``:

* :mod:`~odradek.protocol.records.varint`: zig-zag varints, with the caches the encoder and decoder use;
* :mod:`~odradek.protocol.records.compression`: the codec ids and Kafka's gzip / lz4 / zstd framing;
* :mod:`~odradek.protocol.records.batch`: the 61-byte header layout (documented there), encoding, compaction's
  rebuild, the leader's in-place stamping and the validation that guards appends;
* :mod:`~odradek.protocol.records.decode`: the per-record decoder (the consumer's hot loop).

The modules import each other's names at import time, never through this package, so no hot loop pays for an
attribute lookup through a re-export.
"""

from __future__ import annotations

from odradek.protocol.records.batch import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    EPOCH_POS,
    HEADER,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    MIN_BATCH_LENGTH,
    MIN_RECORD_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    NewRecord,
    Record,
    RecordLike,
    check_counts,
    encode_batch,
    iter_batch_headers,
    last_batch_header,
    parse_header,
    rebuild_batch,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)
from odradek.protocol.records.compression import (
    COMPRESSION_CODECS,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    compress,
    decompress,
)
from odradek.protocol.records.decode import decode_batch, decode_headers, decode_records
from odradek.protocol.records.varint import decode_varint, encode_varint

__all__ = [
    "ATTRIBUTES_POS",
    "COMPRESSION_CODECS",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_POS",
    "CREATE_TIME",
    "DELETE_HORIZON_MASK",
    "EPOCH_POS",
    "GZIP",
    "HEADER",
    "HEADER_SIZE",
    "LENGTH_POS",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "LZ4",
    "MAGIC",
    "MAGIC_POS",
    "MAX_TIMESTAMP_POS",
    "MIN_BATCH_LENGTH",
    "MIN_RECORD_SIZE",
    "NONE",
    "NO_TIMESTAMP",
    "SNAPPY",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "ZSTD",
    "BatchHeader",
    "NewRecord",
    "Record",
    "RecordLike",
    "check_counts",
    "compress",
    "decode_batch",
    "decode_headers",
    "decode_records",
    "decode_varint",
    "decompress",
    "encode_batch",
    "encode_varint",
    "iter_batch_headers",
    "last_batch_header",
    "parse_header",
    "rebuild_batch",
    "set_base_offset",
    "set_log_append_time",
    "validate_batches",
]
