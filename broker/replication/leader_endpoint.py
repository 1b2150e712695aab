"""What a follower's fetcher needs of a leader, as Kafka's ``LeaderEndPoint``: a multi-partition fetch in a
session, the end offsets of leader epochs (for truncation) and the leader's log bounds (after an
OFFSET_OUT_OF_RANGE).

Why an interface: the fetcher (broker/replication/leader_fetcher.py) holds the replication rules (what to ask,
when to truncate, how to append); how the request travels is a front door's business. The Kafka-protocol endpoint
(Fetch v15 with topic ids and ``ReplicaState``, OffsetsForLeaderEpoch, ListOffsets over one persistent
connection) lives with the Kafka codec; tests use an in-memory one. The replication package never imports a
front door.

Values are plain: partitions are ``(topic, partition)`` keys, records are the leader's v2 batches as bytes, errors
are the typed errors of ``odradek.protocol.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.replication.fetch_session_handler import SessionRequest
from odradek.protocol.errors import OdradekError

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a fetch answer: an error, or the records (possibly none) with the leader's high
    watermark and log start offset."""

    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    error: OdradekError | None = None


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """A fetch's answer: a top-level ``error_code`` (Kafka's; 0 for none: a session error, say), the session id it
    names, and the partitions it carries."""

    error_code: int
    session_id: int
    partitions: Mapping[TopicPartition, FetchedPartition]


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """The fetcher's request-level settings: Kafka's ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``,
    ``replica.fetch.response.max.bytes`` and ``replica.fetch.max.bytes`` (per partition)."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """The leader's answer for one partition of an OffsetsForLeaderEpoch: the largest epoch it knows that is at
    most the one asked, and where that epoch ended in its log (-1, -1 when it has no such epoch)."""

    leader_epoch: int = -1
    end_offset: int = -1
    error: OdradekError | None = None


class LeaderEndPoint(Protocol):
    """One leader, reached by one fetcher. Failures to reach it raise ``BrokerNotAvailableError``; errors the
    leader answers come back in the values."""

    leader_id: int

    async def fetch(self, request: SessionRequest, *, replica_id: int, broker_epoch: int,
                    settings: FetchSettings) -> FetchAnswer: ...

    async def epoch_end_offsets(self, asks: Mapping[TopicPartition, tuple[int, int]], *,
                                replica_id: int) -> dict[TopicPartition, EpochEnd]:
        """For each partition, (our view of the current leader epoch, the epoch whose end we want)."""
        ...

    async def log_bounds(self, partition: TopicPartition, *, replica_id: int) -> tuple[int, int]:
        """The leader's (log start offset, log end offset) of one partition."""
        ...

    async def close(self) -> None: ...
