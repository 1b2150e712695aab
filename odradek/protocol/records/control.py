"""Transaction markers: the control records that end a transaction in a partition (KIP-98).

A marker is a one-record batch with the control and transactional attribute bits set, carrying the producer
id and epoch of the transaction it ends. Its record key is ``version: int16 = 0, type: int16`` (0 = ABORT,
1 = COMMIT) and its value ``version: int16 = 0, coordinator_epoch: int32``, as Kafka's ``EndTransactionMarker``.
Only the transaction coordinator writes markers (clients' control batches are refused by validation).
"""

from __future__ import annotations

import struct

from odradek.protocol.records.batch import CONTROL_MASK, HEADER_SIZE, encode_batch, parse_header
from odradek.protocol.records.varint import decode_varint

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  now_ms: int) -> bytes:
    """One control batch ending ``producer_id``'s transaction (offsets are stamped by the leader's append)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value, now_ms, ())], producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=-1, is_transactional=True, is_control=True, now_ms=now_ms)


def marker_type(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """ABORT or COMMIT of the control batch at ``pos`` (uncompressed, as markers always are); -1 if unknown."""
    return read_marker(buf, pos)[0]


def read_marker(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(ABORT or COMMIT, coordinator epoch) of the control batch at ``pos``; -1 for a part it does not hold."""
    view = memoryview(buf)
    if not parse_header(view, pos).attributes & CONTROL_MASK:
        return -1, -1
    at = pos + HEADER_SIZE
    _length, at = decode_varint(view, at)
    at += 1  # record attributes
    _ts, at = decode_varint(view, at)
    _od, at = decode_varint(view, at)
    key_len, at = decode_varint(view, at)
    if key_len < _KEY.size:
        return -1, -1
    _version, kind = _KEY.unpack_from(view, at)
    kind = kind if kind in (ABORT, COMMIT) else -1
    at += key_len
    value_len, at = decode_varint(view, at)
    if value_len < _VALUE.size or at + _VALUE.size > len(view):
        return kind, -1
    return kind, _VALUE.unpack_from(view, at)[1]
