"""Event-loop lag: how late the loop runs a timer, measured continuously, exported, and acted upon.

The broker's event loop serves every request, replication fetch and ZooKeeper event; if it is late, everything
is. A small coroutine sleeps ``tick_s`` and measures how much later than asked it woke up: that is the loop's
lag (time the loop spent elsewhere: a long callback, a blocked syscall, GC, the whole process stopped).

Every measurement goes to a Prometheus histogram (``odradek_event_loop_lag_seconds``), and a lag above
``stall_threshold_s`` calls ``on_stall(lag)``. The broker sets that threshold at a third of its ZooKeeper
session timeout and fences its leaderships on a stall (``Broker._pause_detector``): a process frozen that
long may have lost its session without knowing yet. Disk I/O runs on the storage executor, never on the loop,
so a slow fsync does not show up here and cannot make a broker fence itself; a SIGSTOP or a VM pause does.

Timing uses ``time.monotonic`` (CLOCK_MONOTONIC keeps counting across SIGSTOP on Linux).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import Histogram

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopMonitor:
    def __init__(self, histogram: Histogram | None, *, tick_s: float = 0.1, stall_threshold_s: float | None = None,
                 on_stall: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._histogram = histogram
        self.tick_s = tick_s
        self.stall_threshold_s = stall_threshold_s
        self._on_stall = on_stall
        self._clock = clock
        self.max_lag_s = 0.0  # the worst lag seen so far (for logs and tests)
        self.samples = 0

    def observe(self, lag_s: float) -> None:
        """Record one measurement; call ``on_stall`` if it is over the threshold."""
        lag_s = max(0.0, lag_s)
        self.samples += 1
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if self._histogram is not None:
            self._histogram.observe(lag_s)
        if self.stall_threshold_s is not None and lag_s > self.stall_threshold_s and self._on_stall is not None:
            self._on_stall(lag_s)

    async def run(self) -> None:
        while True:
            expected = self._clock() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.observe(self._clock() - expected)
