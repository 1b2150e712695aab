"""DeleteRecords: the leader moves its log start offset (never past its high watermark, never on a topic without
the delete policy), and a follower takes the leader's log start from its fetch answers, bounded by its own high
watermark. Real logs on tmp_path; the follower's leader answers through a fake inter-broker client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.log.config import LogConfig
from broker.replication.replica_fetcher import FollowerFetcher
from odradek.protocol import media
from odradek.protocol.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError, PolicyViolationError

from .fakes import batch, config, info, make_partition


async def leader_with(tmp_path: Path, records: int) -> Any:
    """Broker 1 leading a one-replica partition holding ``records`` records, all committed."""
    part, _, _ = make_partition(tmp_path, broker_id=1)
    await part.apply(info(1, 0, (1,), replicas=(1,)), config())
    for _ in range(records):
        await part.append(batch(1), acks=1, timeout_ms=1000)
    assert part.high_watermark == records
    return part


def test_the_leader_moves_its_log_start_up_to_the_offset_asked(tmp_path: Path) -> None:
    async def main() -> None:
        part = await leader_with(tmp_path, 10)
        assert await part.delete_records(6) == 6 and part.log_start_offset == 6
        with pytest.raises(OffsetOutOfRangeError):
            await part.read(5, 1 << 20, 0)
        assert (await part.read(6, 1 << 20, 0)).data
        assert await part.delete_records(3) == 6  # never backwards
        assert await part.delete_records(-1) == 10  # -1: the high watermark
        for bad in (11, -2):
            with pytest.raises(OffsetOutOfRangeError):
                await part.delete_records(bad)

    asyncio.run(main())


def test_only_the_leader_deletes_and_only_with_the_delete_policy(tmp_path: Path) -> None:
    async def main() -> None:
        part = await leader_with(tmp_path, 3)
        part.log.update_config(LogConfig(cleanup_policy=frozenset({"compact"})))
        with pytest.raises(PolicyViolationError):
            await part.delete_records(1)
        part.log.update_config(LogConfig(cleanup_policy=frozenset({"compact", "delete"})))
        assert await part.delete_records(1) == 1
        await part.apply(info(2, 1, (1, 2), replicas=(1, 2), version=1), config())
        with pytest.raises(NotLeaderOrFollowerError):
            await part.delete_records(2)

    asyncio.run(main())


class Reply:
    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        self.body = body
        self.headers = headers


class LeaderSession:
    """An InterBrokerClient whose fetch answers are the leader partition's reads, with its offsets as headers."""

    def __init__(self, leader: Any) -> None:
        self.leader = leader

    async def send(self, node_id: int, request: Any) -> Reply:
        assert request.path.endswith("/batches")
        offset = int(request.params["offset"])
        read = await self.leader.read_for_follower(2, offset, 0, 1 << 20, 0)
        return Reply(read.data, {media.HIGH_WATERMARK: str(self.leader.high_watermark),
                                 media.LOG_START_OFFSET: str(self.leader.log_start_offset)})


def test_a_follower_takes_the_leaders_log_start_bounded_by_its_high_watermark(tmp_path: Path) -> None:
    async def main() -> None:
        leader, _, _ = make_partition(tmp_path, broker_id=1)
        follower, _, _ = make_partition(tmp_path, broker_id=2)
        state = info(1, 0, (1, 2), replicas=(1, 2))
        await leader.apply(state, config())
        await follower.apply(state, config())
        for _ in range(8):
            await leader.append(batch(1), acks=1, timeout_ms=1000)
        fetcher = FollowerFetcher(follower, LeaderSession(leader), 2)  # type: ignore[arg-type]
        await fetcher._fetch_once()  # the follower copies 8 records; the leader learns it only on the next fetch
        assert follower.log_end_offset == 8 and follower.high_watermark == 0
        await fetcher._fetch_once()
        assert leader.high_watermark == 8
        assert await leader.delete_records(5) == 5
        await fetcher._fetch_once()  # hw 8 and log start 5 reach the follower
        assert follower.high_watermark == 8 and follower.log_start_offset == 5
        await follower.follow_log_start(50)  # never past the follower's own high watermark
        assert follower.log_start_offset == 8

    asyncio.run(main())
