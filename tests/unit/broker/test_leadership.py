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


@pytest.mark.parametrize(
    ("current", "live", "shutting_down", "expected"),
    [
        # leader 1 shuts down: the first live ISR member not shutting down leads; 1 leaves the ISR
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {1, 2, 3}, {1}, LeaderAndIsr(2, 5, [2, 3], 9)),
        # 2 is shutting down too: 3 leads
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {1, 2, 3}, {1, 2}, LeaderAndIsr(3, 5, [3], 9)),
        # no other ISR member: nobody can take over, the partition stays with 1
        (LeaderAndIsr(1, 4, [1], 1), {1, 2, 3}, {1}, None),
        # a live replica outside the ISR never takes over in a controlled shutdown
        (LeaderAndIsr(1, 4, [1, 3], 1), {1, 2}, {1}, None),
    ],
)
def test_controlled_shutdown_election(current: LeaderAndIsr, live: set[int], shutting_down: set[int],
                                      expected: LeaderAndIsr | None) -> None:
    assert L.controlled_shutdown_election([1, 2, 3], current, live, shutting_down, 9) == expected


@pytest.mark.parametrize(
    ("current", "broker", "expected"),
    [
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), 2, LeaderAndIsr(1, 5, [1, 3], 9)),
        (LeaderAndIsr(1, 4, [1, 3], 1), 2, LeaderAndIsr(1, 4, [1, 3], 1)),  # not in the ISR: unchanged
        (LeaderAndIsr(2, 4, [2], 1), 2, LeaderAndIsr(2, 4, [2], 1)),  # never empties the ISR
    ],
)
def test_remove_from_isr(current: LeaderAndIsr, broker: int, expected: LeaderAndIsr) -> None:
    assert L.remove_from_isr(current, broker, 9) == expected


@pytest.mark.parametrize(
    ("replicas", "current", "live", "expected"),
    [
        ([1, 2, 3], LeaderAndIsr(2, 4, [2, 3, 1], 1), {1, 2, 3}, LeaderAndIsr(1, 5, [2, 3, 1], 9)),
        ([1, 2, 3], LeaderAndIsr(1, 4, [1, 2], 1), {1, 2, 3}, None),  # already leads
        ([1, 2, 3], LeaderAndIsr(2, 4, [2, 3], 1), {1, 2, 3}, None),  # preferred out of the ISR
        ([1, 2, 3], LeaderAndIsr(2, 4, [2, 1], 1), {2, 3}, None),  # preferred dead
        ([], LeaderAndIsr(2, 4, [2], 1), {2}, None),
    ],
)
def test_preferred_election(replicas: list[int], current: LeaderAndIsr, live: set[int],
                            expected: LeaderAndIsr | None) -> None:
    assert L.preferred_election(replicas, current, live, 9) == expected


@pytest.mark.parametrize(
    ("leaders", "percentage", "expected"),
    [
        ({("t", 0): 1, ("t", 1): 2, ("t", 2): 3}, 10, []),  # balanced
        ({("t", 0): 2, ("t", 1): 2, ("t", 2): 3}, 10, [("t", 0)]),  # broker 1 leads 0 of its 1: 100 % > 10 %
        ({("t", 0): 2, ("t", 1): 2, ("t", 2): 3}, 100, []),  # at most 100 % is never "over"
        ({("t", 0): -1, ("t", 1): 3, ("t", 2): 3}, 50, [("t", 0), ("t", 1)]),
    ],
)
def test_imbalanced_partitions(leaders: dict[tuple[str, int], int], percentage: int,
                               expected: list[tuple[str, int]]) -> None:
    assignments = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("t", 2): [3, 1, 2]}
    assert L.imbalanced_partitions(assignments, leaders, percentage) == expected


@pytest.mark.parametrize(
    ("current", "live", "unclean", "expected"),
    [
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {1, 2, 3}, False, LeaderAndIsr(1, 4, [1, 2, 3], 1)),  # nothing to do
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {1, 3}, False, LeaderAndIsr(1, 5, [1, 3], 9)),  # follower died
        (LeaderAndIsr(1, 4, [1, 2, 3], 1), {2, 3}, False, LeaderAndIsr(2, 5, [2, 3], 9)),  # leader died
        (LeaderAndIsr(1, 4, [1], 1), {2, 3}, False, LeaderAndIsr(-1, 5, [1], 9)),  # offline, ISR kept
        (LeaderAndIsr(-1, 5, [1], 9), {2, 3}, False, None),  # already offline: no second epoch bump
        (LeaderAndIsr(-1, 5, [1], 9), {2, 3}, True, LeaderAndIsr(2, 6, [2], 9)),  # unclean allowed later
        (LeaderAndIsr(-1, 5, [1], 9), {1, 3}, False, LeaderAndIsr(1, 6, [1], 9)),  # the ISR member is back
    ],
)
def test_offline_decision(current: LeaderAndIsr, live: set[int], unclean: bool,
                          expected: LeaderAndIsr | None) -> None:
    assert L.offline_decision([1, 2, 3], live, 9, unclean)(current) == expected


def test_every_rule_builds_states_through_the_epoch_bumping_transitions() -> None:
    """A leader change always bumps the leader epoch by exactly one (what fences the previous leader)."""
    current = LeaderAndIsr(1, 7, [1, 2, 3], 1)
    changed = [
        L.offline_election([1, 2, 3], current, {2, 3}, 9, False),
        L.without_dead_replicas(current, {1, 2}, 9),
        L.offline_no_leader(current, 9),
        L.controlled_shutdown_election([1, 2, 3], current, {1, 2, 3}, {1}, 9),
        L.remove_from_isr(current, 3, 9),
        L.preferred_election([2, 1, 3], current, {1, 2, 3}, 9),
    ]
    assert all(s is not None and s.leader_epoch == 8 and s.controller_epoch == 9 and s.isr for s in changed)


@pytest.mark.parametrize("current, live, expected", [
    # a live leader: nothing to do, however the ISR looks
    (LeaderAndIsr(1, 4, [1], 1), {1, 2, 3}, None),
    # leaderless, a clean candidate is alive: it wins (no data loss)
    (LeaderAndIsr(-1, 5, [2], 1), {2, 3}, LeaderAndIsr(2, 6, [2], 9)),
    # leaderless, only out-of-sync replicas alive: the first of them in assignment order, alone in the ISR
    (LeaderAndIsr(-1, 5, [1], 1), {3, 2}, LeaderAndIsr(2, 6, [2], 9)),
    # nobody alive: stays offline
    (LeaderAndIsr(-1, 5, [1], 1), set(), None),
])
def test_unclean_decision_elects_only_leaderless_partitions(current: LeaderAndIsr, live: set[int],
                                                          expected: LeaderAndIsr | None) -> None:
    assert L.unclean_decision([1, 2, 3], live, 9)(current) == expected
