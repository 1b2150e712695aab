"""Fetch as a service (Kafka's ``ReplicaManager.fetchMessages``): which replica serves a read, how long it waits,
and what the answer carries. A front door decodes a :class:`FetchRequest` and renders a :class:`PartitionData`;
nothing here knows HTTP, so the binary wire protocol's front door can call the same methods.

Two entry points, because the two front-door contracts differ:

* :meth:`FetchService.fetch` is leader-only, as Kafka's Fetch is: it waits (within ``max_wait_ms``) while this
  broker is becoming the leader or no leader is known, and answers NOT_LEADER_OR_FOLLOWER naming the leader
  when another broker leads, so the client goes there itself. A follower's fetch (``replica`` set) goes through
  :class:`~broker.replication.follower_fetch.FollowerFetchService`, which validates it and spends the
  replication quota; a consumer reads below the high watermark (below the last stable offset when
  read_committed).
* :meth:`FetchService.fetch_anywhere` is the REST read: served here when this broker leads, else forwarded once
  to the leader over the inter-broker client, waiting out leader changes until the request's deadline (as the
  embedded consumer of Confluent's REST Proxy retries). Forwarded reads go through :class:`ForwardedReads`
  (broker/fetch/forwarded_reads.py): identical reads waiting at once share one upstream read, so a thousand
  long-polls cost one forward connection, not a thousand, and forwarded long-polls never hold more than
  ``max_forwarded_polls`` connections at once.

Invariants: a :class:`PartitionData` whose ``records`` are :data:`FileRecords` owns duplicated descriptors, and
the front door closes it (``close``) once sent or dropped; every other answer holds bytes. The offsets of an
answer are read after the read, so they are never older than its batches. read_committed batches come filtered
(aborted transactions' batches dropped, transaction_coordinator/markers.py): a range with an aborted
transaction's batches is bytes; a range with none (every read of a log without aborted transactions) is the
stable read as it is, so it may be file ranges.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.fetch.forwarded_reads import DEFAULT_MAX_FLIGHTS, ForwardedReads, ReadKey
from broker.log.log import ReadResult
from broker.log.reads import SliceResult
from broker.produce import forwarding as forward
from broker.produce.routing import ROUTING_ERRORS, Remote, deadline_after, remaining_ms
from broker.replication.follower_fetch import FollowerFetch
from broker.replication.partition import resolve_waiter
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    OdradekError,
    UnknownLeaderEpochError,
)
from transaction_coordinator.markers import READ_COMMITTED, READ_UNCOMMITTED, isolation_level

if TYPE_CHECKING:
    from broker.interbroker import InterBrokerClient
    from broker.produce.routing import LeaderRouter
    from broker.replication.follower_fetch import FetchResult, FollowerFetchService
    from broker.replication.partition import Partition, QuietMark

__all__ = [
    "DEFAULT_MAX_BYTES", "READ_COMMITTED", "READ_UNCOMMITTED", "AbortedTransaction", "EpochEndOffset", "FetchRequest",
    "FetchService", "FileRecords", "PartitionData", "ReplicaFetch", "check_leader_epoch", "isolation_level",
]

DEFAULT_MAX_BYTES = 1024 * 1024

FileRecords = SliceResult  # batches as file ranges, for a front door that sends them with sendfile


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """Who fetches, when a follower does: its broker id, the broker epoch it claims (-1: none), and the leader
    epoch it believes current (None: the leader's own, i.e. no claim)."""

    replica_id: int
    replica_epoch: int = -1
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One partition's fetch. ``offset`` None reads from the log start offset. ``max_wait_ms`` bounds the whole
    request: the wait for a leader and the long-poll at the end of the log. ``min_bytes`` 0 answers at once, as
    ``max_wait_ms`` 0 does; any other value waits for the first readable batch (an answer may be smaller than
    ``min_bytes``: Fetch's minimum is a batching hint, never a correctness condition). ``isolation_level`` is
    ignored for a follower's fetch (``replica``), which reads up to the log end. ``current_leader_epoch``: the
    leader epoch a consumer was told (KIP-320; -1: none), checked against the leader's before reading."""

    topic: str
    partition: int
    offset: int | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    max_wait_ms: int = 0
    isolation_level: str = READ_UNCOMMITTED
    min_bytes: int = 1
    replica: ReplicaFetch | None = None
    current_leader_epoch: int = -1

    def __post_init__(self) -> None:
        isolation_level(self.isolation_level)

    @property
    def poll_ms(self) -> int:
        """How long a read may long-poll at the end of the log."""
        return self.max_wait_ms if self.min_bytes > 0 else 0


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction with batches in the range read (Kafka's FetchResponse.AbortedTransaction)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class PartitionData:
    """A fetch's answer (Kafka's FetchResponse.PartitionData). ``fetch_offset`` is where the read started (the
    request's offset, or the log start offset). ``records`` are whole batches, the first possibly starting before
    ``fetch_offset``. ``aborted_transactions`` are those whose batches a read_committed read dropped from
    ``records`` (so a client that filters by them again drops nothing more); empty for other reads and for a
    forwarded read."""

    topic: str
    partition: int
    fetch_offset: int
    records: bytes | FileRecords
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    leader: int
    aborted_transactions: tuple[AbortedTransaction, ...] = ()

    @property
    def size(self) -> int:
        return self.records.size if isinstance(self.records, SliceResult) else len(self.records)

    def close(self) -> None:
        """Release what the read opened (file ranges hold duplicated descriptors); idempotent."""
        if isinstance(self.records, SliceResult):
            self.records.close()


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Kafka's OffsetsForLeaderEpoch answer: the largest leader epoch at most the one asked about, and the end
    offset of that epoch on the leader (where a follower's history may have diverged)."""

    leader_epoch: int
    end_offset: int


def check_leader_epoch(current: int, requested: int) -> None:
    """KIP-320's fencing of a client's view: a leader epoch older than the leader's is FENCED_LEADER_EPOCH (the
    client's metadata is stale), a newer one UNKNOWN_LEADER_EPOCH (this broker's is); -1 asks for no check."""
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpochError(f"leader epoch {requested} is older than the leader's {current}",
                                     leader_epoch=current)
    raise UnknownLeaderEpochError(f"leader epoch {requested} is newer than the leader's {current}",
                                  leader_epoch=current)


class FetchService:
    """``max_forwarded_polls``: upstream long-polls forwarded reads may hold at once (each one forward connection
    of the inter-broker client, shared by every identical read waiting here)."""

    # A PLANTED BUG, off by default (BrokerConfig.unsafe_read_uncommitted_as_committed; docs/verify.md): a
    # read_committed read is served as read_uncommitted, past the LSO and with aborted batches, so that `odradek
    # verify` can prove it catches aborted reads (G1a). Only the broker's hidden flag sets it.
    unsafe_read_uncommitted_as_committed = False

    def __init__(self, broker_id: int, router: LeaderRouter, follower_fetches: FollowerFetchService,
                 interbroker: InterBrokerClient, *, max_forwarded_polls: int = DEFAULT_MAX_FLIGHTS) -> None:
        self._broker_id = broker_id
        self._router = router
        self._followers = follower_fetches
        self._interbroker = interbroker
        self.forwarded_reads = ForwardedReads(self._read_leader, max_flights=max_forwarded_polls)

    async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData:
        """Read from this broker's leader replica (leader-only; see the module docstring). ``zero_copy``: the
        front door can send file ranges, so a read that may be served from the segment files is.

        Raises:
            NotLeaderOrFollowerError: another broker leads (naming it), or leadership moved during the read.
            LeaderNotAvailableError, UnknownTopicError, UnknownPartitionError: still so at ``max_wait_ms``.
            OffsetOutOfRangeError: the offset is outside the log.
            and, for a follower, FollowerFetchService's refusals.
        """
        part = await self._router.await_leader(request.topic, request.partition, deadline_after(request.max_wait_ms))
        return await self._read_local(part, request, request.poll_ms, zero_copy=zero_copy)

    def fetch_if_quiet(self, topic: str, partition: int, offset: int, replica: ReplicaFetch,
                       mark: QuietMark | None = None) -> PartitionData | None:
        """A follower's read of a partition this broker leads that has nothing to say to it (nothing past its
        offset, nothing to move: ``FollowerFetchService.fetch_if_quiet``), answered at once and without the read
        path: what :meth:`fetch` would answer, no records and the partition's offsets; None when :meth:`fetch`
        must serve it (and then decides everything, refusals included). Never waits. ``mark``: the follower's
        session entry, marked quiet when the partition is (broker/fetch/sessions.py)."""
        led = self._led_here(topic, partition, replica)
        if led is None or not self._followers.fetch_if_quiet(led[0], replica.replica_id, replica.replica_epoch,
                                                             led[1], offset, mark):
            return None
        return self._nothing_to_read(led[0], offset)

    async def acknowledge_at_log_end(self, topic: str, partition: int, offset: int,
                                     replica: ReplicaFetch) -> PartitionData | None:
        """A follower's read of a partition this broker leads at its log end, not quiet (the follower acknowledges
        records it appended since its last fetch): the acknowledgement recorded and the answer given without the
        read path (``FollowerFetchService.acknowledge_at_log_end``); None when :meth:`fetch` must serve it. Waits
        at most one turn of the loop (for the produces the acknowledgement released), never for records."""
        led = self._led_here(topic, partition, replica)
        if led is None or not await self._followers.acknowledge_at_log_end(
                led[0], replica.replica_id, replica.replica_epoch, led[1], offset):
            return None
        return self._nothing_to_read(led[0], offset)

    def _led_here(self, topic: str, partition: int, replica: ReplicaFetch) -> tuple[Partition, int] | None:
        """The partition if this broker leads it now, and the leader epoch the replica's fetch names (the
        partition's when it names none); None when another broker leads it."""
        try:
            part = self._router.leader(topic, partition)
        except OdradekError:
            return None
        return part, part.leader_epoch if replica.leader_epoch is None else replica.leader_epoch

    def _nothing_to_read(self, part: Partition, offset: int) -> PartitionData:
        """What :meth:`fetch` answers a follower at ``offset``, the log end: no records, the partition's offsets."""
        return PartitionData(
            part.topic, part.partition, offset, b"", high_watermark=part.high_watermark,
            last_stable_offset=part.last_stable_offset, log_start_offset=part.log_start_offset,
            log_end_offset=part.log_end_offset, leader_epoch=part.leader_epoch, leader=self._broker_id)

    def replica_registered(self, replica: ReplicaFetch) -> bool:
        """Whether a replica's fetch comes from its broker's current registration (``FollowerFetchService``):
        only such a fetch may leave its session's quiet partitions out (broker/fetch/sessions.py)."""
        return self._followers.registered(replica.replica_id, replica.replica_epoch)

    async def wait_for_appends(self, partitions: Sequence[tuple[str, int, int]], timeout_s: float,
                               waiter: asyncio.Future[None] | None = None) -> list[int]:
        """Until one of ``partitions`` (topic, partition, the log end offset the caller's read saw) that this
        broker leads has records past that offset, changes role or epoch, or ``timeout_s`` passes: a replica's
        fetch waits on all of its partitions with one waiter (Kafka's ``DelayedFetch``), not a long-poll each.

        Returns the positions in ``partitions`` worth another look: records past the log end given, or this
        broker's leadership of it gone or in another epoch. Nothing, when the wait ended with none of that (the
        caller's first look at the others stands: an idle partition is looked at once per fetch).

        ``waiter``: the caller's, which something else may resolve too (a quiet partition of the fetch's session
        cleared, broker/fetch/sessions.py); the wait then ends with what it finds, and waits even on no partition."""
        given = waiter is not None
        if waiter is None:
            waiter = asyncio.get_running_loop().create_future()
        held: list[tuple[int, Partition, int, int]] = []  # (position, partition, its leader epoch, log end seen)
        changed: list[int] = []
        try:
            for i, (topic, index, log_end) in enumerate(partitions):
                try:
                    part = self._router.leader(topic, index)
                except OdradekError:
                    changed.append(i)  # not led here any more: the look says so
                    continue
                part.wake_on_append(waiter)
                held.append((i, part, part.leader_epoch, log_end))
                if part.log_end_offset > log_end:  # appended since the caller's read: nothing to wait for
                    changed.append(i)
            if changed or not (held or given):
                return changed
            expiry = asyncio.get_running_loop().call_later(timeout_s, resolve_waiter, waiter)
            try:
                await waiter  # resolved by an append, a role change, the caller's own reason or the timeout
            finally:
                expiry.cancel()
            return [i for i, part, epoch, log_end in held
                    if part.log_end_offset > log_end or part.leader_epoch != epoch or not self._leads(part)]
        finally:
            for _, part, _, _ in held:
                part.withdraw_waiter(waiter)

    def _leads(self, part: Partition) -> bool:
        try:
            return self._router.leader(part.topic, part.partition) is part
        except OdradekError:
            return False

    async def fetch_anywhere(self, request: FetchRequest) -> PartitionData:
        """A consumer's read from the leader wherever it is: here, or forwarded once to it; leader changes are
        waited out until ``max_wait_ms`` (``max_wait_ms`` 0: one look, no wait). Always bytes."""
        if request.replica is not None:
            raise InvalidRequestError("a follower fetches from the leader itself")
        deadline = deadline_after(request.max_wait_ms)
        while True:
            route = await self._router.await_route(request.topic, request.partition, deadline)
            poll_ms = remaining_ms(deadline) if request.poll_ms else 0
            try:
                if isinstance(route, Remote):
                    return await self._forwarded(route, request, poll_ms)
                return await self._read_local(route, request, poll_ms, zero_copy=False)
            except ROUTING_ERRORS:
                if not await self._router.wait_for_change(deadline):
                    raise

    def epoch_end_offset(self, topic: str, partition: int, leader_epoch: int, *,
                         current_leader_epoch: int = -1) -> EpochEndOffset:
        """OffsetsForLeaderEpoch on a partition this broker leads (followers' divergence check, consumers'
        position validation after a leader change); leader-only, without waiting: NOT_LEADER_OR_FOLLOWER naming
        the leader otherwise. ``current_leader_epoch`` is checked as a fetch's is; an epoch above every one the
        log knows answers ``(-1, -1)`` (Kafka's "undefined")."""
        part = self._router.leader(topic, partition)
        check_leader_epoch(part.leader_epoch, current_leader_epoch)
        epoch, end = part.epoch_end_offset(leader_epoch)
        return EpochEndOffset(epoch, end)

    async def _read_local(self, part: Partition, request: FetchRequest, poll_ms: int, *,
                          zero_copy: bool) -> PartitionData:
        if request.replica is None:
            check_leader_epoch(part.leader_epoch, request.current_leader_epoch)
        offset = part.log_start_offset if request.offset is None else request.offset
        aborted: tuple[AbortedTransaction, ...] = ()
        result: FetchResult
        if request.replica is not None:
            replica = request.replica
            fetch = FollowerFetch(
                replica_id=replica.replica_id, replica_epoch=replica.replica_epoch,
                leader_epoch=part.leader_epoch if replica.leader_epoch is None else replica.leader_epoch,
                offset=offset, max_bytes=request.max_bytes, timeout_ms=poll_ms)
            result = await self._followers.fetch(part, fetch, zero_copy=zero_copy)
        elif request.isolation_level == READ_COMMITTED and not self.unsafe_read_uncommitted_as_committed:
            if zero_copy:
                # Below the LSO as read_committed reads; with no aborted transaction in the range, what it would
                # return is exactly this read (nothing to drop), so it may stay file ranges (librdkafka reads
                # read_committed by default). Otherwise the filtered read, in bytes (rare: aborted transactions).
                stable = await part.read(offset, request.max_bytes, poll_ms, stable=True, zero_copy=True)
                if not part.aborted_between(offset, stable.next_offset):
                    result = stable
                else:
                    if isinstance(stable, SliceResult):
                        stable.close()
                    result = await part.read_committed(offset, request.max_bytes, 0)
            else:  # filtered per batch: bytes
                result = await part.read_committed(offset, request.max_bytes, poll_ms)
            aborted = tuple(AbortedTransaction(pid, first)
                            for pid, first, _marker in part.aborted_between(offset, result.next_offset))
        else:
            result = await part.read(offset, request.max_bytes, poll_ms, zero_copy=zero_copy)
        # File ranges only when there is something to send (an empty zero-copy read holds no descriptor).
        records: bytes | FileRecords = (result.data if isinstance(result, ReadResult)
                                        else result if result.slices else b"")
        return PartitionData(
            request.topic, request.partition, offset, records,
            high_watermark=part.high_watermark, last_stable_offset=part.last_stable_offset,
            log_start_offset=part.log_start_offset, log_end_offset=part.log_end_offset,
            leader_epoch=part.leader_epoch, leader=self._broker_id, aborted_transactions=aborted)

    async def _forwarded(self, route: Remote, request: FetchRequest, poll_ms: int) -> PartitionData:
        key = ReadKey(route.url, request.topic, request.partition, request.offset, request.max_bytes,
                      committed=request.isolation_level == READ_COMMITTED)
        remote = await self.forwarded_reads.read(key, poll_ms)  # shared with identical reads waiting here
        return PartitionData(
            request.topic, request.partition,
            remote.log_start_offset if request.offset is None else request.offset, remote.data,
            high_watermark=remote.high_watermark, last_stable_offset=remote.last_stable_offset,
            log_start_offset=remote.log_start_offset, log_end_offset=remote.log_end_offset,
            leader_epoch=remote.leader_epoch, leader=remote.leader)

    async def _read_leader(self, key: ReadKey, poll_ms: int) -> forward.RemoteBatches:
        return await forward.fetch_remote(self._interbroker, key.leader_url, key.topic, key.partition, key.offset,
                                          key.max_bytes, poll_ms, committed=key.committed)
