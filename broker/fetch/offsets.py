"""Partition offsets as a service (Kafka's ListOffsets): the earliest offset, the latest under an isolation level,
and the first offset at or after a time, from the partition's leader wherever it is.

Why a service: the answer is the leader's (only the leader's high watermark and last stable offset are what
consumers may read), so a broker that does not lead the partition asks the leader over the inter-broker client;
front doors decode a :class:`ListOffsetsRequest` and render a :class:`PartitionOffsets`, never a partition.

Two verbs, because the two front-door contracts differ (as for fetches, broker/fetch/service.py):

* :meth:`OffsetsService.list_offsets` (the REST read) answers wherever the leader is: here, or forwarded once;
* :meth:`OffsetsService.leader_offset` is Kafka's ListOffsets: leader-only, NOT_LEADER_OR_FOLLOWER naming the
  leader elsewhere (a Kafka client goes there itself), the client's leader epoch checked (KIP-320), and the
  answer carries what Kafka's does: the offset, the found record's timestamp and the leader epoch that wrote it.

Invariants: the partition must exist in this broker's metadata (UNKNOWN_TOPIC / UNKNOWN_PARTITION at once,
never forwarded); a forward goes to the leader the replica manager names, whose answer (or typed error) comes back
as it is; the latest offset is the high watermark, or the last stable offset under read_committed (where
read_committed reads end), and no offset at or above it is ever answered for a time. A new leader whose high
watermark is still below the start of its epoch (the one it kept as a follower, possibly below what the previous
leader acknowledged) answers no latest offset, and no "none found" for a time, until its followers have fetched
from it: OFFSET_NOT_AVAILABLE, retriable (Kafka's Partition.fetchOffsetForTimestamp), never a low end offset that
would hide acknowledged records from whoever counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.fetch.service import check_leader_epoch
from broker.produce import forwarding as forward
from broker.replication.partition import UNKNOWN_OFFSET
from odradek.protocol.errors import (
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.records import decode_batch, iter_batch_headers
from transaction_coordinator.markers import READ_COMMITTED, READ_UNCOMMITTED, isolation_level

if TYPE_CHECKING:
    from broker.interbroker import InterBrokerClient
    from broker.replication.partition import Partition
    from broker.replication.replica_manager import ReplicaManager

__all__ = [
    "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "LeaderOffset", "ListOffsetsRequest", "OffsetsService",
    "PartitionOffsets",
]

EARLIEST_TIMESTAMP = -2  # Kafka's ListOffsets sentinels
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # KIP-734 (ListOffsets v7): the record with the largest timestamp
NO_OFFSET = -1  # Kafka's "none": no offset, no timestamp, no epoch


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """One partition's offsets; ``timestamp`` also looks a time up in the time index (Kafka's ListOffsets by
    time: the sentinels -2 and -1 included, looked up as the log looks them up)."""

    topic: str
    partition: int
    isolation_level: str = READ_UNCOMMITTED
    timestamp: int | None = None
    current_leader_epoch: int = -1  # the leader epoch the client was told (leader_offset only; -1: no check)
    # A follower asks (Kafka's ListOffsets with a replica id, leader_offset only): its latest is the leader's log
    # end offset, whatever the isolation level, since it copies the log up to there (Kafka's isolation "none").
    replica: bool = False

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


@dataclass(frozen=True, slots=True)
class LeaderOffset:
    """Kafka's ListOffsets answer for one partition, from its leader. ``offset`` -1: no record answers the time
    asked. ``timestamp``: the found record's own timestamp (-1 for the earliest and the latest offsets, as Kafka).
    ``leader_epoch``: the epoch of the leader that wrote ``offset`` (for the latest offset, the leader's current
    epoch; -1 when unknown), which a client validates its position with after a leader change."""

    offset: int
    timestamp: int
    leader_epoch: int


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
        require_caught_up(part)
        start, end = part.log_start_offset, part.last_stable_offset if committed else part.high_watermark
        if request.timestamp is None:
            return PartitionOffsets(start, end)
        found = await self._replicas.offset_for_timestamp(topic, partition, request.timestamp)
        return PartitionOffsets(start, end, request.timestamp, found)

    async def leader_offset(self, request: ListOffsetsRequest) -> LeaderOffset:
        """Kafka's ListOffsets on the leader, now (no wait, no forward): ``timestamp`` -2 the log start offset,
        -1 the latest (the high watermark, or the last stable offset under read_committed), -3 the first record
        with the largest timestamp, else the first record whose timestamp is at or after it; offsets at or above
        the latest are never answered (offset -1 instead). For a follower (``replica``) the latest is the log end
        offset.

        Raises:
            UnknownTopicError, UnknownPartitionError: not in this broker's metadata.
            NotLeaderOrFollowerError (naming the leader), LeaderNotAvailableError: this broker does not lead it.
            FencedLeaderEpochError, UnknownLeaderEpochError: ``current_leader_epoch`` is not the leader's.
            InvalidRequestError: no timestamp asked.
        """
        topic, partition, timestamp = request.topic, request.partition, request.timestamp
        if timestamp is None:
            raise InvalidRequestError("ListOffsets asks for a timestamp (or -1, -2, -3)")
        self._require_partition(topic, partition)
        part = self._replicas.leader_partition(topic, partition)
        check_leader_epoch(part.leader_epoch, request.current_leader_epoch)
        epochs = part.log.epoch_cache
        committed = request.isolation_level == READ_COMMITTED
        if request.replica:
            committed = False
            end = part.log_end_offset
        else:
            end = part.last_stable_offset if committed else part.high_watermark
        if timestamp == EARLIEST_TIMESTAMP:
            start = part.log_start_offset
            return LeaderOffset(start, NO_OFFSET, epochs.epoch_for_offset(start))
        if timestamp == LATEST_TIMESTAMP:
            if not request.replica:
                require_caught_up(part)
            return LeaderOffset(end, NO_OFFSET, part.leader_epoch)
        if timestamp == MAX_TIMESTAMP:
            found = await self._max_timestamp_record(part, end, committed)
        elif timestamp < 0:
            raise InvalidRequestError(f"ListOffsets timestamp {timestamp} is neither a time nor -1, -2 or -3")
        else:
            at = await self._replicas.offset_for_timestamp(topic, partition, timestamp)
            found = None if at is None or at >= end else await self._record(part, at, committed, lambda r: True)
        if found is None:
            if not request.replica:
                require_caught_up(part)  # the record may be there, above a watermark that lags
            return LeaderOffset(NO_OFFSET, NO_OFFSET, NO_OFFSET)
        offset, stamp = found
        return LeaderOffset(offset, stamp, epochs.epoch_for_offset(offset))

    async def _max_timestamp_record(self, part: Partition, end: int, committed: bool) -> tuple[int, int] | None:
        """The first record with the log's largest timestamp, below ``end``: each segment keeps its largest
        timestamp and the batch holding it (in memory), so this reads one batch."""
        best = None
        for seg in part.log.segments():
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None or best.offset_of_max_timestamp >= end:
            return None
        largest = best.max_timestamp
        return await self._record(part, best.offset_of_max_timestamp, committed, lambda r: r.timestamp == largest)

    @staticmethod
    async def _record(part: Partition, offset: int, committed: bool, wanted: Any) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``offset`` in the batch holding it that is
        ``wanted``; one batch is read and decoded (whatever its codec: a compressed batch's timestamps are inside).
        Control batches count, as in Kafka (a transaction's marker may well hold the largest timestamp)."""
        try:
            read = await part.read(offset, 1, 0, stable=committed)
        except OffsetOutOfRangeError:  # deleted meanwhile (retention, DeleteRecords)
            return None
        data = read.data
        for pos, header in iter_batch_headers(data):
            if header.next_offset <= offset:
                continue
            for record in decode_batch(data, pos):
                if record.offset >= offset and wanted(record):
                    return record.offset, record.timestamp
            return None
        return None

    def _require_partition(self, topic: str, partition: int) -> None:
        assignment = self._replicas.cache.topics.get(topic)
        if assignment is None:
            raise UnknownTopicError(f"topic '{topic}' does not exist")
        if partition not in assignment.partitions:
            raise UnknownPartitionError(f"partition {partition} of topic '{topic}' does not exist")


def require_caught_up(part: Partition) -> None:
    """Raise OFFSET_NOT_AVAILABLE while ``part``, a leader, has a high watermark below the start of its epoch
    (unknown while the epoch is being assigned: the sentinel is above any offset)."""
    if part.epoch_start_offset > part.high_watermark:
        start = "not known yet" if part.epoch_start_offset >= UNKNOWN_OFFSET else str(part.epoch_start_offset)
        raise OffsetNotAvailableError(
            f"{part.topic}-{part.partition}'s high watermark {part.high_watermark} lags the start of leader epoch "
            f"{part.leader_epoch} ({start}): its followers have not fetched from this new leader yet")
