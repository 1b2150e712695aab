"""Assignors are pure functions: balanced, deterministic, and the sticky one moves only what it must."""

from __future__ import annotations

from consumer_coordinator import assignors as a


def subs(members: list[str], topics: set[str]) -> dict[str, frozenset[str]]:
    return {m: frozenset(topics) for m in members}


def owners_of(assignment: dict[str, list[a.TP]]) -> dict[a.TP, str]:
    return {tp: m for m, tps in assignment.items() for tp in tps}


def test_range_matches_kafkas_arithmetic() -> None:
    out = a.range_assign(subs(["c1", "c2"], {"t"}), {"t": 5})
    assert out == {"c1": [("t", 0), ("t", 1), ("t", 2)], "c2": [("t", 3), ("t", 4)]}


def test_range_with_more_members_than_partitions_leaves_extras_idle() -> None:
    out = a.range_assign(subs(["a", "b", "c", "d"], {"t"}), {"t": 2})
    assert out == {"a": [("t", 0)], "b": [("t", 1)], "c": [], "d": []}


def test_roundrobin_deals_over_sorted_members_and_skips_non_subscribers() -> None:
    out = a.roundrobin_assign({"a": frozenset({"x", "y"}), "b": frozenset({"y"})}, {"x": 2, "y": 2})
    assert out == {"a": [("x", 0), ("x", 1), ("y", 1)], "b": [("y", 0)]}


def test_every_assignor_assigns_each_partition_exactly_once() -> None:
    for name, fn in a.BY_NAME.items():
        for members in (1, 3, 6, 9):
            out = fn(subs([f"m{i}" for i in range(members)], {"t", "u"}), {"t": 6, "u": 1}, None)
            flat = [tp for tps in out.values() for tp in tps]
            assert sorted(flat) == sorted([("t", p) for p in range(6)] + [("u", 0)]), name
            if name != a.RANGE:  # range balances per topic, not overall
                sizes = [len(v) for v in out.values()]
                assert max(sizes) - min(sizes) <= 1, (name, members, out)


def test_sticky_keeps_everything_when_balanced() -> None:
    before = a.sticky_assign(subs(["a", "b", "c"], {"t"}), {"t": 6})
    assert a.sticky_assign(subs(["a", "b", "c"], {"t"}), {"t": 6}, owners_of(before)) == before


def test_sticky_moves_only_what_a_new_member_needs() -> None:
    before = a.sticky_assign(subs(["a", "b", "c"], {"t"}), {"t": 24})
    after = a.sticky_assign(subs(["a", "b", "c", "d"], {"t"}), {"t": 24}, owners_of(before))
    moved = [tp for m, tps in after.items() for tp in tps if owners_of(before).get(tp) not in (None, m)]
    assert len(moved) == 6 and len(after["d"]) == 6
    assert all(set(after[m]) <= set(before[m]) for m in ("a", "b", "c"))


def test_sticky_gives_a_leavers_partitions_to_the_others_only() -> None:
    before = a.sticky_assign(subs(["a", "b", "c"], {"t"}), {"t": 9})
    owners = {tp: m for tp, m in owners_of(before).items() if m != "c"}
    after = a.sticky_assign(subs(["a", "b"], {"t"}), {"t": 9}, owners)
    assert set(before["a"]) <= set(after["a"]) and set(before["b"]) <= set(after["b"])


def test_sticky_ignores_owned_partitions_that_no_longer_exist_or_are_not_subscribed() -> None:
    out = a.sticky_assign({"a": frozenset({"t"})}, {"t": 1}, {("t", 5): "a", ("gone", 0): "a"})
    assert out == {"a": [("t", 0)]}


def test_handover_withholds_a_moving_partition_until_released() -> None:
    target = {"a": [("t", 0)], "b": [("t", 1)]}
    grant, revoke = a.handover(target, {("t", 0): "a", ("t", 1): "a"})
    assert grant == {"a": [("t", 0)], "b": []}
    assert revoke == {"a": [("t", 1)], "b": []}
    grant, revoke = a.handover(target, {("t", 0): "a"})  # a released t-1
    assert grant == {"a": [("t", 0)], "b": [("t", 1)]} and revoke == {"a": [], "b": []}
