"""acks=all waiters as Kafka's produce purgatory keeps them: each is resumed once the high watermark reaches its
offset, not at every advance; role, epoch and ISR changes resume them all (to re-check); waiters that time out
are dropped. And reads whose bytes are in the page cache (a follower's, a consumer's) are done on the loop, without
a storage hop. Real log on tmp_path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.replication.partition import READ_HERE_MAX_BYTES, InlineStorage, Partition
from odradek.protocol.errors import NotLeaderOrFollowerError, RequestTimedOutError
from tests.harness.wait import SLOW_MACHINE_S
from tests.unit.log.helpers import DROP_ATTEMPTS, drop_from_page_cache, nowait_supported

from .fakes import batch, config, info, make_partition, settle

T = TypeVar("T")


def test_a_waiter_resumes_only_when_the_high_watermark_reaches_its_offset(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config(min_isr=2))
        resumed: list[int] = []
        original = part._wait_committed

        async def counted(offset: int, epoch: int, timeout_ms: int) -> None:
            await original(offset, epoch, timeout_ms)
            resumed.append(offset)

        part._wait_committed = counted  # type: ignore[method-assign]
        produces = [asyncio.create_task(part.append(batch(2), acks=-1, timeout_ms=10_000)) for _ in range(5)]
        await settle()
        assert part.log_end_offset == 10 and len(part._commit_waiters) == 5  # offsets 2, 4, 6, 8, 10
        for acked in range(1, 10):  # the follower acknowledges one offset at a time: nine advances
            await part.read_for_follower(2, acked, 0, 1 << 20, 0)
            await settle()
            assert part.high_watermark == acked
            assert resumed == list(range(2, acked + 1, 2))  # exactly those reached, in offset order
            assert len(part._commit_waiters) == 5 - acked // 2  # the others were not even resumed
        assert not produces[-1].done()
        await part.read_for_follower(2, 10, 0, 1 << 20, 0)
        results = await asyncio.wait_for(asyncio.gather(*produces), SLOW_MACHINE_S)
        assert [r.last_offset for r in results] == [1, 3, 5, 7, 9] and not part._commit_waiters

    asyncio.run(main())


def test_losing_leadership_resumes_every_waiter_with_not_leader(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config(min_isr=2))
        produces = [asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000)) for _ in range(3)]
        await settle()
        await part.apply(info(2, 1, (1, 2), version=1), config(min_isr=2))  # broker 2 leads now
        for produce in produces:
            with pytest.raises(NotLeaderOrFollowerError) as e:
                await asyncio.wait_for(produce, SLOW_MACHINE_S)
            assert e.value.details.get("possibly_appended") or "may or may not survive" in str(e.value)
        assert not part._commit_waiters

    asyncio.run(main())


def test_timed_out_waiters_do_not_pile_up(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config())  # broker 2 never fetches: nothing commits
        for _ in range(3):
            outcomes = await asyncio.gather(*(part.append(batch(), acks=-1, timeout_ms=20) for _ in range(100)),
                                            return_exceptions=True)
            assert all(isinstance(o, RequestTimedOutError) for o in outcomes)
        assert part.log_end_offset == 300
        assert len(part._commit_waiters) <= 130  # compacted as they time out (not 300 dead ones)
        assert all(w[2].done() for w in part._commit_waiters)
        await part.read_for_follower(2, 300, 0, 1 << 20, 0)  # the dead are dropped when reached
        assert not part._commit_waiters and part._live_waiters == 0

    asyncio.run(main())


class CountingStorage(InlineStorage):
    def __init__(self) -> None:
        self.jobs: list[str] = []

    async def run(self, key: Any, fn: Any, *args: Any, then: Any = None, discard: Any = None) -> Any:
        self.jobs.append(fn.__name__)
        return await super().run(key, fn, *args, then=then, discard=discard)


async def _counting(tmp_path: Path, replicas: tuple[int, ...]) -> tuple[Partition, CountingStorage]:
    """A leader of ``replicas`` whose storage hops are counted, with 3 records appended."""
    part, _, _ = make_partition(tmp_path)
    storage = CountingStorage()
    part._storage = storage
    await part.apply(info(1, 0, replicas), config())
    await part.append(batch(3), acks=1, timeout_ms=1000)
    return part, storage


async def _read_dropped(part: Partition, storage: CountingStorage, read: Callable[[], Awaitable[T]]) -> T:
    """``read`` once the kernel has dropped the log's pages: it must take one storage hop more (retried while the
    kernel keeps pages, see ``drop_from_page_cache``); each try must answer the same."""
    hops = storage.jobs.count("read")
    answers = []
    for _ in range(DROP_ATTEMPTS):
        drop_from_page_cache(part.log)
        answers.append(await read())
        if storage.jobs.count("read") > hops:
            break
    assert storage.jobs.count("read") == hops + 1 and all(a == answers[0] for a in answers)
    return answers[0]


def test_a_caught_up_followers_look_is_read_on_the_loop_a_lagging_ones_when_cached(tmp_path: Path) -> None:
    if not nowait_supported(tmp_path):
        pytest.skip("this filesystem does not read with RWF_NOWAIT")

    async def main() -> None:
        part, storage = await _counting(tmp_path, (1, 2))
        # First look, its bytes not cached: on the executor.
        await _read_dropped(part, storage, lambda: part.read_for_follower(2, 0, 0, 1 << 20, 0))
        await part.read_for_follower(2, 3, 0, 1 << 20, 0)  # caught up: at the log end, nothing to read
        await part.append(batch(2), acks=1, timeout_ms=1000)
        fresh = await part.read_for_follower(2, 3, 0, 1 << 20, 0)  # what was appended since its last look
        assert fresh.data and storage.jobs.count("read") == 1  # read here, not on the executor
        await part.append(batch(2), acks=1, timeout_ms=1000)
        await part.append(batch(2), acks=1, timeout_ms=1000)
        behind = await part.read_for_follower(2, 0, 0, 1 << 20, 0)  # behind its previous look, cached
        assert behind.data and storage.jobs.count("read") == 1
        again = await _read_dropped(part, storage, lambda: part.read_for_follower(2, 0, 0, 1 << 20, 0))
        assert again == behind
        # A caught-up follower's next look whose pages are gone (CI met a 0.31 s pread on the loop): on the executor,
        # never waited for on the loop.
        hops = storage.jobs.count("read")
        for _ in range(DROP_ATTEMPTS):
            end = part.log_end_offset
            await part.read_for_follower(2, end, 0, 1 << 20, 0)  # caught up: its next look is a fresh one
            await part.append(batch(2), acks=1, timeout_ms=1000)
            drop_from_page_cache(part.log)
            look = await part.read_for_follower(2, end, 0, 1 << 20, 0)
            assert look.next_offset == end + 2
            if storage.jobs.count("read") > hops:
                break
        assert storage.jobs.count("read") == hops + 1

    asyncio.run(main())


def test_a_consumers_read_of_cached_bytes_is_done_on_the_loop_else_on_a_storage_thread(tmp_path: Path) -> None:
    """``Partition.read``: what the page cache holds is read without the storage hop; bytes the kernel dropped
    and a read larger than ``READ_HERE_MAX_BYTES`` take the hop, and answer the same."""
    if not nowait_supported(tmp_path):
        pytest.skip("this filesystem does not read with RWF_NOWAIT")

    async def main() -> None:
        part, storage = await _counting(tmp_path, (1,))
        for _ in range(4):
            await part.append(batch(3), acks=1, timeout_ms=1000)
        here = await part.read(0, 1 << 20, 0)
        assert here.data and storage.jobs.count("read") == 0
        assert await _read_dropped(part, storage, lambda: part.read(0, 1 << 20, 0)) == here
        large = await part.read(0, READ_HERE_MAX_BYTES + 1, 0)
        assert storage.jobs.count("read") == 2 and large == here

    asyncio.run(main())
