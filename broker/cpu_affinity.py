"""The CPUs a broker runs on (``--cpu-affinity``, as Redis's ``server_cpulist``): every thread of the process, the
event loop, the storage threads and kazoo's, on the set given.

Why: a produce or a read crosses from the event loop to a storage thread and back. When the two threads sit on
different CPUs, each crossing wakes an idle CPU, which on our VMs costs far more than the work it carries
(``bench/wakeup_bench.py``: a storage hop is 100-200 µs of CPU across CPUs, 35-55 µs on one). Pinning a
broker to its own CPUs keeps those crossings local; several brokers per host, each on its own CPUs, is how a
deployment uses more cores (docs/performance.md, "Scaling past one core per broker").

The set is applied to the process before any thread starts, so every thread inherits it. The format is the
kernel's cpulist (``0``, ``2-3``, ``0,2-3``); a CPU outside the ones the broker may use is refused at start.
"""

from __future__ import annotations

import os

__all__ = ["apply", "cpu_list", "parse_cpu_list", "split"]


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a cpulist such as ``0,2-3``.

    Raises:
        ValueError: not a cpulist (empty, a negative number, a reversed range, anything but digits, ``-``, ``,``).
    """
    cpus: set[int] = set()
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError(f"--cpu-affinity must be a CPU list such as 0 or 0,2-3, got {text!r}")
        lo, hi = int(first), int(last) if sep else int(first)
        if hi < lo:
            raise ValueError(f"--cpu-affinity: the range {part.strip()!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def apply(cpus: frozenset[int]) -> None:
    """Run this process (and every thread it starts from now on) on ``cpus``.

    Raises:
        ValueError: a CPU of ``cpus`` is not one this process may run on.
    """
    allowed = os.sched_getaffinity(0)
    outside = sorted(cpus - allowed)
    if outside:
        raise ValueError(f"--cpu-affinity: CPU {', '.join(map(str, outside))} is not available here (available: "
                         f"{cpu_list(allowed)})")
    os.sched_setaffinity(0, cpus)


def split(cpus: set[int] | frozenset[int], brokers: int) -> dict[int, frozenset[int]]:
    """Each of brokers 1..``brokers`` gets CPUs of its own, the CPUs shared out evenly in order (any left over
    stay unassigned): how ``odradek cluster up --pin`` places a host's brokers.

    Raises:
        ValueError: fewer CPUs than brokers (two brokers on one CPU gain nothing from pinning).
    """
    ordered = sorted(cpus)
    if brokers < 1 or len(ordered) < brokers:
        raise ValueError(f"--pin gives each broker CPUs of its own: {brokers} brokers need at least {brokers} CPUs, "
                         f"this host has {len(ordered)} ({cpu_list(cpus)})")
    each = len(ordered) // brokers
    return {b: frozenset(ordered[(b - 1) * each:b * each]) for b in range(1, brokers + 1)}


def cpu_list(cpus: set[int] | frozenset[int]) -> str:
    """``cpus`` in the kernel's cpulist form (``0-2,5``), what ``parse_cpu_list`` reads."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive CPUs
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
