"""The storage executor keeps each partition's work in order and does not let one partition's slow disk work
(an fsync per append) hold up another's."""

from __future__ import annotations

import asyncio
import threading
import time

from broker.log.executor import BURST, StorageExecutor


def test_work_under_one_key_runs_in_submission_order() -> None:
    ex = StorageExecutor(threads=4)
    seen: list[int] = []
    futures = [ex.submit("p0", seen.append, i) for i in range(BURST * 3 + 1)]
    for f in futures:
        f.result(5)
    assert seen == list(range(BURST * 3 + 1))
    ex.shutdown()


def test_a_blocked_key_does_not_block_another() -> None:
    ex = StorageExecutor(threads=2)
    release = threading.Event()
    slow = ex.submit("slow", release.wait, 10)
    queued_behind = ex.submit("slow", lambda: "after")
    fast = ex.submit("fast", lambda: "done")
    assert fast.result(2) == "done"  # ran while "slow" is stuck
    assert not queued_behind.done()  # but the same key waits its turn
    release.set()
    assert slow.result(2) and queued_behind.result(2) == "after"
    ex.shutdown()


def test_errors_reach_the_awaiting_caller_and_the_queue_goes_on() -> None:
    async def main() -> None:
        ex = StorageExecutor(threads=1)

        def boom() -> None:
            raise OSError("disk")

        try:
            await ex.run("p", boom)
        except OSError as e:
            assert str(e) == "disk"
        else:
            raise AssertionError("no error")
        assert await ex.run("p", time.monotonic) > 0
        ex.shutdown()

    asyncio.run(main())


def test_shutdown_finishes_what_is_queued() -> None:
    ex = StorageExecutor(threads=1)
    seen: list[int] = []
    futures = [ex.submit("k", seen.append, i) for i in range(BURST * 2)]
    ex.shutdown()
    assert all(f.done() for f in futures) and seen == list(range(BURST * 2))


def test_then_runs_on_the_loop_even_when_the_caller_was_cancelled() -> None:
    async def main() -> None:
        ex = StorageExecutor(threads=1)
        release = threading.Event()
        woken: list[str] = []
        task = asyncio.create_task(ex.run("p", release.wait, 10, then=lambda: woken.append("then")))
        await asyncio.sleep(0.05)
        task.cancel()  # e.g. the client went away while its append was being written
        release.set()
        deadline = time.monotonic() + 5
        while not woken:
            assert time.monotonic() < deadline, "then did not run"
            await asyncio.sleep(0.01)
        assert task.cancelled()
        ex.shutdown()

    asyncio.run(main())
