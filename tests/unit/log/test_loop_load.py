"""The loop's load decides where a large copy runs: on the loop while one thread carries the broker's work, on a
storage thread once it would not (broker/log/loop_load.py)."""

from __future__ import annotations

import time

import pytest

from broker.log.loop_load import LoopLoad


class Clocks:
    """A wall clock and the process's CPU clock, moved by hand."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0

    def run(self, seconds: float, busy: float) -> None:
        """``seconds`` of wall time during which the process used ``busy`` of a core."""
        self.wall += seconds
        self.cpu += seconds * busy


def _load(clocks: Clocks, cpus: int = 2) -> LoopLoad:
    return LoopLoad(period=0.25, high=0.9, low=0.75, clock=lambda: clocks.wall, process_cpu=lambda: clocks.cpu,
                    cpus=lambda: cpus)


def test_saturated_once_a_period_used_a_core_and_not_before() -> None:
    clocks = Clocks()
    load = _load(clocks)
    assert not load.saturated()  # the first look only starts the count
    clocks.run(0.1, 1.0)
    assert not load.saturated()  # less than a period since: the previous answer stands
    clocks.run(0.2, 1.0)
    assert load.saturated()  # 0.3 s at a full core


def test_hysteresis_keeps_the_answer_between_low_and_high() -> None:
    clocks = Clocks()
    load = _load(clocks)
    load.saturated()
    answers = []
    for busy in (0.95, 0.8, 0.76, 0.7, 0.8, 0.89, 0.92):
        clocks.run(0.25, busy)
        answers.append(load.saturated())
    # saturated at 0.95, stays through 0.8 and 0.76, clears at 0.7, stays clear until past 0.9 again
    assert answers == [True, True, True, False, False, False, True]


def test_the_whole_process_counts_not_only_the_loops_thread() -> None:
    """With the copies on storage threads the loop waits for them and its own thread looks half idle (the broker
    fed by wrk: loop 0.4 of a core, the process 1.5); the process's time keeps the answer from flipping."""
    clocks = Clocks()
    load = _load(clocks)
    load.saturated()
    for _ in range(8):
        clocks.run(0.25, 1.5)
        assert load.saturated()


def test_a_long_quiet_spell_averages_out_a_burst() -> None:
    clocks = Clocks()
    load = _load(clocks)
    load.saturated()
    clocks.run(0.25, 1.0)
    assert load.saturated()
    clocks.run(10.0, 0.01)
    clocks.run(0.1, 1.0)
    assert not load.saturated()  # 10.1 s at about 2 % of a core


def test_a_process_allowed_one_cpu_never_hops_a_large_copy() -> None:
    """Its storage threads would run on the loop's own CPU: the hop would buy nothing but its wake-ups."""
    clocks = Clocks()
    load = _load(clocks, cpus=1)
    load.saturated()
    for _ in range(4):
        clocks.run(0.25, 1.0)
        assert not load.saturated()


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        LoopLoad(high=0.5, low=0.8)


def test_the_real_clocks_see_a_busy_thread() -> None:
    """Spins until the process has used 30 ms of CPU (however long a loaded machine takes to lend them), so the
    verdict does not rest on the machine's speed: 30 ms over up to 3 s clears the low bar set here."""
    load = LoopLoad(period=0.05, high=0.01, low=0.005)
    load.saturated()
    start, began = time.process_time(), time.monotonic()
    while time.process_time() - start < 0.03 or time.monotonic() - began < 0.05:  # and a whole period
        pass
    assert load.saturated()
