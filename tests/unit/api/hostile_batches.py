"""Hand-built record batches for the hostile-input tests: any header fields over any records block, with a
correct CRC, so that each test exercises the check it names and not the CRC check."""

from __future__ import annotations

import time
import zlib

import crc32c

from odradek.protocol.records import HEADER, encode_batch


def craft_batch(block: bytes, *, attributes: int = 0, count: int = 1, last_delta: int | None = None,
                first_ts: int | None = None) -> bytes:
    """A v2 batch with these header fields around ``block`` (the records, compressed or not)."""
    ts = int(time.time() * 1000) if first_ts is None else first_ts
    delta = count - 1 if last_delta is None else last_delta
    length = HEADER.size - 12 + len(block)
    header = bytearray(HEADER.pack(0, length, -1, 2, 0, attributes, delta, ts, ts, -1, -1, -1, count))
    body = bytes(header[21:]) + block
    crc = crc32c.crc32c(body)
    header[17:21] = crc.to_bytes(4, "big")
    return bytes(header) + block


def records_block(n: int = 1, value: bytes = b"v", ts: int | None = None) -> bytes:
    """The uncompressed records block of a valid batch of ``n`` records."""
    batch = encode_batch([(None, value, int(time.time() * 1000) if ts is None else ts, ())] * n)
    return batch[HEADER.size:]


def gzip_bomb(inflated: int) -> bytes:
    """A gzip stream of ``inflated`` zero bytes (about 1000x smaller), built in chunks."""
    c = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = bytes(1 << 20)
    out = [c.compress(chunk) for _ in range(inflated >> 20)]
    out.append(c.flush())
    return b"".join(out)
