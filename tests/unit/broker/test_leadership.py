"""Leader election rules, table-driven: clean election never picks a replica outside the ISR."""

from __future__ import annotations

import pytest

from broker.controller import leadership as L
from odradek.protocol.model import LeaderAndIsr


@pytest.mark.parametrize(
    ("replicas", "live", "expected"),
    [
        ([1, 2, 3], {1, 2, 3}, LeaderAndIsr(1, 0, [1, 2, 3], 5)),
        ([2, 3, 1], {1, 3}, LeaderAndIsr(3, 0, [3, 1], 5)),
        ([1, 2], set(), LeaderAndIsr(-1, 0, [1, 2], 5)),
    ],
)
def test_initial_state(replicas: list[int], live: set[int], expected: LeaderAndIsr) -> None:
    assert L.initial_state(replicas, live, 5) == expected


@pytest.mark.parametrize(
    ("current", "live", "unclean", "expected"),
    [
        # leader 1 died; 2 is in the ISR and alive
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {2, 3}, False, LeaderAndIsr(2, 5, [2, 3], 9)),
        # the only live replica (3) is out of sync: clean election leaves the partition offline
        (LeaderAndIsr(1, 4, [1, 2], 1), {3}, False, None),
        # ... unless unclean election is enabled
        (LeaderAndIsr(1, 4, [1, 2], 1), {3}, True, LeaderAndIsr(3, 5, [3], 9)),
        # ISR member preferred even when an out-of-sync replica comes first in assignment order
        (LeaderAndIsr(1, 4, [1, 3], 1), {2, 3}, True, LeaderAndIsr(3, 5, [3], 9)),
        (LeaderAndIsr(1, 4, [1], 1), set(), True, None),
    ],
)
def test_offline_election(current: LeaderAndIsr, live: set[int], unclean: bool,
                          expected: LeaderAndIsr | None) -> None:
    assert L.offline_election([1, 2, 3], current, live, 9, unclean) == expected


def test_isr_shrinks_but_never_empties() -> None:
    current = LeaderAndIsr(1, 2, [1, 2, 3], 1)
    assert L.without_dead_replicas(current, {1, 2, 3}, 9) is current
    assert L.without_dead_replicas(current, {1, 3}, 9) == LeaderAndIsr(1, 3, [1, 3], 9)
    offline = L.offline_no_leader(LeaderAndIsr(2, 2, [1, 2], 1), 9)
    assert offline == LeaderAndIsr(-1, 3, [2], 9) and offline.isr
