"""A leader's append that is only a page-cache write, while its partition's storage queue is idle, is done on the
event loop (no storage hop's two thread wake-ups); anything that would wait on more goes through the queue, in the
partition's order. The follower's side is in test_fetcher_truncation.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.log import Log
from broker.log.executor import StorageExecutor
from broker.replication import partition as partition_module
from broker.replication.partition import APPEND_HERE_MAX_BYTES, APPEND_HERE_WITH_ROOM_MAX_BYTES, Partition

from ..log.helpers import config as log_config
from .fakes import TOPIC, FakeIsrManager, batch, config, info


class LoopLoadAt:
    """The loop's load as a test sets it (broker/log/loop_load.py measures it)."""

    def __init__(self, saturated: bool) -> None:
        self.value = saturated

    def saturated(self) -> bool:
        return self.value


def _leader(tmp_path: Path, *, loop_saturated: bool = True,
            **log_settings: object) -> tuple[Partition, StorageExecutor]:
    storage = StorageExecutor("test-storage", threads=2)
    storage.loop_load = LoopLoadAt(loop_saturated)  # type: ignore[assignment]
    log = Log.open(tmp_path / f"{TOPIC}-0-b1", log_config(**log_settings) if log_settings else None)
    log.high_watermark = 0
    return Partition(TOPIC, 0, 1, log, FakeIsrManager(), lambda b: f"http://broker-{b}", storage=storage), storage


@pytest.fixture
def where(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool, bool]]:
    """Each leader_append: (on the loop's thread, asked to write the page cache only, appended)."""
    calls: list[tuple[bool, bool, bool]] = []
    real = partition_module.leader_append
    loop_thread = threading.get_ident()

    def spy(*args: Any) -> Any:
        result = real(*args)
        calls.append((threading.get_ident() == loop_thread, bool(args[7:] and args[7]), result is not None))
        return result

    monkeypatch.setattr(partition_module, "leader_append", spy)
    return calls


def test_a_leaders_small_append_is_written_on_the_loop_and_a_large_one_on_a_storage_thread_when_the_loop_is_busy(
        tmp_path: Path, where: list[tuple[bool, bool, bool]]) -> None:
    async def main() -> None:
        part, storage = _leader(tmp_path)
        await part.apply(info(1, 1, (1,), replicas=(1,)), config())
        first = await part.append(batch(3), acks=1, timeout_ms=1000)
        big = batch(1, value=b"x" * (APPEND_HERE_MAX_BYTES + 1))
        second = await part.append(big, acks=1, timeout_ms=1000)
        assert (first.first_offset, second.first_offset, part.log_end_offset, part.high_watermark) == (0, 3, 4, 4)
        storage.shutdown()

    asyncio.run(main())
    assert where == [(True, True, True),  # on the loop
                     (False, False, True)]  # too large for a saturated loop: queued


def test_with_room_on_the_loop_a_large_append_is_written_there_too_up_to_its_bound(
        tmp_path: Path, where: list[tuple[bool, bool, bool]]) -> None:
    """The hop buys a copy beside a busy loop; with room on the loop it is only two thread wake-ups more."""
    async def main() -> None:
        part, storage = _leader(tmp_path, loop_saturated=False)
        await part.apply(info(1, 1, (1,), replicas=(1,)), config())
        await part.append(batch(1), acks=1, timeout_ms=1000)  # the epoch's first records: the checkpoint's fsync
        where.clear()
        large = await part.append(batch(1, value=b"x" * (APPEND_HERE_MAX_BYTES + 1)), acks=1, timeout_ms=1000)
        half = batch(1, value=b"x" * (APPEND_HERE_WITH_ROOM_MAX_BYTES // 2 + 1))  # two: beyond the bound
        huge = await part.append(half + half, acks=1, timeout_ms=1000)
        storage.loop_load.value = True  # type: ignore[attr-defined]
        busy = await part.append(batch(1, value=b"x" * (APPEND_HERE_MAX_BYTES + 1)), acks=1, timeout_ms=1000)
        assert (large.first_offset, huge.first_offset, busy.first_offset, part.log_end_offset) == (1, 2, 4, 5)
        storage.shutdown()

    asyncio.run(main())
    assert where == [(True, True, True),  # larger than the small bound, but the loop has room
                     (False, False, True),  # larger than the bound for a loop with room: queued
                     (False, False, True)]  # the loop saturated: queued


def test_an_append_that_would_fsync_or_meets_a_busy_queue_goes_through_the_queue(
        tmp_path: Path, where: list[tuple[bool, bool, bool]]) -> None:
    async def main() -> None:
        part, storage = _leader(tmp_path, flush_messages=3)
        await part.apply(info(1, 1, (1,), replicas=(1,)), config())
        await part.append(batch(2), acks=1, timeout_ms=1000)  # 2 unflushed: on the loop
        await part.append(batch(2), acks=1, timeout_ms=1000)  # would reach flush.messages: an fsync, queued
        gate = threading.Event()
        blocked = asyncio.create_task(part._run(gate.wait))  # the partition's queue is busy
        late = asyncio.create_task(part.append(batch(1), acks=1, timeout_ms=1000))
        await asyncio.sleep(0.05)
        assert not late.done()  # behind the queue's job, never beside it
        gate.set()
        assert (await late).first_offset == 4
        await blocked
        assert part.log_end_offset == 5 and part.log.recovery_point >= 4
        storage.shutdown()

    asyncio.run(main())
    assert where == [(True, True, True),
                     (True, True, False), (False, False, True),  # refused on the loop (the fsync), then queued
                     (False, False, True)]  # the queue was busy: queued without a try on the loop
