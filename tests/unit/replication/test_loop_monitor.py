"""The loop-lag monitor measures how late the loop runs a timer, exports it, and reports stalls over the
threshold (what the pause detector fences on)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry, Histogram

from broker.loop_monitor import LAG_BUCKETS, LoopMonitor, watch_gc
from tests.harness.wait import SLOW_MACHINE_S

THRESHOLD_S = 0.5  # a bucket boundary of LAG_BUCKETS, so the histogram can be checked against the stalls
BLOCK_S = 1.0  # the deliberate stall: twice the threshold


def test_a_blocked_loop_is_measured_and_reported_as_a_stall() -> None:
    """Real time, real loop: the lag of every tick is recorded, so the checks hold whatever else the machine is
    doing (a loaded machine may make an ordinary tick late, even over the threshold: that is a stall too, and
    must be reported as one; what cannot happen is a stall unreported or a lag reported that was not measured)."""

    async def main() -> None:
        registry = CollectorRegistry()
        hist = Histogram("lag", "lag", registry=registry, buckets=LAG_BUCKETS)
        stalls: list[float] = []
        monitor = LoopMonitor(hist, tick_s=0.01, stall_threshold_s=THRESHOLD_S, on_stall=stalls.append)
        lags: list[float] = []
        observe = monitor.observe

        def recording(lag_s: float) -> None:
            lags.append(max(0.0, lag_s))
            observe(lag_s)

        monitor.observe = recording  # type: ignore[method-assign]
        task = asyncio.create_task(monitor.run())
        deadline = time.monotonic() + SLOW_MACHINE_S
        while monitor.samples < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        before = len(stalls)
        time.sleep(BLOCK_S)  # block the loop, as a stall would
        while len(stalls) == before:
            assert time.monotonic() < deadline, "the blocked loop was not reported as a stall"
            await asyncio.sleep(0.01)
        task.cancel()
        # The tick pending during the block woke at least BLOCK_S - tick_s late, and was measured as such (not,
        # say, as an absolute time: the generous upper bound only leaves room for a loaded machine's delays).
        assert BLOCK_S - 0.01 <= stalls[-1] < BLOCK_S + SLOW_MACHINE_S
        assert stalls == [lag for lag in lags if lag > THRESHOLD_S]  # every stall reported, and nothing else
        assert monitor.max_lag_s == max(lags) and monitor.samples == len(lags)
        assert registry.get_sample_value("lag_count") == monitor.samples
        assert registry.get_sample_value("lag_bucket", {"le": str(THRESHOLD_S)}) == monitor.samples - len(stalls)

    asyncio.run(main())


def test_small_lags_are_only_recorded() -> None:
    stalls: list[float] = []
    monitor = LoopMonitor(None, stall_threshold_s=0.5, on_stall=stalls.append)
    for lag in (0.0, 0.2, -0.01, 0.49):
        monitor.observe(lag)
    assert not stalls and monitor.samples == 4 and monitor.max_lag_s == 0.49
    monitor.observe(0.6)
    assert stalls == [0.6]


def test_the_watchdog_logs_where_the_loop_is_blocked(caplog: pytest.LogCaptureFixture) -> None:
    """A stall names its cause: the watchdog thread logs the loop thread's stack while the loop is away, once
    per stall, with the blocking call in it."""

    def blocking_call_for_the_watchdog() -> None:
        time.sleep(BLOCK_S)

    async def main() -> LoopMonitor:
        monitor = LoopMonitor(None, tick_s=0.01, watch_s=0.2)
        task = asyncio.create_task(monitor.run())
        deadline = time.monotonic() + SLOW_MACHINE_S
        while monitor.samples < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        blocking_call_for_the_watchdog()
        await asyncio.sleep(0.05)
        task.cancel()
        return monitor

    with caplog.at_level(logging.WARNING, logger="broker.loop_monitor"):
        monitor = asyncio.run(main())
    blocked = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
    assert monitor.stacks_logged >= 1 and len(blocked) == monitor.stacks_logged
    assert any("blocking_call_for_the_watchdog" in m and "time.sleep(BLOCK_S)" in m for m in blocked), blocked


def test_every_garbage_collection_is_timed_and_a_long_one_logged(caplog: pytest.LogCaptureFixture) -> None:
    import gc

    registry = CollectorRegistry()
    hist = Histogram("gc", "gc", ["generation"], registry=registry, buckets=LAG_BUCKETS)
    callback = watch_gc(hist, log_over_s=0.0)  # every collection counts as long here
    try:
        with caplog.at_level(logging.WARNING, logger="broker.loop_monitor"):
            gc.collect(2)
    finally:
        gc.callbacks.remove(callback)
    assert registry.get_sample_value("gc_count", {"generation": "2"}) == 1
    assert any("garbage collection of generation 2 stopped the loop" in r.getMessage() for r in caplog.records)
