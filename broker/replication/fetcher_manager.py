"""Which fetcher follows which partition, as Kafka's ``ReplicaFetcherManager`` (``AbstractFetcherManager``): one
``LeaderFetcher`` per (leader broker, fetcher id), each with its own endpoint (one connection) to that leader.

Why: a follower of many partitions led by few brokers sends one multi-partition fetch per leader per round
(``num.replica.fetchers`` of them per leader, to spread the work of a busy leader over several connections), not
one request per partition. The replica manager calls ``follow`` and ``unfollow`` as partition states arrive; this
module keeps each partition in exactly one fetcher: the one of its current leader and its fetcher id.

Invariants:

* a partition is in at most one fetcher, the one ``(leader, fetcher_id(topic, partition))`` names; a new leader
  moves it (the old fetcher's session forgets it next round), a new leader epoch re-adds it to the same fetcher,
  so it is truncated again before it fetches (KIP-101), as Kafka's ``addFetcherForPartitions`` does;
* a fetcher left with no partition is closed at once (its task cancelled, its connection closed), as Kafka's
  ``shutdownIdleFetcherThreads`` after each state change;
* a fetcher whose task ended (it never should: its loop backs off on every error) is replaced on the next
  ``follow`` of any of its partitions;
* each (leader, fetcher id) keeps one ``FetcherStats`` for the broker's life, handed to every fetcher started
  there, so its counters in /metrics only grow; the gauges (``fetchers``) name the running fetchers only.

Concurrency: on the broker's event loop, called by the replica manager only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.replication.leader_endpoint import FetchSettings, LeaderEndPoint, TopicPartition
from broker.replication.leader_fetcher import FetcherStats, LeaderFetcher

if TYPE_CHECKING:
    from broker.replication.partition import Partition
    from broker.replication.throttle import ReplicationThrottle

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0  # how long closing a fetcher waits for its task to end

# (leader broker id, fetcher id) -> a new endpoint to that leader (its own connection)
EndPointFactory = Callable[[int, int], LeaderEndPoint]


def _java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, in 32-bit arithmetic)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's ``AbstractFetcherManager.getFetcherId``: ``Utils.abs(31 * topic.hashCode + partition) %
    num.replica.fetchers``, so a partition lands on the same fetcher id as on a Kafka broker."""
    h = (31 * _java_string_hash(topic) + partition) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % num_fetchers


@dataclass(eq=False, slots=True)
class _Running:
    fetcher: LeaderFetcher
    task: asyncio.Task[None]


class FetcherManager:
    """This broker's fetchers (see the module docstring)."""

    def __init__(self, broker_id: int, endpoints: EndPointFactory, *, num_fetchers: int = 1,
                 broker_epoch: Callable[[], int | None], throttle: ReplicationThrottle | None = None,
                 settings: FetchSettings | None = None) -> None:
        if num_fetchers < 1:
            raise ValueError(f"num.replica.fetchers must be at least 1, not {num_fetchers}")
        self._broker_id = broker_id
        self._endpoints = endpoints
        self.num_fetchers = num_fetchers
        self._broker_epoch = broker_epoch
        self._throttle = throttle
        self._settings = settings
        self._fetchers: dict[tuple[int, int], _Running] = {}
        self._assigned: dict[TopicPartition, tuple[int, int]] = {}
        self._stats: dict[tuple[int, int], FetcherStats] = {}  # at most (brokers x num_fetchers) of them

    @property
    def stats(self) -> dict[tuple[int, int], FetcherStats]:
        """The counters of every fetcher ever started, by (leader, fetcher id); closed ones included."""
        return dict(self._stats)

    @property
    def fetchers(self) -> dict[tuple[int, int], LeaderFetcher]:
        """The running fetchers by (leader, fetcher id)."""
        return {where: running.fetcher for where, running in self._fetchers.items()}

    def fetcher_of(self, key: TopicPartition) -> tuple[int, int] | None:
        """The (leader, fetcher id) following ``key``, if any."""
        return self._assigned.get(key)

    async def follow(self, part: Partition, *, restart: bool) -> None:
        """Follow ``part`` (a follower) from its leader's fetcher; ``restart`` after a state change (a new leader
        or leader epoch): added again, so it truncates first."""
        key = (part.topic, part.partition)
        if part.leader < 0:
            await self.unfollow(key)
            return
        where = (part.leader, fetcher_id(part.topic, part.partition, self.num_fetchers))
        running = self._fetchers.get(where)
        current = self._assigned.get(key)
        if current == where and not restart and running is not None and not running.task.done():
            return
        if current is not None and current != where:
            await self.unfollow(key)
        if running is not None and running.task.done():
            await self._close(where)
            running = None
        if running is None:
            endpoint = self._endpoints(*where)
            fetcher = LeaderFetcher(endpoint, self._broker_id, broker_epoch=self._broker_epoch,
                                    throttle=self._throttle, settings=self._settings,
                                    stats=self._stats.setdefault(where, FetcherStats()))
            running = _Running(fetcher, asyncio.create_task(fetcher.run(),
                                                            name=f"fetcher-{where[0]}-{where[1]}"))
            self._fetchers[where] = running
            log.info("broker %d: fetcher %d for leader %d started", self._broker_id, where[1], where[0])
        running.fetcher.add(part)
        self._assigned[key] = where

    async def unfollow(self, key: TopicPartition) -> None:
        """Stop fetching ``key``; its fetcher is closed when it has no partition left."""
        where = self._assigned.pop(key, None)
        if where is None:
            return
        running = self._fetchers.get(where)
        if running is None:
            return
        running.fetcher.remove(key)
        if not running.fetcher.partitions:
            await self._close(where)

    async def close(self) -> None:
        for where in list(self._fetchers):
            await self._close(where)
        self._assigned.clear()

    async def _close(self, where: tuple[int, int]) -> None:
        running = self._fetchers.pop(where, None)
        if running is None:
            return
        running.task.cancel()
        # asyncio.wait: the fetcher's end (cancelled, or failed) is not raised here, while a cancellation of the
        # caller still is; a fetcher that does not end in time is left behind, loudly, rather than stall the
        # replica manager's state changes behind it
        done, _ = await asyncio.wait([running.task], timeout=CLOSE_TIMEOUT_S)
        if not done:
            log.error("broker %d: fetcher %d for leader %d did not stop within %.0f s of its cancellation",
                      self._broker_id, where[1], where[0], CLOSE_TIMEOUT_S)
        try:
            await running.fetcher.endpoint.close()
        except Exception:
            log.exception("broker %d: closing the connection of fetcher %d for leader %d failed", self._broker_id,
                          where[1], where[0])
        for key in [k for k, w in self._assigned.items() if w == where]:
            del self._assigned[key]
        log.info("broker %d: fetcher %d for leader %d closed", self._broker_id, where[1], where[0])
