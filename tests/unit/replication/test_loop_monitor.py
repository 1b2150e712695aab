"""The loop-lag monitor measures how late the loop runs a timer, exports it, and reports stalls over the
threshold (what the pause detector fences on)."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Histogram

from broker.loop_monitor import LAG_BUCKETS, LoopMonitor


def test_a_blocked_loop_is_measured_and_reported_as_a_stall() -> None:
    async def main() -> None:
        registry = CollectorRegistry()
        hist = Histogram("lag", "lag", registry=registry, buckets=LAG_BUCKETS)
        stalls: list[float] = []
        monitor = LoopMonitor(hist, tick_s=0.01, stall_threshold_s=0.15, on_stall=stalls.append)
        task = asyncio.create_task(monitor.run())
        deadline = time.monotonic() + 5
        while monitor.samples < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert not stalls
        time.sleep(0.3)  # block the loop, as a stall would
        while not stalls:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        task.cancel()
        assert 0.15 < stalls[0] < 2 and monitor.max_lag_s == stalls[0]
        assert registry.get_sample_value("lag_count") == monitor.samples
        assert registry.get_sample_value("lag_bucket", {"le": "0.1"}) == monitor.samples - 1

    asyncio.run(main())


def test_small_lags_are_only_recorded() -> None:
    stalls: list[float] = []
    monitor = LoopMonitor(None, stall_threshold_s=0.5, on_stall=stalls.append)
    for lag in (0.0, 0.2, -0.01, 0.49):
        monitor.observe(lag)
    assert not stalls and monitor.samples == 4 and monitor.max_lag_s == 0.49
    monitor.observe(0.6)
    assert stalls == [0.6]
