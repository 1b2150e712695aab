"""Followers over Kafka's protocol in the replica manager (broker/replication/fetcher_manager.py): one fetcher per
(leader, fetcher id) with Kafka's fetcher ids, partitions moved between fetchers as leaders change, fetchers
closed when they have no partition left. The replica manager is the real one on real logs; the endpoints are
in memory, recording what they are asked."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from broker.metadata.cache import MetadataCache
from broker.replication.fetch_session_handler import SessionRequest
from broker.replication.fetcher_manager import FetcherManager, fetcher_id
from broker.replication.leader_endpoint import EpochEnd, FetchAnswer, FetchSettings
from broker.replication.partition import FOLLOWER, LEADER
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol.model import BrokerInfo, TopicAssignment

from .fakes import info
from .test_replica_manager import FakeFacade

TOPIC = "t"


class Endpoint:
    """A leader that has nothing new: each fetch waits a little and answers no partition."""

    def __init__(self, leader_id: int, index: int) -> None:
        self.leader_id = leader_id
        self.index = index
        self.fetched: list[set[tuple[str, int]]] = []
        self.closed = False

    async def fetch(self, request: SessionRequest, *, replica_id: int, broker_epoch: int,
                    settings: FetchSettings) -> FetchAnswer:
        assert not self.closed
        self.fetched.append(set(request.wanted))
        await asyncio.sleep(0.005)
        return FetchAnswer(0, 0, {})

    async def epoch_end_offsets(self, asks: Mapping[tuple[str, int], tuple[int, int]], *,
                                replica_id: int) -> dict[tuple[str, int], EpochEnd]:
        return {key: EpochEnd(-1, -1) for key in asks}

    async def log_bounds(self, partition: tuple[str, int], *, replica_id: int) -> tuple[int, int]:
        return 0, 0

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(("topic", "partition", "fetchers", "expected"), [
    ("t", 0, 3, 2), ("t", 1, 3, 0), ("events", 5, 4, 0), ("orders", 11, 8, 2),
    ("zürich-😀", 3, 5, 2),  # Java hashes UTF-16 code units: a surrogate pair counts twice
    ("polygenelubricants", 0, 7, 0),  # hashCode is Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
])
def test_fetcher_ids_are_kafkas(topic: str, partition: int, fetchers: int, expected: int) -> None:
    # expected: Kafka's AbstractFetcherManager.getFetcherId, computed with Java (jshell) for these inputs
    assert fetcher_id(topic, partition, fetchers) == expected


def test_num_replica_fetchers_is_at_least_one() -> None:
    with pytest.raises(ValueError):
        FetcherManager(1, Endpoint, num_fetchers=0, broker_epoch=lambda: 1)


def test_followers_share_one_fetcher_per_leader_and_fetcher_id_and_move_with_their_leader(tmp_path: Path) -> None:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    cache.topics[TOPIC] = TopicAssignment({p: [1, 2, 3] for p in range(6)})
    made: list[Endpoint] = []

    def endpoints(leader: int, index: int) -> Endpoint:
        made.append(Endpoint(leader, index))
        return made[-1]

    async def main() -> None:
        rm = ReplicaManager(1, tmp_path, FakeFacade(), cache,  # type: ignore[arg-type]
                            leader_endpoints=endpoints, num_replica_fetchers=2, broker_epoch=lambda: 11)
        await rm.start()
        manager = rm.fetcher_manager
        assert manager is not None
        try:
            # broker 1 follows partitions 0-5, led by 2 (even) and 3 (odd)
            for p in range(6):
                await rm.on_partition(info(2 if p % 2 == 0 else 3, 1, (1, 2, 3), partition=p), {})
            expected = {(2 if p % 2 == 0 else 3, fetcher_id(TOPIC, p, 2)): set() for p in range(6)}
            for p in range(6):
                expected[(2 if p % 2 == 0 else 3, fetcher_id(TOPIC, p, 2))].add((TOPIC, p))
            assert {w: set(f.partitions) for w, f in manager.fetchers.items()} == expected
            assert sorted((e.leader_id, e.index) for e in made) == sorted(expected)  # one endpoint each
            # every fetcher asks its leader for all of its partitions in one request
            await until(lambda: all(e.fetched and e.fetched[-1] == expected[(e.leader_id, e.index)]
                                    for e in made), "every fetcher to fetch all of its partitions")

            # partition 0's leader moves from 2 to 3: it leaves 2's fetcher and joins 3's
            old = (2, fetcher_id(TOPIC, 0, 2))
            new = (3, fetcher_id(TOPIC, 0, 2))
            await rm.on_partition(info(3, 2, (1, 2, 3), partition=0, version=1), {})
            assert manager.fetcher_of((TOPIC, 0)) == new
            assert (TOPIC, 0) in manager.fetchers[new].partitions
            assert old not in manager.fetchers or (TOPIC, 0) not in manager.fetchers[old].partitions
            endpoint = [e for e in made if (e.leader_id, e.index) == new][-1]
            await until(lambda: any((TOPIC, 0) in asked for asked in endpoint.fetched),
                        "broker 3's fetcher to fetch partition 0")

            # broker 1 becomes partition 2's leader: no fetcher follows it any more
            await rm.on_partition(info(1, 2, (1, 2, 3), partition=2, version=1), {})
            assert rm.partitions[(TOPIC, 2)].role == LEADER and manager.fetcher_of((TOPIC, 2)) is None
            assert all((TOPIC, 2) not in f.partitions for f in manager.fetchers.values())

            # once broker 2 leads nothing broker 1 follows, its fetchers are closed with their connections
            for p in (4,):
                await rm.on_partition(info(3, 2, (1, 2, 3), partition=p, version=1), {})
            assert all(leader != 2 for leader, _ in manager.fetchers)
            assert all(e.closed for e in made if e.leader_id == 2)
            assert rm.partitions[(TOPIC, 4)].role == FOLLOWER

            # a new leader epoch with the same leader keeps the partition in its fetcher
            where = manager.fetcher_of((TOPIC, 1))
            await rm.on_partition(info(3, 5, (1, 3), partition=1, version=2), {})
            assert manager.fetcher_of((TOPIC, 1)) == where and (TOPIC, 1) in manager.fetchers[where].partitions

            # the topic is deleted: nothing is followed, every fetcher is closed
            await rm.on_topic_deleted(TOPIC)
            assert manager.fetchers == {} and all(e.closed for e in made)
        finally:
            await rm.close()
        assert all(e.closed for e in made)

    asyncio.run(main())


async def until(condition: Any, what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited {timeout} s for {what}"
        await asyncio.sleep(0.01)


def test_a_leader_without_the_kafka_listener_is_followed_over_http_and_moves_back_when_it_has_one(
        tmp_path: Path) -> None:
    """``auto`` on a mixed cluster: broker 3 registered no inter-broker Kafka listener, so its partitions are
    followed by the HTTP long-poll; once it has one, the next state moves them to a Kafka fetcher, and back."""
    from broker.interbroker import InterBrokerClient

    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    cache.topics[TOPIC] = TopicAssignment({p: [1, 2, 3] for p in range(2)})
    kafka_capable = {2}

    async def main() -> None:
        interbroker = InterBrokerClient(1, lambda _b: None)
        rm = ReplicaManager(1, tmp_path, FakeFacade(), cache, interbroker=interbroker,  # type: ignore[arg-type]
                            leader_endpoints=Endpoint, broker_epoch=lambda: 11,
                            kafka_leader=lambda leader: leader in kafka_capable)
        await rm.start()
        manager = rm.fetcher_manager
        assert manager is not None
        try:
            await rm.on_partition(info(2, 1, (1, 2, 3), partition=0), {})
            await rm.on_partition(info(3, 1, (1, 2, 3), partition=1), {})
            assert manager.fetcher_of((TOPIC, 0)) is not None and (TOPIC, 0) not in rm._fetchers
            assert manager.fetcher_of((TOPIC, 1)) is None and (TOPIC, 1) in rm._fetchers  # over HTTP

            kafka_capable.add(3)  # broker 3 came back with a Kafka listener
            await rm.on_partition(info(3, 2, (1, 2, 3), partition=1, version=1), {})
            assert manager.fetcher_of((TOPIC, 1)) is not None and (TOPIC, 1) not in rm._fetchers

            kafka_capable.discard(3)  # and without one again: the same leader epoch is enough to move
            await rm.on_partition(info(3, 2, (1, 2, 3), partition=1, version=1), {})
            assert manager.fetcher_of((TOPIC, 1)) is None and (TOPIC, 1) in rm._fetchers
        finally:
            await rm.close()
            await interbroker.close()

    asyncio.run(main())
