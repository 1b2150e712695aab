"""Partition offsets as a service (Kafka's ListOffsets): the earliest offset, the latest under an isolation level,
and the first offset at or after a time, from the partition's leader wherever it is.

Why a service: the answer is the leader's (only the leader's high watermark and last stable offset are what
consumers may read), so a broker that does not lead the partition asks the leader over the inter-broker client;
front doors decode a :class:`ListOffsetsRequest` and render a :class:`PartitionOffsets`, never a partition.

Invariants: the partition must exist in this broker's metadata (UNKNOWN_TOPIC / UNKNOWN_PARTITION at once,
never forwarded); a forward goes to the leader the replica manager names, whose answer (or typed error) comes back
as it is; the latest offset is the high watermark, or the last stable offset under read_committed (where
read_committed reads end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.produce import forwarding as forward
from odradek.protocol.errors import NotLeaderOrFollowerError, UnknownPartitionError, UnknownTopicError
from transaction_coordinator.markers import READ_COMMITTED, READ_UNCOMMITTED, isolation_level

if TYPE_CHECKING:
    from broker.interbroker import InterBrokerClient
    from broker.replication.replica_manager import ReplicaManager

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "ListOffsetsRequest", "OffsetsService", "PartitionOffsets"]

EARLIEST_TIMESTAMP = -2  # Kafka's ListOffsets sentinels
LATEST_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """One partition's offsets; ``timestamp`` also looks a time up in the time index (Kafka's ListOffsets by
    time: the sentinels -2 and -1 included, looked up as the log looks them up)."""

    topic: str
    partition: int
    isolation_level: str = READ_UNCOMMITTED
    timestamp: int | None = None

    def __post_init__(self) -> None:
        isolation_level(self.isolation_level)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """The leader's offsets: ``log_start_offset`` (the earliest), ``end_offset`` (the latest a consumer of the
    request's isolation level may read up to) and, when a time was asked, the first ``offset`` whose timestamp is
    at or after ``timestamp`` below the high watermark (None when there is none)."""

    log_start_offset: int
    end_offset: int
    timestamp: int | None = None
    offset: int | None = None

    def offset_for(self, timestamp: int) -> int | None:
        """Kafka's ListOffsets answer for one timestamp: the earliest, the latest, or the time index's."""
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset
        if timestamp == LATEST_TIMESTAMP:
            return self.end_offset
        if timestamp != self.timestamp:
            raise ValueError(f"these offsets answer timestamp {self.timestamp}, not {timestamp}")
        return self.offset

    @classmethod
    def from_json(cls, body: Any) -> PartitionOffsets:
        """A leader's ``GET .../offsets`` answer (what the HTTP front door renders from an instance)."""
        return cls(int(body["beginning_offset"]), int(body["end_offset"]), body.get("timestamp"), body.get("offset"))


class OffsetsService:
    def __init__(self, replicas: ReplicaManager, interbroker: InterBrokerClient) -> None:
        self._replicas = replicas
        self._interbroker = interbroker

    async def list_offsets(self, request: ListOffsetsRequest) -> PartitionOffsets:
        """The partition's offsets, here when this broker leads it, else from its leader.

        Raises:
            UnknownTopicError, UnknownPartitionError: not in this broker's metadata.
            LeaderNotAvailableError: no leader, or one that is not registered (nowhere to ask).
            the leader's own error, when a forwarded request fails there.
        """
        topic, partition = request.topic, request.partition
        self._require_partition(topic, partition)
        committed = request.isolation_level == READ_COMMITTED
        try:
            part = self._replicas.leader_partition(topic, partition)
        except NotLeaderOrFollowerError as e:
            leader_url = e.details.get("leader_url")
            if not leader_url:
                raise
            body = await forward.list_offsets(self._interbroker, leader_url, topic, partition, committed=committed,
                                              timestamp=request.timestamp)
            return PartitionOffsets.from_json(body)
        start, end = part.log_start_offset, part.last_stable_offset if committed else part.high_watermark
        if request.timestamp is None:
            return PartitionOffsets(start, end)
        found = await self._replicas.offset_for_timestamp(topic, partition, request.timestamp)
        return PartitionOffsets(start, end, request.timestamp, found)

    def _require_partition(self, topic: str, partition: int) -> None:
        assignment = self._replicas.cache.topics.get(topic)
        if assignment is None:
            raise UnknownTopicError(f"topic '{topic}' does not exist")
        if partition not in assignment.partitions:
            raise UnknownPartitionError(f"partition {partition} of topic '{topic}' does not exist")
