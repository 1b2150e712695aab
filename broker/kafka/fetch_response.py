"""A Fetch response (v4-v15) written straight from the answers, without building its kio entities.

Why: every replication round's answer is a Fetch response, and so is every consumer poll. Built as kio entities
(frozen dataclasses, one per partition and topic, each field set through ``object.__setattr__``) and then walked by
the generated writers (broker/kafka/writers.py), a one-partition answer cost about 40 µs of the leader's ~150 µs
round on our machines, three times that when the round runs cold. Here the same bytes come from a few precompiled
``struct`` packs per partition into one buffer.

The wire form is Kafka's FetchResponse.json, as kio's writer writes it (tests/unit/kafka/test_fetch_response.py
compares the two for every version and shape the broker answers): the v0 response header before v12 and the v1
header (with its empty tagged fields) from v12; ``error_code`` and ``session_id`` from v7; ``log_start_offset``
from v5; ``preferred_read_replica`` from v11; from v12 (flexible, KIP-482) compact strings, arrays and nullable
bytes, and tagged fields after each entity, of which a partition's ``current_leader`` (tag 1, KIP-951) is the only
one the broker sets, written only when it is not the default (-1, -1); from v13 topics by id (KIP-516), a null id
as the zero uuid.

Records: bytes are copied into the frame, or kept as pieces of their own from ``JOIN_BELOW_BYTES``; file ranges
(:class:`FileRecordsValue`) become the frame's file ranges, sent with ``sendfile``, and the frame owns them (see
broker/kafka/frames.py). The frame is byte for byte what ``codec.encode_response`` writes for the same answer with
the records as bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from broker.kafka.frames import FileRecordsValue, Piece, ResponseFrame
from odradek.protocol.records.varint import encode_unsigned_varint

__all__ = ["JOIN_BELOW_BYTES", "PartitionAnswer", "TopicAnswer", "encode", "throttle_position"]

# Bytes records at least this long stay pieces of their own in a ResponseFrame: joining them to their
# neighbours would copy them once more; shorter ones are joined.
JOIN_BELOW_BYTES = 64 * 1024

Records = bytes | bytearray | FileRecordsValue


class PartitionAnswer(NamedTuple):
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: Sequence[tuple[int, int]] | None  # (producer id, first offset); None: the field is null
    records: Records | None
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12+: KIP-951's tagged field


class TopicAnswer(NamedTuple):
    name: str  # up to v12
    topic_id: uuid.UUID | None  # from v13
    partitions: Sequence[PartitionAnswer]


_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I16_I32 = struct.Struct(">hi")
_SIZE_CORRELATION = struct.Struct(">ii")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and the log start offset
_ABORTED = struct.Struct(">qq")
_LEADER_TAG = bytes((1, 1, 9))  # one tagged field: tag 1 (current_leader), 9 bytes
_LEADER = struct.Struct(">ii")
_NULL_UUID = bytes(16)


def throttle_position(version: int) -> int:
    """Where ``throttle_time_ms`` (an int32, the body's first field) sits in a frame, size prefix included."""
    return 4 + 4 + (1 if version >= 12 else 0)


def encode(version: int, correlation_id: int, *, error_code: int, session_id: int, topics: Sequence[TopicAnswer],
           throttle_ms: int = 0) -> bytes | ResponseFrame:
    """The whole response frame (size prefix, header, body); a :class:`ResponseFrame` when a partition's records
    are file ranges, which it then owns (closed here if encoding fails). ``version``: 4 to 15."""
    flexible = version >= 12
    out: list[Any] = []  # bytes, and the records as they are (bytes or file ranges), in order
    files: list[FileRecordsValue] = []
    buf = bytearray(_SIZE_CORRELATION.pack(0, correlation_id))
    try:
        if flexible:
            buf.append(0)  # the header's tagged fields
        buf += _I32.pack(throttle_ms)
        if version >= 7:
            buf += _I16_I32.pack(error_code, session_id)
        _count(buf, len(topics), flexible)
        partition_struct = _PARTITION_V5 if version >= 5 else _PARTITION_V4
        for topic in topics:
            if version >= 13:
                buf += topic.topic_id.bytes if topic.topic_id is not None else _NULL_UUID
            else:
                name = topic.name.encode()
                if flexible:
                    buf += encode_unsigned_varint(len(name) + 1)
                else:
                    buf += _I16.pack(len(name))
                buf += name
            _count(buf, len(topic.partitions), flexible)
            for p in topic.partitions:
                if version >= 5:
                    buf += partition_struct.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                                                 p.log_start_offset)
                else:
                    buf += partition_struct.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
                aborted = p.aborted
                if aborted is None:
                    buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
                else:
                    _count(buf, len(aborted), flexible)
                    for producer_id, first_offset in aborted:
                        buf += _ABORTED.pack(producer_id, first_offset)
                        if flexible:
                            buf.append(0)
                if version >= 11:
                    buf += b"\xff\xff\xff\xff"  # preferred_read_replica: none
                records = p.records
                if records is None:
                    buf += b"\x00" if flexible else b"\xff\xff\xff\xff"
                else:
                    size = len(records)
                    if flexible:
                        buf += encode_unsigned_varint(size + 1)
                    else:
                        buf += _I32.pack(size)
                    if type(records) is FileRecordsValue:
                        files.append(records)  # the frame owns it, even empty
                    if size:
                        out.append(bytes(buf))
                        out.append(records)
                        buf = bytearray()
                if flexible:
                    leader = p.current_leader
                    if leader is None or leader == (-1, -1):
                        buf.append(0)
                    else:
                        buf += _LEADER_TAG
                        buf += _LEADER.pack(*leader)
                        buf.append(0)  # the nested entity's own tagged fields
            if flexible:
                buf.append(0)  # the topic's tagged fields
        if flexible:
            buf.append(0)  # the body's tagged fields (node_endpoints, v16, is not served)
    except BaseException:
        for p in _partitions(topics):
            if type(p.records) is FileRecordsValue:
                p.records.close()
        raise
    out.append(bytes(buf))
    size = sum(map(len, out))
    out[0] = _I32.pack(size - 4) + out[0][4:]  # type: ignore[index,operator]
    if not files:
        return b"".join(out)  # type: ignore[arg-type]
    return ResponseFrame(_joined(out), tuple(files))


def _joined(out: list[Any]) -> list[Piece]:
    """The frame's pieces: file ranges, bytes records from ``JOIN_BELOW_BYTES`` as they are, and every run of
    smaller bytes joined."""
    pieces: list[Piece] = []
    run: list[Any] = []
    for p in out:
        if type(p) is FileRecordsValue:
            if run:
                pieces.append(b"".join(run))
                run.clear()
            pieces.extend(p.records.slices)
        elif len(p) >= JOIN_BELOW_BYTES:
            if run:
                pieces.append(b"".join(run))
                run.clear()
            pieces.append(p)
        else:
            run.append(p)
    if run:
        pieces.append(b"".join(run))
    return pieces


def _partitions(topics: Sequence[TopicAnswer]) -> list[PartitionAnswer]:
    return [p for t in topics for p in t.partitions]


def _count(buf: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        buf += encode_unsigned_varint(n + 1)
    else:
        buf += _I32.pack(n)

