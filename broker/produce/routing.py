"""Where a partition's writes and reads go: this broker's active leadership, or the leader to forward to.

Why this exists: right after a topic is created (or a leader moves), a broker's view passes through states in
which "who leads" is not yet answerable: the partition state znode has no leader yet, this broker's metadata
cache has not seen the topic, or the cache names this broker as leader while its local replica has not become
leader yet. Answering at once would fail a REST produce sent right after a v3 topic creation, and an answer
that mixes two sources (the cache's leader and the local replica's role) can contradict itself, naming the same
broker as both "not the leader" and the leader. Confluent's REST Proxy hides these windows behind its embedded
producer's retries; we wait, bounded by the request's deadline.

One source of truth: the metadata cache (ZooKeeper's partition state) says *who* leads; the local replica only
says whether *our own* leadership is active yet. So:

* the cache names another broker: go there (forward), or answer NOT_LEADER_OR_FOLLOWER naming it;
* the cache names this broker and its replica leads: serve locally;
* the cache names this broker but the replica does not lead yet (or was fenced), the cache names no leader, or
  the leader is not registered: LEADER_NOT_AVAILABLE, which callers with a deadline wait out;
* the cache does not know the topic: UNKNOWN_TOPIC, waited out only when ZooKeeper says the topic exists (so a
  produce to a missing topic still fails at once).

Waits end on the metadata watcher's change signal (every handled event, after the replica manager has applied
it), re-checked at least every ``RECHECK_S`` so that nothing depends on a signal never being missed.

Concurrency: everything runs on the broker's event loop; ``route`` reads the cache and the replica map without
awaiting, so it sees one consistent snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker.replication.partition import Partition
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicError,
)

__all__ = ["RECHECK_S", "ROUTING_ERRORS", "LeaderRouter", "Remote", "deadline_after", "remaining_ms"]

# Leadership is not where we looked (any more): look again while the deadline allows. Reads may always look
# again; a produce only when nothing was appended (broker/produce/service.py retry_is_safe): a leader that lost
# leadership while an acks=all append waited may hold the batch, and the new leader may keep it.
ROUTING_ERRORS = (LeaderNotAvailableError, NotLeaderOrFollowerError)

RECHECK_S = 0.25  # longest wait between two looks at the metadata, even without a change signal

MetadataChanged = Callable[[float], Awaitable[None]]  # MetadataWatcher.changed: returns or times out
TopicLookup = Callable[[str], Awaitable[object | None]]  # ZooKeeper's view of a topic: something, or None


@dataclass(frozen=True, slots=True)
class Remote:
    """Another broker leads the partition: forward to it (or name it)."""

    leader: int
    url: str


class LeaderRouter:
    def __init__(self, replicas: ReplicaManager, metadata_changed: MetadataChanged,
                 lookup_topic: TopicLookup | None = None) -> None:
        self._replicas = replicas
        self._changed = metadata_changed
        self._lookup_topic = lookup_topic

    @property
    def broker_id(self) -> int:
        return self._replicas.broker_id

    def route(self, topic: str, partition: int) -> Partition | Remote:
        """The local leader replica or the remote leader, now; typed errors when neither is known.

        Raises:
            UnknownTopicError, UnknownPartitionError: the cache does not know the topic or partition.
            LeaderNotAvailableError: no leader, a leader that is not registered, or this broker's leadership
                is not active yet (retriable: wait for a metadata change).
        """
        info = self._replicas.partition_info(topic, partition)  # the one answer to "who leads"
        if info.leader == self._replicas.broker_id:
            try:
                part = self._replicas.leader_partition(topic, partition)
            except NotLeaderOrFollowerError:
                part = None
            if part is None or part.leader_epoch < info.leader_epoch:
                raise LeaderNotAvailableError(
                    f"broker {info.leader} is becoming the leader of {topic}-{partition} (leader epoch "
                    f"{info.leader_epoch}); its leadership is not active yet",
                    leader=info.leader, leader_epoch=info.leader_epoch,
                )
            return part
        url = self._replicas.leader_url(info.leader)
        if url is None:
            raise LeaderNotAvailableError(
                f"{topic}-{partition} is led by broker {info.leader}, which is not registered right now",
                leader=info.leader, leader_epoch=info.leader_epoch,
            )
        return Remote(info.leader, url)

    def not_leader(self, topic: str, partition: int, remote: Remote) -> NotLeaderOrFollowerError:
        """NOT_LEADER_OR_FOLLOWER for a leader-only path, naming the leader the cache knows (never ourselves)."""
        info = self._replicas.partition_info(topic, partition)
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} is not the leader of {topic}-{partition}; broker {remote.leader} is",
            leader=remote.leader, leader_url=remote.url, leader_epoch=info.leader_epoch,
        )

    async def await_route(self, topic: str, partition: int, deadline: float) -> Partition | Remote:
        """:meth:`route`, waiting out the retriable states until ``deadline`` (loop time); then their error."""
        while True:
            try:
                return self.route(topic, partition)
            except LeaderNotAvailableError:
                if not await self.wait_for_change(deadline):
                    raise
            except UnknownTopicError:
                if not await self._topic_exists(topic) or not await self.wait_for_change(deadline):
                    raise

    def leader(self, topic: str, partition: int) -> Partition:
        """The local leader replica, now, for a leader-only path; NOT_LEADER_OR_FOLLOWER naming the leader."""
        route = self.route(topic, partition)
        if isinstance(route, Remote):
            raise self.not_leader(topic, partition, route)
        return route

    async def await_leader(self, topic: str, partition: int, deadline: float) -> Partition:
        """:meth:`leader` for the binary path: waits while this broker is becoming leader or no leader is known;
        NOT_LEADER_OR_FOLLOWER at once when another broker leads (the client goes there itself)."""
        route = await self.await_route(topic, partition, deadline)
        if isinstance(route, Remote):
            raise self.not_leader(topic, partition, route)
        return route

    async def await_topic(self, topic: str, deadline: float) -> None:
        """Return once the cache knows ``topic``; UNKNOWN_TOPIC at once if ZooKeeper does not know it either,
        or at ``deadline`` if this broker has not heard of it by then."""
        while self._replicas.cache.partition_count(topic) == 0:
            if not await self._topic_exists(topic) or not await self.wait_for_change(deadline):
                self._replicas.partition_info(topic, 0)  # raises UNKNOWN_TOPIC with the usual message
                return

    async def wait_for_change(self, deadline: float) -> bool:
        """Wait for a metadata change (or ``RECHECK_S``); False when the deadline has already passed."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await self._changed(min(remaining, RECHECK_S))
        return True

    async def _topic_exists(self, topic: str) -> bool:
        if self._lookup_topic is None:
            return False
        return await self._lookup_topic(topic) is not None


def deadline_after(timeout_ms: int) -> float:
    """The loop time ``timeout_ms`` from now: what every wait of one request is bounded by."""
    return asyncio.get_running_loop().time() + timeout_ms / 1000


def remaining_ms(deadline: float) -> int:
    """Milliseconds left until ``deadline``, at least 1 (a zero timeout means "do not wait" downstream)."""
    return max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
