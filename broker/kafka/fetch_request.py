"""A replica's Fetch request (v15) written straight from the fetch session's round, without kio entities.

Why: a follower sends one every replication round. Built as kio entities (a frozen dataclass per partition, topic
and the replica state) and walked by the generated writers, a one-partition request cost about 22 µs of the
follower's round on our machines, most of it making the entities; here the same bytes come from a few
precompiled ``struct`` packs.

The wire form is Kafka's FetchRequest.json at v15, as kio's writer writes it (tests/unit/kafka/test_fetch_request.py
compares the two): the v2 request header (its client id an int16-length string, then empty tagged fields);
``max_wait_ms``, ``min_bytes``, ``max_bytes``, ``isolation_level`` (0: a follower reads to the log end),
``session_id``, ``session_epoch``; topics by id (KIP-516), each partition's current leader epoch, fetch offset,
last fetched epoch, log start offset and maximum bytes; the forgotten partitions by topic id; an empty
``rack_id``; and the tagged ``replica_state`` (tag 1, KIP-903: the replica id and broker epoch), written unless
both are -1, as kio leaves a default tagged field out.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import NamedTuple

from broker.kafka.codec import FETCH, WrittenRequest
from odradek.protocol.records.varint import encode_unsigned_varint

__all__ = ["FetchPartitionAsk", "ReplicaFetchRequest"]

VERSION = 15  # replica_state (KIP-903): the leader checks our broker epoch


class FetchPartitionAsk(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length (-1: null)
_FIXED = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation level, session id, session epoch
_PARTITION = struct.Struct(">iiqiqi")
_I32 = struct.Struct(">i")
_REPLICA_STATE = struct.Struct(">BBBiqB")  # 1 tagged field, tag 1, 13 bytes: id, epoch, no tagged fields


class ReplicaFetchRequest(WrittenRequest):
    """One round's Fetch v15 (``topics``: each topic id and its partitions' asks; ``forgotten``: each topic id and
    the partitions the session drops)."""

    __slots__ = ("forgotten", "max_bytes", "max_wait_ms", "min_bytes", "replica_epoch", "replica_id", "session_epoch",
                 "session_id", "topics")
    api_key = FETCH
    version = VERSION

    def __init__(self, *, replica_id: int, replica_epoch: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                 session_id: int, session_epoch: int,
                 topics: Sequence[tuple[uuid.UUID, Sequence[FetchPartitionAsk]]],
                 forgotten: Sequence[tuple[uuid.UUID, Sequence[int]]]) -> None:
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.session_id = session_id
        self.session_epoch = session_epoch
        self.topics = topics
        self.forgotten = forgotten

    def frame(self, correlation_id: int, client_id: str | None) -> bytes:
        """The whole request frame, size prefix included."""
        client = None if client_id is None else client_id.encode()
        buf = bytearray(4)
        buf += _HEADER.pack(FETCH, VERSION, correlation_id, -1 if client is None else len(client))
        if client:
            buf += client
        buf.append(0)  # the header's tagged fields
        buf += _FIXED.pack(self.max_wait_ms, self.min_bytes, self.max_bytes, 0, self.session_id, self.session_epoch)
        buf += encode_unsigned_varint(len(self.topics) + 1)
        pack = _PARTITION.pack
        for topic_id, asks in self.topics:
            buf += topic_id.bytes
            buf += encode_unsigned_varint(len(asks) + 1)
            for a in asks:
                buf += pack(a.partition, a.current_leader_epoch, a.fetch_offset, a.last_fetched_epoch,
                            a.log_start_offset, a.max_bytes)
                buf.append(0)
            buf.append(0)
        buf += encode_unsigned_varint(len(self.forgotten) + 1)
        for topic_id, partitions in self.forgotten:
            buf += topic_id.bytes
            buf += encode_unsigned_varint(len(partitions) + 1)
            for p in partitions:
                buf += _I32.pack(p)
            buf.append(0)
        buf.append(1)  # rack_id: the empty compact string
        if self.replica_id == -1 and self.replica_epoch == -1:
            buf.append(0)
        else:
            buf += _REPLICA_STATE.pack(1, 1, 13, self.replica_id, self.replica_epoch, 0)
        _I32.pack_into(buf, 0, len(buf) - 4)
        return bytes(buf)

