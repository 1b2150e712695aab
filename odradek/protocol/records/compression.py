"""Record-block compression with Kafka's framing: the codec ids of a batch's attribute bits 0-2.

gzip is an RFC 1952 stream, lz4 is an LZ4 *frame* with independent 64 KiB blocks (what Kafka's
KafkaLZ4BlockOutputStream writes for magic >= 1), zstd is a zstd frame written in streaming mode (no content size,
as zstd-jni writes), so a Java client reads what we write and the other way round. Snappy needs xerial framing
and a snappy library that is not a dependency here, so it raises :class:`UnsupportedCompressionTypeError`.
"""

from __future__ import annotations

import gzip

import lz4.frame
import zstandard

from odradek.protocol.errors import CorruptRecordError, UnsupportedCompressionTypeError

__all__ = ["COMPRESSION_CODECS", "GZIP", "LZ4", "NONE", "SNAPPY", "ZSTD", "compress", "decompress"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_CODECS: dict[str, int] = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records block the way Kafka's Java producer frames it (see this module's docstring)."""
    if codec == ZSTD:
        cobj = zstandard.ZstdCompressor().compressobj()  # streaming: no content size, like zstd-jni
        return cobj.compress(data) + cobj.flush()
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == NONE:
        return data
    raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported here")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Inverse of :func:`compress`; accepts multi-frame zstd/lz4 and multi-member gzip as Kafka does."""
    try:
        if codec == ZSTD:
            return zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data)
        if codec == LZ4:
            return lz4.frame.decompress(data)
        if codec == GZIP:
            return gzip.decompress(data)
    # Each library has its own error types (zstandard.ZstdError, lz4's RuntimeError, gzip's OSError...).
    except Exception as exc:
        raise CorruptRecordError(f"cannot decompress a codec {codec} batch: {exc}") from exc
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported here")
