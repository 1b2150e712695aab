"""The storage executor keeps each partition's work in order and does not let one partition's slow disk work
(an fsync per append) hold up another's."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

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


def test_results_that_finish_together_go_back_to_the_loop_in_one_wake_up_each_exactly_once() -> None:
    executor = StorageExecutor(threads=4)
    gate = threading.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        wakes = 0
        real = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any) -> Any:
            nonlocal wakes
            wakes += 1
            return real(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        jobs = [asyncio.ensure_future(executor.run(("p", i % 4), lambda i=i: gate.wait() and i)) for i in range(40)]
        await asyncio.sleep(0.05)
        gate.set()  # all forty finish at about the same time, on four threads
        assert await asyncio.gather(*jobs) == list(range(40))
        assert wakes < 40  # most rode along with an earlier wake-up

    try:
        asyncio.run(run())
    finally:
        executor.shutdown()


def test_an_error_completing_one_result_does_not_strand_the_others() -> None:
    executor = StorageExecutor(threads=1)

    async def run() -> None:
        ok = asyncio.ensure_future(executor.run("k", lambda: 2))
        broken = asyncio.ensure_future(executor.run("k", lambda: 1, then=lambda: 1 / 0))
        after = asyncio.ensure_future(executor.run("k", lambda: 3))
        assert await ok == 2
        assert await after == 3
        with contextlib.suppress(Exception):
            await asyncio.wait_for(broken, 0.2)

    try:
        asyncio.run(run())
    finally:
        executor.shutdown()


def test_a_result_whose_caller_was_cancelled_is_discarded_not_dropped() -> None:
    """A zero-copy read cancelled while its storage thread works: the file ranges it returns are closed."""
    executor = StorageExecutor(threads=1)
    gate = threading.Event()
    discarded: list[str] = []

    async def run() -> None:
        task = asyncio.ensure_future(executor.run(None, lambda: gate.wait() and "fds", discard=discarded.append))
        await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gate.set()
        for _ in range(100):
            if discarded:
                break
            await asyncio.sleep(0.01)
        kept = await executor.run(None, lambda: "kept", discard=discarded.append)
        assert kept == "kept"

    try:
        asyncio.run(run())
    finally:
        executor.shutdown()
    assert discarded == ["fds"]  # the one nobody took; the awaited one was not discarded


def test_run_here_runs_on_the_callers_thread_only_while_its_key_is_idle() -> None:
    ex = StorageExecutor(threads=2)
    assert ex.run_here("p0", threading.get_ident) == threading.get_ident()
    assert not ex._threads  # no hop: no storage thread was even started
    release = threading.Event()
    busy = ex.submit("p0", release.wait, 10)
    assert ex.run_here("p0", lambda: "ran") is None  # a job of the key is running: the caller queues instead
    assert ex.run_here("p1", lambda: "ran") == "ran"  # another key is not held up
    release.set()
    busy.result(2)
    deadline = time.monotonic() + 2
    while ex.run_here("p0", lambda: "ran") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ex.run_here("p0", lambda: "ran") == "ran"
    ex.shutdown()


def test_a_job_queued_by_another_thread_during_a_run_here_waits_for_it() -> None:
    ex = StorageExecutor(threads=2)
    order: list[str] = []
    queued: list[Any] = []

    def here() -> str:
        t = threading.Thread(target=lambda: queued.append(ex.submit("p0", order.append, "queued")))
        t.start()
        t.join()
        time.sleep(0.05)  # a worker would have run it by now, had the key not been held
        order.append("here")
        return "done"

    assert ex.run_here("p0", here) == "done"
    queued[0].result(2)
    assert order == ["here", "queued"]
    ex.shutdown()


def test_a_run_here_that_stalls_pauses_runs_here(monkeypatch: Any) -> None:
    from broker.log import executor

    monkeypatch.setattr(executor, "HERE_STALL_S", 0.01)
    ex = StorageExecutor(threads=1)
    assert ex.run_here("p0", lambda: time.sleep(0.05) or "slow") == "slow"  # the stalled run itself did run
    assert ex.run_here("p1", lambda: "ran") is None  # paused: the caller hops to the storage threads
    ex._here_paused_until = 0.0
    assert ex.run_here("p1", lambda: "ran") == "ran"
    ex.shutdown()


def test_a_key_is_idle_as_soon_as_its_last_result_is_back() -> None:
    """The worker lets the key go before handing the result back: a caller going on at once may run here."""
    async def main() -> None:
        ex = StorageExecutor(threads=2)
        for i in range(200):
            assert await ex.run("p0", abs, -i) == i
            assert ex.run_here("p0", lambda: "here") == "here", f"key still held after round {i}"
        ex.shutdown()

    asyncio.run(main())
