"""Zig-zag varints (protobuf's encoding, Kafka's record fields): an encoder with a cache and two decoders.

Record fields are nearly always tiny integers, so the encoder hands out precomputed bytes for every one- and
two-byte varint, and :data:`VARINT_TABLE` lets the record decoder (``decode.py``) read such a varint with one
list lookup instead of a call: that lookup is the per-record cost of every consumer. The general
:func:`decode_varint` stays the fallback for longer ones.
"""

from __future__ import annotations

from odradek.protocol.errors import CorruptRecordError

__all__ = ["NULL_VARINT", "VARINT_CACHE", "VARINT_TABLE", "decode_varint", "encode_unsigned_varint", "encode_varint"]


def _zigzag_bytes(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Zig-zag varints of |v| < 8192 (every one- and two-byte varint), precomputed: record fields are tiny ints.
VARINT_CACHE: list[bytes] = [_zigzag_bytes(z) for z in range(1 << 14)]
NULL_VARINT = VARINT_CACHE[1]  # varint(-1): a null key, value or header value


def encode_varint(value: int) -> bytes:
    """Zig-zag varint (or varlong: Python ints do not care) of a signed integer."""
    z = (value << 1) ^ (value >> 63)
    if z < 16384:
        return VARINT_CACHE[z]
    return _zigzag_bytes(z)


def encode_unsigned_varint(value: int) -> bytes:
    """Unsigned varint (Kafka's compact lengths and tags, KIP-482). ValueError for a negative ``value``."""
    if 0 <= value < 16384:
        return VARINT_CACHE[value]
    if value < 0:
        raise ValueError(f"an unsigned varint cannot hold {value}")
    return _zigzag_bytes(value)


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Return ``(value, next_pos)`` for the zig-zag varint at ``pos``."""
    shift = 0
    z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def _build_varint_table() -> list[int]:
    # Index: first byte | second byte << 8. Entry: (value << 2) | width for one- and two-byte zig-zag
    # varints (width 1 or 2; the arithmetic shift keeps negatives), 0 for "longer: take the slow path".
    table = [0] * 65536
    for b0 in range(0x80):
        entry = (((b0 >> 1) ^ -(b0 & 1)) << 2) | 1  # one object shared by the 256 slots
        for b1 in range(256):
            table[b0 | (b1 << 8)] = entry
    for b0 in range(0x80, 0x100):
        for b1 in range(0x80):
            z = (b0 & 0x7F) | (b1 << 7)
            table[b0 | (b1 << 8)] = (((z >> 1) ^ -(z & 1)) << 2) | 2
    return table


# Decoding side of the same observation: one lookup reads a one- or two-byte varint (see decode.py).
VARINT_TABLE = _build_varint_table()
