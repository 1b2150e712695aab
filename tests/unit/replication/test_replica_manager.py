"""ReplicaManager: one precise error per lookup case, roles from partition states, ISR writes through the ISR
manager to (a fake of) our ZooKeeper facade, and the high-watermark checkpoint across a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.interbroker import InterBrokerClient
from broker.metadata.cache import MetadataCache
from broker.replication.partition import FOLLOWER, LEADER
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.model import BrokerInfo, LeaderAndIsr, TopicAssignment
from zk.client import ZkVersionConflict

from .fakes import batch, info

TOPIC = "t"


class FakeFacade:
    """The one facade verb the replica manager uses: a conditional write of a partition's state."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], tuple[LeaderAndIsr, int]] = {}

    def update_isr(self, topic: str, partition: int, state: LeaderAndIsr, expected_version: int) -> int:
        current = self.states.get((topic, partition))
        version = current[1] if current else 0
        if version != expected_version:
            raise ZkVersionConflict(f"{topic}-{partition}")
        self.states[(topic, partition)] = (state, version + 1)
        return version + 1


def cache_with(partitions: dict[int, tuple[int, int, tuple[int, ...]]]) -> MetadataCache:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
    cache.topics[TOPIC] = TopicAssignment({p: [1, 2, 3] for p in partitions})
    for p, (leader, epoch, isr) in partitions.items():
        cache.partitions[(TOPIC, p)] = info(leader, epoch, isr, partition=p)
    return cache


def with_manager(tmp_path: Path, cache: MetadataCache,
                 body: Callable[[ReplicaManager, FakeFacade], Awaitable[Any]], **kw: Any) -> None:
    async def main() -> None:
        facade = FakeFacade()
        # An unstarted client: followers' fetches fail (and back off) without any network.
        kw.setdefault("interbroker", InterBrokerClient(1, lambda _: None))
        rm = ReplicaManager(1, tmp_path, facade, cache, **kw)  # type: ignore[arg-type]
        await rm.start()
        try:
            await body(rm, facade)
        finally:
            await rm.close()

    asyncio.run(main())


def test_lookups_name_one_precise_error(tmp_path: Path) -> None:
    cache = cache_with({0: (1, 0, (1, 2, 3)), 1: (2, 0, (2, 3)), 2: (-1, 1, (3,))})

    async def body(rm: ReplicaManager, _: FakeFacade) -> None:
        for p in (0, 1, 2):
            await rm.on_partition(cache.partitions[(TOPIC, p)], {})
        with pytest.raises(UnknownTopicError):
            rm.partition_info("nope", 0)
        with pytest.raises(UnknownPartitionError):
            rm.partition_info(TOPIC, 7)
        with pytest.raises(LeaderNotAvailableError):
            rm.partition_info(TOPIC, 2)
        assert rm.leader_partition(TOPIC, 0).role == LEADER
        with pytest.raises(NotLeaderOrFollowerError) as e:
            rm.leader_partition(TOPIC, 1)
        assert e.value.details["leader"] == 2 and "broker 2 is" in str(e.value)
        assert rm.partitions[(TOPIC, 1)].role == FOLLOWER

    with_manager(tmp_path, cache, body)


def test_a_lagging_follower_is_dropped_through_the_facade(tmp_path: Path) -> None:
    cache = cache_with({0: (1, 3, (1, 2))})

    async def body(rm: ReplicaManager, facade: FakeFacade) -> None:
        await rm.on_partition(cache.partitions[(TOPIC, 0)], {})
        part = rm.leader_partition(TOPIC, 0)
        await part.append(batch(), acks=1, timeout_ms=1000)
        deadline = asyncio.get_running_loop().time() + 10
        while part.isr != (1,):  # the expiry loop runs every lag/2 = 50 ms
            assert asyncio.get_running_loop().time() < deadline, "the ISR did not shrink"
            await asyncio.sleep(0.02)
        state, version = facade.states[(TOPIC, 0)]
        assert state == LeaderAndIsr(1, 3, [1], 1) and part.zk_version == version == 1

    with_manager(tmp_path, cache, body, replica_lag_time_max_ms=100)


def test_the_high_watermark_survives_a_restart(tmp_path: Path) -> None:
    cache = cache_with({0: (1, 0, (1,))})

    async def write(rm: ReplicaManager, _: FakeFacade) -> None:
        await rm.on_partition(cache.partitions[(TOPIC, 0)], {})
        await rm.leader_partition(TOPIC, 0).append(batch(3), acks=-1, timeout_ms=1000)

    async def check(rm: ReplicaManager, _: FakeFacade) -> None:
        await rm.on_partition(cache.partitions[(TOPIC, 0)], {})
        assert rm.partitions[(TOPIC, 0)].high_watermark == 3

    with_manager(tmp_path, cache, write)
    with_manager(tmp_path, cache, check)


def test_log_dirs_describe_every_replica_log_with_its_size_and_end(tmp_path: Path) -> None:
    cache = cache_with({0: (1, 0, (1, 2, 3)), 1: (2, 0, (2, 3))})

    async def body(rm: ReplicaManager, _: FakeFacade) -> None:
        for p in (1, 0):
            await rm.on_partition(cache.partitions[(TOPIC, p)], {})
        await rm.leader_partition(TOPIC, 0).append(batch(3), acks=1, timeout_ms=1000)
        [log_dir] = rm.describe_log_dirs()
        assert log_dir.path == str(tmp_path) and log_dir.error is None
        assert [(r.topic, r.partition, r.log_end_offset, r.offset_lag, r.is_future) for r in log_dir.replicas] == [
            (TOPIC, 0, 3, 0, False), (TOPIC, 1, 0, 0, False)]  # sorted by partition, the follower's too
        assert log_dir.replicas[0].size > 0 and log_dir.replicas[1].size == 0

    with_manager(tmp_path, cache, body)
