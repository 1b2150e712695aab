"""The follower's truncation before fetching: a divergent tail is cut at the leader's end of our latest epoch
(KIP-101/279), never by high watermark alone. The leader's answer comes from a fake inter-broker client."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.replication.partition import FOLLOWER
from broker.replication.replica_fetcher import FollowerFetcher

from .fakes import batch, config, info, make_partition


class FakeReply:
    def __init__(self, body: dict[str, Any]) -> None:
        self._body = body

    def json(self) -> dict[str, Any]:
        return self._body


class FakeSession:
    """An InterBrokerClient that answers epoch_end_offset from a table: requested epoch -> (leader's epoch,
    end offset)."""

    def __init__(self, answers: dict[int, tuple[int, int]]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    async def send(self, node_id: int, request: Any) -> FakeReply:
        assert request.path.endswith("/epoch_end_offset")
        epoch = int(request.params["leader_epoch"])
        self.asked.append(epoch)
        leader_epoch, end = self.answers[epoch]
        return FakeReply({"leader_epoch": leader_epoch, "end_offset": end})


async def follower_with_history(tmp_path: Path, epochs: list[tuple[int, int]]) -> Any:
    """A replica (broker 2) whose log holds ``count`` records written in each ``(epoch, count)``."""
    part, _, _ = make_partition(tmp_path, broker_id=2)
    for epoch, count in epochs:
        await part.apply(info(2, epoch, (2,), version=epoch), config())
        for _ in range(count):  # one record per batch: truncation cuts whole batches
            await part.append(batch(1), acks=1, timeout_ms=1000)
    return part


def test_a_divergent_tail_is_cut_at_the_leaders_end_of_our_latest_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        part = await follower_with_history(tmp_path, [(1, 5), (2, 3)])  # epoch 1: [0, 5); epoch 2: [5, 8)
        await part.apply(info(3, 4, (3, 2), version=10), config())
        assert part.role == FOLLOWER
        # The new leader never saw epoch 2: its answer is (1, 5), where epoch 1 ended in its log.
        session = FakeSession({2: (1, 5)})
        fetcher = FollowerFetcher(part, session, 2)  # type: ignore[arg-type]
        await fetcher._truncate()
        assert session.asked == [2]
        assert part.log_end_offset == 5 and part.log.epoch_cache.entries() == [(1, 0)]

    asyncio.run(main())


def test_the_same_latest_epoch_truncates_to_the_leaders_end_only_if_shorter(tmp_path: Path) -> None:
    async def main() -> None:
        part = await follower_with_history(tmp_path, [(1, 6)])
        await part.apply(info(3, 2, (3, 2), version=10), config())
        fetcher = FollowerFetcher(part, FakeSession({1: (1, 4)}), 2)  # type: ignore[arg-type]
        await fetcher._truncate()
        assert part.log_end_offset == 4
        fetcher = FollowerFetcher(part, FakeSession({1: (1, 9)}), 2)  # type: ignore[arg-type]
        await fetcher._truncate()
        assert part.log_end_offset == 4  # never extended, never cut further

    asyncio.run(main())


def test_an_older_epoch_answer_uses_our_own_end_of_that_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        part = await follower_with_history(tmp_path, [(1, 5), (3, 4)])  # epoch 1: [0, 5); epoch 3: [5, 9)
        await part.apply(info(4, 5, (4, 2), version=10), config())
        # The leader knows epochs up to 2 (< our 3): it answers (2, 7); epoch 2 ended at 7 in its log, but in
        # ours the largest epoch <= 2 (epoch 1) ended at 5: we keep the shorter, 5.
        fetcher = FollowerFetcher(part, FakeSession({3: (2, 7)}), 2)  # type: ignore[arg-type]
        await fetcher._truncate()
        assert part.log_end_offset == 5

    asyncio.run(main())
