"""The follower's truncation before fetching: a divergent tail is cut at the leader's end of our latest epoch
(KIP-101/279), never by high watermark alone. The leader's answer comes from a fake inter-broker client."""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path
from typing import Any

from broker.log.executor import StorageExecutor
from broker.log.log import Log
from broker.replication.partition import FOLLOWER, Partition
from broker.replication.replica_fetcher import FollowerFetcher

from .fakes import FakeIsrManager, batch, config, info, make_partition


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


def _replicated(base_offset: int, leader_epoch: int) -> bytes:
    """A one-record batch as a leader of ``leader_epoch`` wrote it at ``base_offset`` (neither field is under the
    batch CRC, which starts at the attributes)."""
    data = batch(1)
    struct.pack_into(">qiI", data, 0, base_offset, len(data) - 12, leader_epoch)
    return bytes(data)


async def _storage_follower(tmp_path: Path) -> tuple[Any, StorageExecutor]:
    """Broker 2 following broker 3 in epoch 2, with [0, 5) of epoch 1, on a real storage executor (so disk jobs
    queue and run on its threads, as on a broker)."""
    storage = StorageExecutor("test-storage", threads=2)
    log = Log.open(tmp_path / "t-0-b2")
    log.high_watermark = 0
    part = Partition("t", 0, 2, log, FakeIsrManager(), lambda b: f"http://broker-{b}", storage=storage)
    await part.apply(info(3, 1, (3, 2), version=1), config())
    await part.append_replicated(b"".join(_replicated(o, 1) for o in range(5)), 5, 1)
    await part.apply(info(3, 2, (3, 2), version=2), config())
    return part, storage


def test_a_fetch_answered_before_a_new_leader_epoch_is_dropped_if_it_reaches_the_disk_after_it(
        tmp_path: Path) -> None:
    """The previous state's fetcher had its answer on the storage queue when the new state (epoch 3) was applied:
    appending it then would put epoch 2's records after the new epoch's truncation. It is dropped."""
    async def main() -> None:
        part, storage = await _storage_follower(tmp_path)
        gate = threading.Event()
        blocked = asyncio.create_task(part._run(gate.wait))  # the queue is busy with earlier work
        late = asyncio.create_task(part.append_replicated(_replicated(5, 2), 6, 2))
        await asyncio.sleep(0.05)
        await part.apply(info(1, 3, (1, 2, 3), version=3), config())
        gate.set()
        assert await late is False
        await blocked
        assert part.log_end_offset == 5 and part.log.epoch_cache.latest_epoch == 1
        storage.shutdown()

    asyncio.run(main())


def test_a_fetch_still_landing_when_the_new_epoch_begins_is_judged_by_its_truncation(
        tmp_path: Path, monkeypatch: Any) -> None:
    """verify's 30-minute run: broker 2 followed broker 3 in epoch 195; its last fetch was mid-append when broker
    1 became leader in epoch 196. The new fetcher read the log end before that append finished, found nothing to
    cut, and fetched on after it: offset 48680 held epoch 195's record on broker 2 and epoch 196's elsewhere. The
    new fetcher now judges the log after the append, and cuts it."""
    from broker.replication import partition as partition_module

    entered, release = threading.Event(), threading.Event()
    real_append = partition_module.follower_append

    def slow_append(*args: Any, page_cache_only: bool = False) -> bool:
        if page_cache_only:  # on the loop: a new epoch's append is refused there and queued (epoch 2 is new here)
            return real_append(*args, page_cache_only=True)
        entered.set()
        release.wait(5)
        return real_append(*args)

    async def main() -> None:
        part, storage = await _storage_follower(tmp_path)
        monkeypatch.setattr(partition_module, "follower_append", slow_append)
        late = asyncio.create_task(part.append_replicated(_replicated(5, 2), 6, 2))
        await asyncio.to_thread(entered.wait, 5)  # past the epoch check, writing
        await part.apply(info(1, 3, (1, 2, 3), version=3), config())
        session = FakeSession({2: (1, 5), 1: (1, 5)})  # the new leader never saw epoch 2
        truncation = asyncio.create_task(FollowerFetcher(part, session, 2)._truncate())  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        release.set()
        await late
        await truncation
        assert session.asked == [2]  # asked about the epoch the late append brought
        assert part.log_end_offset == 5 and part.log.epoch_cache.entries() == [(1, 0)]
        storage.shutdown()

    asyncio.run(main())


def test_a_small_append_in_a_known_epoch_is_written_on_the_loop_and_a_new_epochs_on_a_storage_thread(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A follower's append that is only a page-cache write skips the storage hop (two thread wake-ups); one that
    begins an epoch (the checkpoint's fsync) or finds its partition's queue busy still goes through the queue."""
    from broker.replication import partition as partition_module

    calls: list[tuple[bool, bool, bool]] = []
    real_append = partition_module.follower_append

    def spy(*args: Any, page_cache_only: bool = False) -> bool:
        ok = real_append(*args, page_cache_only=page_cache_only)
        calls.append((threading.get_ident() == loop_thread, page_cache_only, ok))
        return ok

    loop_thread = threading.get_ident()

    async def main() -> None:
        part, storage = await _storage_follower(tmp_path)
        monkeypatch.setattr(partition_module, "follower_append", spy)
        assert await part.append_replicated(_replicated(5, 2), 6, 2)
        assert await part.append_replicated(_replicated(6, 2), 7, 2)
        gate = threading.Event()
        blocked = asyncio.create_task(part._run(gate.wait))  # the partition's queue is busy
        late = asyncio.create_task(part.append_replicated(_replicated(7, 2), 8, 2))
        await asyncio.sleep(0.05)
        gate.set()
        assert await late
        await blocked
        assert part.log_end_offset == 8 and part.log.high_watermark == 8
        assert part.log.epoch_cache.entries() == [(1, 0), (2, 5)]
        storage.shutdown()

    asyncio.run(main())
    assert calls == [(True, True, False), (False, False, True),  # epoch 2 begins: refused here, then queued
                     (True, True, True),  # on the loop, no hop
                     (False, False, True)]  # behind a busy queue: queued, never run here
