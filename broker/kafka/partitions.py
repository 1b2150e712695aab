"""The leader-only partition calls a Kafka client makes: append, read, list offsets.

Why here: a Kafka client finds the leader itself (from Metadata) and expects NOT_LEADER_OR_FOLLOWER, naming the
leader, from any other broker; nothing is forwarded. Each call goes to the service the HTTP binary paths use:
appends to ``ProduceService.append_batches`` (leader-only, with the binary path's validation, as Kafka's
LogValidator, before anything is written, so a refused batch leaves no trace), reads to ``FetchService.fetch``
(leader-only; read_committed filtered, its aborted transactions listed), offsets from the leader replica's
offsets (through the leader router) and the replica manager's time index. It holds no state.

Invariants:

* records move as bytes: batches are appended as the client encoded them and read back as stored;
* a request naming a leader epoch older than the leader's is FENCED_LEADER_EPOCH, a newer one
  UNKNOWN_LEADER_EPOCH (KIP-320), as Kafka answers consumers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.fetch.service import READ_COMMITTED, READ_UNCOMMITTED, FetchRequest
from odradek.protocol.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from odradek.protocol.records import decode_records

if TYPE_CHECKING:
    from broker.fetch.service import FetchService
    from broker.metadata.cache import MetadataCache
    from broker.produce.routing import LeaderRouter
    from broker.produce.service import ProduceService
    from broker.replication.replica_manager import ReplicaManager

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    log_append_time: int  # -1 unless the topic stamps LogAppendTime
    log_start_offset: int  # -1: not known


@dataclass(frozen=True, slots=True)
class PartitionRead:
    data: bytes  # whole batches; the first may begin before the offset asked for
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset) of dropped batches


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int


class LeaderPartitions:
    def __init__(self, router: LeaderRouter, replicas: ReplicaManager, cache: MetadataCache,
                 produce: ProduceService, fetches: FetchService) -> None:
        self._router = router
        self._replicas = replicas
        self._cache = cache
        self._produce = produce
        self._fetches = fetches

    async def append(self, topic: str, partition: int, data: bytes, acks: int, timeout_ms: int) -> Appended:
        """Validate and append ``data`` (the client's batches) as leader, waiting as ``acks`` asks.

        Raises the typed error of the first problem: NOT_LEADER_OR_FOLLOWER (naming the leader) when another
        broker leads, LEADER_NOT_AVAILABLE / UNKNOWN_TOPIC_OR_PARTITION once ``timeout_ms`` is spent waiting,
        a validation error before anything is written, or what the append and its acks wait raise."""
        result = await self._produce.append_batches(topic, partition, bytearray(data), acks, timeout_ms)
        # The produce service's answer has no log start offset (yet): -1 is Kafka's "unknown".
        return Appended(result.base_offset, -1 if result.log_append_time is None else result.log_append_time, -1)

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int, *,
                   committed: bool, current_leader_epoch: int = -1) -> PartitionRead:
        """A consumer's read, through the fetch service (leader-only): below the high watermark (``committed``:
        below the last stable offset, aborted transactions' batches dropped and listed, their markers kept),
        long-polling up to ``wait_ms`` when there is nothing yet. OFFSET_OUT_OF_RANGE outside the log."""
        info = self._cache.partitions.get((topic, partition))
        if info is not None:  # the epoch the client was told (Metadata) against the one in force, before waiting
            _check_epoch(info.leader_epoch, current_leader_epoch)
        answer = await self._fetches.fetch(FetchRequest(
            topic, partition, offset, max_bytes, max_wait_ms=wait_ms,
            isolation_level=READ_COMMITTED if committed else READ_UNCOMMITTED, min_bytes=1 if wait_ms > 0 else 0))
        try:
            _check_epoch(answer.leader_epoch, current_leader_epoch)
            records = answer.records
            data = bytes(records) if isinstance(records, bytes | bytearray) else b""  # not zero-copy: bytes
            return PartitionRead(data, answer.high_watermark, answer.last_stable_offset, answer.log_start_offset,
                                 tuple((a.producer_id, a.first_offset) for a in answer.aborted_transactions))
        finally:
            answer.close()

    async def list_offset(self, topic: str, partition: int, timestamp: int, *, committed: bool,
                          current_leader_epoch: int = -1) -> ListedOffset:
        """Kafka's ListOffsets on the leader: -2 the log start, -1 the high watermark (``committed``: the last
        stable offset), else the first offset whose timestamp is at or after ``timestamp`` with that record's
        timestamp, or offset and timestamp -1 when there is none."""
        part: Any = self._router.leader(topic, partition)  # its offsets only; NOT_LEADER_OR_FOLLOWER elsewhere
        epoch = part.leader_epoch
        _check_epoch(epoch, current_leader_epoch)
        if timestamp == EARLIEST:
            return ListedOffset(part.log_start_offset, -1, epoch)
        if timestamp == LATEST:
            return ListedOffset(part.last_stable_offset if committed else part.high_watermark, -1, epoch)
        found = await self._replicas.offset_for_timestamp(topic, partition, timestamp)
        if found is None or (committed and found >= part.last_stable_offset):
            return ListedOffset(-1, -1, epoch)
        # That record's own timestamp, as Kafka answers: from the batch holding it (one batch, as stored).
        answer = await self._fetches.fetch(FetchRequest(topic, partition, found, 1, min_bytes=0))
        try:
            data = answer.records if isinstance(answer.records, bytes | bytearray) else b""
            stamp = next((r.timestamp for r in decode_records(data) if r.offset >= found), timestamp)
        finally:
            answer.close()
        return ListedOffset(found, stamp, epoch)


def _check_epoch(current: int, requested: int) -> None:
    if requested < 0:
        return
    if requested < current:
        raise FencedLeaderEpochError(f"leader epoch {requested} is older than the leader's {current}",
                                     leader_epoch=current)
    if requested > current:
        raise UnknownLeaderEpochError(f"leader epoch {requested} is newer than the leader's {current}",
                                      leader_epoch=current)
