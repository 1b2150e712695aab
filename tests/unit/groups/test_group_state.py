"""The group state machine, as pure logic with an injected clock."""

from __future__ import annotations

import pytest

from consumer_coordinator.group import COMPLETING, EMPTY, PREPARING, STABLE, Group, Member
from odradek.protocol.errors import IllegalGenerationError, RebalanceInProgressError, UnknownMemberIdError

COUNTS = {"t": 4}


def member(mid: str, now: int = 0, session: int = 1000, rebalance: int = 5000) -> Member:
    return Member(mid, "client", "host", frozenset({"t"}), None, session, rebalance, now)


def settle(g: Group, now: int, counts: dict[str, int] | None = None) -> None:
    assert g.ready(now), (g.state, [(m.member_id, m.joined) for m in g.members.values()])
    g.complete(counts or COUNTS, now)
    g.stabilize(now)


def test_first_join_waits_the_stabilization_window_then_completes() -> None:
    g = Group("g", initial_delay_ms=300)
    g.join(member("a"), [], "range", 0)
    assert g.state == PREPARING and not g.ready(299)
    g.join(member("b", 200), [], "range", 200)  # extends the window
    assert not g.ready(450)
    assert g.ready(500)
    completion = g.complete(COUNTS, 500)
    assert g.state == COMPLETING and g.generation == 1
    assert sorted(tp for tp, _ in completion.claim) == [("t", p) for p in range(4)]
    g.stabilize(500)
    assert g.state == STABLE
    assert g.members["a"].assignment == [("t", 0), ("t", 1)] and g.members["b"].assignment == [("t", 2), ("t", 3)]


def test_a_join_in_stable_waits_for_every_known_member() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(member("a"), [], "range", 0)
    settle(g, 0)
    g.join(member("b", 10), [], "range", 10)
    assert g.state == PREPARING and not g.ready(20)
    with pytest.raises(RebalanceInProgressError):
        g.heartbeat("a", 1, 20)
    g.join(member("a", 30), [("t", 0), ("t", 1), ("t", 2), ("t", 3)], "range", 30)
    completion = g.complete(COUNTS, 40)
    # range gives b t-2 and t-3, but a still owns them: withheld from b, revoked from a
    assert g.members["b"].assignment == [] and g.members["a"].revoke == [("t", 2), ("t", 3)]
    assert completion.claim == []
    g.stabilize(40)
    released = g.join(member("a", 50), [("t", 0), ("t", 1)], "range", 50)  # a revoked, rejoins
    assert [tp for tp, _ in released] == [("t", 2), ("t", 3)]
    g.join(member("b", 60), [], "range", 60)
    settle(g, 60)
    assert g.members["b"].assignment == [("t", 2), ("t", 3)] and g.owners[("t", 2)] == "b"


def test_a_member_that_does_not_rejoin_in_time_is_removed_and_its_partitions_released() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(member("a", rebalance=1000), [], "range", 0)
    g.join(member("b", rebalance=1000), [], "range", 0)
    settle(g, 0)
    g.join(member("a", 100, session=10_000, rebalance=1000), [("t", 0), ("t", 1)], "range", 100)
    g.members["b"].session_timeout_ms = 10_000  # b heartbeats? no: it is simply slow to rejoin
    assert not g.ready(500) and g.ready(1100)
    completion = g.complete(COUNTS, 1100)
    assert completion.removed == ["b"] and {tp for tp, _ in completion.release} == {("t", 2), ("t", 3)}
    g.stabilize(1100)
    assert g.members["a"].assignment == [("t", p) for p in range(4)]


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(member("a", session=1000), [], "range", 0)
    g.join(member("b", session=1000), [], "range", 0)
    settle(g, 0)
    g.heartbeat("a", 1, 900)
    dead, release = g.expire(1500)
    assert dead == ["b"] and {tp for tp, _ in release} == {("t", 2), ("t", 3)}
    assert g.state == PREPARING


def test_commits_are_fenced_by_member_and_generation() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(member("a"), [], "range", 0)
    settle(g, 0)
    g.check_commit("a", 1)
    with pytest.raises(IllegalGenerationError):
        g.check_commit("a", 0)
    with pytest.raises(UnknownMemberIdError):
        g.check_commit("zz", 1)
    with pytest.raises(UnknownMemberIdError):
        g.check_commit("", -1)  # standalone commits only into an empty group
    g.leave("a", 10)
    assert g.state == PREPARING
    g.complete(COUNTS, 10)
    g.stabilize(10)
    assert g.state == EMPTY and g.empty_since_ms == 10
    g.check_commit("", -1)


def test_rebuild_keeps_old_members_owning_until_they_rejoin_or_time_out() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(member("a"), [], "cooperative-sticky", 0)
    g.join(member("b"), [], "cooperative-sticky", 0)
    settle(g, 0)
    state = g.to_state()
    new = Group.rebuild("g", state, 5000)
    assert new.generation == 1 and new.state == PREPARING and new.protocol == "cooperative-sticky"
    assert new.owners == g.owners
    with pytest.raises(RebalanceInProgressError):
        new.heartbeat("a", 1, 5100)
    new.join(member("a", 5200), list(g.members["a"].assignment), "cooperative-sticky", 5200)
    dead, _ = new.expire(6200)  # b never came back within its session
    assert dead == ["b"]
    settle(new, 6300)
    assert new.members["a"].assignment == [("t", p) for p in range(4)] and new.generation == 2


def test_pattern_subscription_follows_new_topics() -> None:
    g = Group("g", initial_delay_ms=0)
    g.join(Member("a", "c", "h", None, r"ev-.*", 1000, 1000, 0), [], "roundrobin", 0)
    settle(g, 0, {"ev-1": 1, "other": 3})
    assert g.members["a"].assignment == [("ev-1", 0)]
    assert g.subscribed_topics({"ev-1": 1, "ev-2": 2, "other": 3}) == {"ev-1": 1, "ev-2": 2}


def test_coordinator_timers_ignore_wall_clock_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions and rebalance deadlines run on the monotonic clock; stored times (commits, empty_since_ms) on the
    wall clock. A one-hour NTP step must move only the latter (odradek verify's clock faults found members
    expired en masse and a rebalance parked in the future when the timers read the wall clock)."""
    import time as real_time

    from consumer_coordinator import coordinator

    timers, wall = coordinator.now_ms(), coordinator.wall_ms()
    stepped = real_time.time() + 3600
    monkeypatch.setattr(coordinator.time, "time", lambda: stepped)
    monkeypatch.setattr(coordinator.time, "time_ns", lambda: int(stepped * 1e9))
    assert coordinator.now_ms() - timers < 1000
    assert coordinator.wall_ms() - wall >= 3_599_000


def test_rebuild_stores_wall_time_for_retention_and_timers_on_their_own_clock() -> None:
    g = Group.rebuild("g", None, 5, wall_ms=1_700_000_000_000)
    assert g.empty_since_ms == 1_700_000_000_000
