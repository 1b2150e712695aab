"""The leader's checks of a follower's fetch (broker/replication/follower_fetch.py), against a partition double,
the real metadata cache and a throttle double: who may fetch, what a newer leader epoch does (re-read the state,
never demote), and that the replication quota caps and pays for the read."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.log.log import ReadResult
from broker.metadata.cache import MetadataCache
from broker.replication.follower_fetch import FollowerFetch, FollowerFetchService
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
)
from odradek.protocol.model import BrokerInfo

LEADER = 1


class FakePartition:
    topic, partition = "t", 0
    replicas, isr = (1, 2, 3), (1, 2)
    leader_epoch, log_start_offset, log_end_offset, high_watermark = 5, 0, 10, 8

    def __init__(self) -> None:
        self.reads: list[tuple[Any, ...]] = []
        self.acknowledged: list[tuple[int, int, int]] = []

    def acknowledge_follower(self, replica_id: int, offset: int, epoch: int) -> ReadResult:
        self.acknowledged.append((replica_id, offset, epoch))
        return ReadResult(b"", offset, 0, 10)

    async def read_for_follower(self, replica_id: int, offset: int, epoch: int, max_bytes: int, timeout_ms: int,
                                zero_copy: bool = False) -> ReadResult:
        self.reads.append((replica_id, offset, epoch, max_bytes, timeout_ms, zero_copy))
        return ReadResult(b"x" * 7, offset + 1, 0, 10)


class FakeBucket:
    def __init__(self, debt_s: float = 0.0) -> None:
        self.spent: list[int] = []
        self.debt_s = debt_s

    def cap(self, max_bytes: int) -> int:
        return min(max_bytes, 100)

    def delay(self) -> float:
        return self.debt_s

    def record(self, size: int) -> float:
        self.spent.append(size)
        return 0.0


def _service(bucket: FakeBucket | None = None) -> tuple[FollowerFetchService, list[tuple[str, int]]]:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "h", 9000 + b, epoch=100 + b) for b in (1, 2, 3)}
    throttle = SimpleNamespace(leader_limit=lambda topic, partition, in_isr: bucket)
    rereads: list[tuple[str, int]] = []
    service = FollowerFetchService(LEADER, cache, throttle,  # type: ignore[arg-type]
                                   reread_state=lambda topic, partition: rereads.append((topic, partition)))
    return service, rereads


def _fetch(replica_id: int = 2, replica_epoch: int = 102, leader_epoch: int = 5, offset: int = 4) -> FollowerFetch:
    return FollowerFetch(replica_id, replica_epoch, leader_epoch, offset, max_bytes=1000, timeout_ms=50)


@pytest.mark.parametrize(("fetch", "error"), [
    (_fetch(replica_id=LEADER, replica_epoch=101), NotLeaderOrFollowerError),  # the leader itself
    (_fetch(replica_id=99), NotLeaderOrFollowerError),  # not assigned
    (_fetch(replica_epoch=7), StaleBrokerEpochError),  # a stale incarnation
    (_fetch(replica_epoch=-1), StaleBrokerEpochError),  # no epoch at all
    (_fetch(offset=11), OffsetOutOfRangeError),  # claims records that do not exist
])
def test_a_fetch_that_may_not_move_the_followers_state_is_refused(fetch: FollowerFetch, error: type) -> None:
    service, rereads = _service()
    part = FakePartition()
    with pytest.raises(error):
        asyncio.run(service.fetch(part, fetch))  # type: ignore[arg-type]
    assert part.reads == [] and rereads == []


def test_an_unregistered_replica_is_not_available() -> None:
    service, _ = _service()
    service._cache.brokers.pop(3)
    with pytest.raises(BrokerNotAvailableError):
        service.validate(FakePartition(), _fetch(replica_id=3, replica_epoch=103))  # type: ignore[arg-type]


def test_a_newer_leader_epoch_asks_for_the_state_to_be_reread_and_reads_nothing() -> None:
    service, rereads = _service()
    part = FakePartition()
    with pytest.raises(UnknownLeaderEpochError) as e:
        asyncio.run(service.fetch(part, _fetch(leader_epoch=6)))  # type: ignore[arg-type]
    assert e.value.details["leader_epoch"] == 5
    assert rereads == [("t", 0)] and part.reads == []


def test_a_valid_fetch_reads_at_its_offset_and_epoch_within_the_quota() -> None:
    bucket = FakeBucket()
    service, rereads = _service(bucket)
    part = FakePartition()
    result = asyncio.run(service.fetch(part, _fetch(offset=10)))  # type: ignore[arg-type]
    assert part.reads == [(2, 10, 5, 100, 50, True)]  # the quota caps max_bytes; the log end itself is fine
    assert bucket.spent == [len(result.data)] and rereads == []


def test_without_a_quota_the_fetch_reads_its_max_bytes() -> None:
    service, _ = _service(None)
    part = FakePartition()
    asyncio.run(service.fetch(part, _fetch()))  # type: ignore[arg-type]
    assert part.reads[0][3] == 1000


@pytest.mark.parametrize(("debt_s", "timeout_ms", "waited"), [(0.2, 5000, 0.2), (5.0, 100, 0.1), (5.0, 0, 0.0)])
def test_over_the_quota_the_partition_is_answered_empty_once_the_debt_or_the_wait_is_over_and_acknowledged(
        debt_s: float, timeout_ms: int, waited: float) -> None:
    bucket = FakeBucket(debt_s)
    service, _ = _service(bucket)
    part = FakePartition()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        fetch = FollowerFetch(2, 102, 5, 9, max_bytes=1000, timeout_ms=timeout_ms)
        result = await service.fetch(part, fetch)  # type: ignore[arg-type]
        assert result.data == b""
        return loop.time() - started

    elapsed = asyncio.run(main())
    assert part.reads == [] and bucket.spent == []  # nothing read, nothing spent
    assert part.acknowledged == [(2, 9, 5)]  # the offset acknowledges all the same
    assert waited - 0.02 <= elapsed <= waited + 0.15  # never longer than the fetch may wait, nor the debt lasts
