"""Whether the broker's work would saturate its event loop's thread: whether a large copy is worth a storage hop.

A storage hop costs two thread wake-ups (100-200 µs of CPU on our VMs, bench/wakeup_bench.py) and buys
parallelism: the copy runs on another core while the loop goes on. That pays only when one thread could not
carry the broker's work, as with one broker fed by a C client (wrk's 12 connections of 110 KB batches: 2.9M
records/s with the hop, 2.3M without, the loop then at 100 % of a core). When one thread could, the hop is pure
cost: three brokers on two cores (acks=all RF 3: 1.3M -> 1.65M records/s and 1.18 -> 0.93 CPU-s per million
without it) or one broker fed by a Python client (4.9M -> 5.9M records/s).

The measure is the process's CPU time (every thread's: the loop's and the storage threads') over the wall time of
the last ``period``, read at most once a period: at ``high`` or more of one core, the work on the loop plus the
copies the threads did would saturate the loop, so large copies hop; below ``low`` they stay on the loop. Not the
loop thread's own time: with the copies on the threads the loop waits for them and looks idle, and the answer
would flip every period. A process allowed one CPU (``--cpu-affinity`` with one) never hops a large copy: its
storage threads would run on the loop's CPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

PERIOD_S = 0.25
HIGH = 0.9
LOW = 0.75


def allowed_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class LoopLoad:
    """``saturated()``: whether the process used at least ``high`` of a core over the last period (hysteresis:
    it stays so until a period below ``low``)."""

    def __init__(self, *, period: float = PERIOD_S, high: float = HIGH, low: float = LOW,
                 clock: Callable[[], float] = time.monotonic,
                 process_cpu: Callable[[], float] = time.process_time,
                 cpus: Callable[[], int] = allowed_cpus) -> None:
        if not 0.0 <= low <= high:
            raise ValueError(f"need 0 <= low <= high, got low={low} high={high}")
        self._period, self._high, self._low = period, high, low
        self._clock, self._process_cpu, self._cpus = clock, process_cpu, cpus
        self._one_cpu = False
        self._since: float | None = None
        self._cpu_since = 0.0
        self._saturated = False

    def saturated(self) -> bool:
        now = self._clock()
        if self._since is None:  # the first look: after the broker applied its CPU affinity
            self._one_cpu = self._cpus() < 2
            self._since, self._cpu_since = now, self._process_cpu()
        elif now - self._since >= self._period:
            cpu = self._process_cpu()
            busy = (cpu - self._cpu_since) / (now - self._since)
            self._since, self._cpu_since = now, cpu
            if busy >= self._high:
                self._saturated = not self._one_cpu
            elif busy < self._low:
                self._saturated = False
        return self._saturated
