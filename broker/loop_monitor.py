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

The lag says that the loop was away, not where: a watchdog thread (``watch_s``) that sees the loop away longer
than that logs the loop thread's stack once per stall, while the stall lasts, so a stall on an otherwise idle
machine names the call that blocked (a stopped process stops the watchdog too, and logs nothing).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

from prometheus_client import Histogram

log = logging.getLogger(__name__)

LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopMonitor:
    def __init__(self, histogram: Histogram | None, *, tick_s: float = 0.1, stall_threshold_s: float | None = None,
                 on_stall: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, watch_s: float | None = None) -> None:
        self._histogram = histogram
        self.watch_s = watch_s
        self._beat = clock()  # when the loop last woke (written by the loop, read by the watchdog)
        self._loop_thread: int | None = None
        self.stacks_logged = 0
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
        self._loop_thread = threading.get_ident()
        self._beat = self._clock()
        stop = threading.Event()
        if self.watch_s is not None:
            threading.Thread(target=self._watch, args=(stop,), name="loop-stall-watchdog", daemon=True).start()
        try:
            while True:
                expected = self._clock() + self.tick_s
                await asyncio.sleep(self.tick_s)
                self._beat = now = self._clock()
                self.observe(now - expected)
        finally:
            stop.set()

    def _watch(self, stop: threading.Event) -> None:
        """The watchdog: log where the loop thread is once it has been away ``watch_s`` past its tick."""
        assert self.watch_s is not None
        reported_beat = None
        while not stop.wait(self.tick_s):
            beat = self._beat
            away = self._clock() - beat - self.tick_s
            if away < self.watch_s or beat == reported_beat:
                continue
            reported_beat = beat
            frame = sys._current_frames().get(self._loop_thread or -1)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
            self.stacks_logged += 1
            log.warning("event loop blocked for %.2f s so far, in:\n%s", away, stack.rstrip())


def watch_gc(histogram: Histogram | None, log_over_s: float = 0.1,
             clock: Callable[[], float] = time.perf_counter) -> Callable[[str, dict[str, int]], None]:
    """Time every cyclic garbage collection (``gc.callbacks``): each pause into ``histogram`` (labelled by
    generation), and a warning for one over ``log_over_s`` with the generation and what it found, since a
    collection of the oldest generation walks every tracked object and stops the loop meanwhile. Returns the
    callback (installed), so that a caller can remove it."""
    import gc

    started: list[float] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [clock()]
            return
        if not started:
            return
        pause = clock() - started[0]
        generation = info.get("generation", -1)
        if histogram is not None:
            histogram.labels(str(generation)).observe(pause)
        if pause > log_over_s:
            log.warning("garbage collection of generation %d stopped the loop for %.3f s (%d objects tracked, "
                        "%d collected, %d uncollectable)", generation, pause, len(gc.get_objects()),
                        info.get("collected", 0), info.get("uncollectable", 0))

    gc.callbacks.append(callback)
    return callback
