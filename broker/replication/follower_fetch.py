"""The leader's side of a follower's fetch: who may fetch, and the throttled read that moves the follower's state.

A follower's fetch is an acknowledgement (its offset says it holds everything before), so it may move the ISR and
the high watermark; before it does, the fetch is checked as Kafka's ReplicaManager checks it (see ``validate``).
Front doors reach it through the fetch service (broker/fetch/service.py); every rule of a follower's fetch
is here.

Invariants: a request never demotes a leader (a newer leader epoch only asks for the partition's state to be
re-read from ZooKeeper, and applying that state is what may demote us); a fetch that fails validation reads
nothing and spends no replication quota; the quota delays the throttled partition alone, never the answer that
carries it with others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.log.log import ReadResult
from broker.log.reads import SliceResult
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
)

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache
    from broker.replication.partition import Partition, QuietMark
    from broker.replication.throttle import ReplicationThrottle

__all__ = ["FetchResult", "FollowerFetch", "FollowerFetchService", "SliceResult"]

# What a fetch returns: bytes, or (zero-copy) file ranges the HTTP layer sends with sendfile and then closes.
FetchResult = ReadResult | SliceResult


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One follower's fetch, decoded. ``replica_epoch`` is the broker epoch the follower claims (the czxid of its
    /brokers/ids znode; -1 when it sent none); ``leader_epoch`` is the leader epoch it believes current."""

    replica_id: int
    replica_epoch: int
    leader_epoch: int
    offset: int
    max_bytes: int
    timeout_ms: int


class FollowerFetchService:
    """Validates and serves follower fetches of the partitions this broker leads.

    ``reread_state(topic, partition)`` asks the broker to re-read a partition's state from ZooKeeper (the broker
    queues a ``PartitionStateChanged`` event); it must not block, and it is the only way a fetch can lead to a
    change of this broker's role.
    """

    def __init__(self, broker_id: int, cache: MetadataCache, throttle: ReplicationThrottle, *,
                 reread_state: Callable[[str, int], None]) -> None:
        self._broker_id = broker_id
        self._cache = cache
        self._throttle = throttle
        self._reread_state = reread_state

    def validate(self, part: Partition, fetch: FollowerFetch) -> None:
        """Kafka's checks of a replica's fetch, before it may move the follower's state (and so the high watermark).

        The replica must be assigned to the partition and a registered broker whose broker epoch is the one
        ZooKeeper holds now: a hand-written fetch naming replica 99, or a broker's stale incarnation, is refused.
        A leader epoch newer than ours is UNKNOWN_LEADER_EPOCH, and our state is re-read. A fetch offset beyond
        the log end is OFFSET_OUT_OF_RANGE (it would claim records that do not exist).
        """
        name = f"{part.topic}-{part.partition}"
        replica_id = fetch.replica_id
        if replica_id == self._broker_id or replica_id not in part.replicas:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {name} (replicas "
                                           f"{list(part.replicas)})")
        registered = self._cache.brokers.get(replica_id)
        if registered is None:
            raise BrokerNotAvailableError(f"broker {replica_id} is not registered in ZooKeeper")
        if fetch.replica_epoch != registered.epoch:
            raise StaleBrokerEpochError(
                f"broker {replica_id}'s epoch is {registered.epoch}, the fetch says {fetch.replica_epoch}")
        if fetch.leader_epoch > part.leader_epoch:
            self._reread_state(part.topic, part.partition)
            raise UnknownLeaderEpochError(
                f"fetch epoch {fetch.leader_epoch} is newer than {name}'s leader epoch {part.leader_epoch}",
                leader_epoch=part.leader_epoch)
        if fetch.offset > part.log_end_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch.offset} is beyond {name}'s log end offset {part.log_end_offset}",
                log_start_offset=part.log_start_offset, log_end_offset=part.log_end_offset,
                high_watermark=part.high_watermark)

    def fetch_if_quiet(self, part: Partition, replica_id: int, replica_epoch: int, leader_epoch: int,
                       offset: int, mark: QuietMark | None = None) -> bool:
        """A follower's fetch of a partition with nothing to say to it (``Partition.acknowledge_if_quiet``),
        acknowledged without the read path: True when it was, False (nothing changed) when the fetch must go
        through :meth:`fetch`, which then applies every rule, refusals included.

        Only a fetch that :meth:`validate` passes and the quota does not hold back can be quiet: the same
        replica, registration and broker epoch checks come first, so a stale incarnation keeps no partition of
        its session caught up. The cheap conditions (the fetch's epoch is the partition's, its offset the log end)
        are looked at first: in a follower's session most partitions are idle, and this is what a round costs
        each of them."""
        return (self._may_skip_the_read(part, replica_id, replica_epoch, leader_epoch, offset)
                and part.acknowledge_if_quiet(replica_id, offset, leader_epoch, mark))

    async def acknowledge_at_log_end(self, part: Partition, replica_id: int, replica_epoch: int, leader_epoch: int,
                                     offset: int) -> bool:
        """A follower's fetch at the log end that is not quiet (its offset moved: it acknowledges what it appended
        since its last fetch), acknowledged without the read path (``Partition.acknowledge_at_log_end``): True
        when it was, False (nothing changed) when the fetch must go through :meth:`fetch`. The same conditions as
        :meth:`fetch_if_quiet` come first."""
        return (self._may_skip_the_read(part, replica_id, replica_epoch, leader_epoch, offset)
                and await part.acknowledge_at_log_end(replica_id, offset, leader_epoch))

    def _may_skip_the_read(self, part: Partition, replica_id: int, replica_epoch: int, leader_epoch: int,
                           offset: int) -> bool:
        """A fetch at the log end, in the partition's epoch, that :meth:`validate` passes and the quota does not
        hold back: one that has nothing to read and that no rule refuses. The cheap conditions first."""
        if leader_epoch != part.leader_epoch or offset != part.log_end_offset:
            return False
        if not self.registered(replica_id, replica_epoch) or replica_id not in part.replicas:
            return False
        return self._throttle.leader_limit(part.topic, part.partition, replica_id in part.isr) is None

    def registered(self, replica_id: int, replica_epoch: int) -> bool:
        """Whether ``replica_id`` is a registered broker in the incarnation ``replica_epoch`` (what a follower's
        session must be for its quiet partitions to be left out of a round: a stale one keeps nothing caught up)."""
        registered = self._cache.brokers.get(replica_id)
        return registered is not None and registered.epoch == replica_epoch and replica_id != self._broker_id

    async def fetch(self, part: Partition, fetch: FollowerFetch, *, zero_copy: bool = True) -> FetchResult:
        """Validate, then read for the follower within the leader's replication quota (KIP-73).

        The quota holds back the throttled partition, never the answer it travels in (a Kafka fetch carries many
        partitions): under the quota the read is capped by its budget and answered at once, its size spent; over
        it, the partition is answered with no records, as Kafka's leader leaves a throttled partition out, once the
        debt is paid or the fetch's own wait is over (so a long-poll does not come straight back to ask again).
        Either way the fetch offset acknowledges what the follower holds."""
        self.validate(part, fetch)
        bucket = self._throttle.leader_limit(part.topic, part.partition, fetch.replica_id in part.isr)
        if bucket is not None:
            debt = bucket.delay()
            if debt > 0:
                result = part.acknowledge_follower(fetch.replica_id, fetch.offset, fetch.leader_epoch)
                if fetch.timeout_ms > 0:
                    await asyncio.sleep(min(debt, fetch.timeout_ms / 1000))
                return result
        max_bytes = bucket.cap(fetch.max_bytes) if bucket else fetch.max_bytes
        result = await part.read_for_follower(fetch.replica_id, fetch.offset, fetch.leader_epoch, max_bytes,
                                              fetch.timeout_ms, zero_copy=zero_copy)
        size = result.size if isinstance(result, SliceResult) else len(result.data)
        if bucket is not None and size:
            bucket.record(size)  # the debt holds this partition's next fetches back
        return result

