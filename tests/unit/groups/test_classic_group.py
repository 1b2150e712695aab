"""Kafka's classic group protocol as a pure state machine (consumer_coordinator/classic_group.py): joins, the
leader, protocol selection, SyncGroup, heartbeats, leaving, expiry, the timers, static members, commit fencing
and the stored shape. Time is a number the test moves; no I/O."""

from __future__ import annotations

import pytest

from consumer_coordinator import consumer_protocol
from consumer_coordinator.classic_group import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    ClassicGroup,
    ClassicJoin,
    Effects,
    JoinResult,
)
from consumer_coordinator.group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

SESSION = 10_000
REBALANCE = 30_000
DELAY = 100
T0 = 1_000_000


def sub(*topics: str) -> bytes:
    return consumer_protocol.encode_subscription(topics)


def join(member_id: str = "", *, protocols: tuple[tuple[str, bytes], ...] = (("range", b"r"),),
         instance: str | None = None, v4: bool = True, protocol_type: str = "consumer",
         session: int = SESSION) -> ClassicJoin:
    return ClassicJoin(member_id, instance, "client", "/127.0.0.1", session, REBALANCE, protocol_type, protocols,
                       require_known_member_id=v4)


def new_member(g: ClassicGroup, name: str, now: int, **kw: object) -> str:
    """A v4+ dynamic member's two joins (MEMBER_ID_REQUIRED, then with its id); its member id."""
    member_id, fx = g.join(join(**kw), name, now)  # type: ignore[arg-type]
    assert isinstance(fx.joins.pop(member_id), MemberIdRequiredError) and member_id == name
    _, fx = g.join(join(member_id, **kw), "unused", now)  # type: ignore[arg-type]
    assert member_id not in fx.joins  # parked until the rebalance completes
    return member_id


def stable_group(*names: str) -> tuple[ClassicGroup, int]:
    """Members joined, the initial delay passed, the leader synced an assignment for each."""
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    for n in names:
        new_member(g, n, T0)
    fx = g.tick(T0 + DELAY)
    assert g.state == COMPLETING and set(fx.joins) == set(names)
    leader = g.leader
    assert leader == names[0]
    fx = g.sync(leader, None, g.generation, None, None, {n: n.encode() for n in names}, T0 + DELAY)
    assert g.state == STABLE and fx.store and fx.syncs == {leader: leader.encode()}
    for n in names[1:]:
        assert g.sync(n, None, g.generation, None, None, {}, T0 + DELAY).syncs == {n: n.encode()}
    return g, T0 + DELAY


# ------------------------------------------------------------------------------------------------- joins


def test_a_new_member_is_handed_its_id_then_the_first_joiner_leads_after_the_initial_delay() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    a = new_member(g, "a", T0)
    b = new_member(g, "b", T0 + 10)
    assert g.state == PREPARING and g.tick(T0 + 50).joins == {}  # the stabilization window, extended by b
    fx = g.tick(T0 + 10 + DELAY)
    assert g.state == COMPLETING and g.generation == 1 and g.leader == a
    leader, follower = fx.joins[a], fx.joins[b]
    assert isinstance(leader, JoinResult) and isinstance(follower, JoinResult)
    assert [m.member_id for m in leader.members] == [a, b] and follower.members == ()
    assert leader.leader == follower.leader == a and leader.protocol_name == "range"
    assert leader.protocol_type == "consumer"


def test_a_v3_client_joins_without_the_member_id_round_trip() -> None:
    g = ClassicGroup("g", initial_delay_ms=0)
    member_id, fx = g.join(join(v4=False), "m-1", T0)
    assert member_id == "m-1" and isinstance(fx.joins["m-1"], JoinResult)  # no delay: completed at once


def test_the_protocol_is_the_one_most_members_prefer_among_those_all_support() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    both = (("cooperative-sticky", b"c"), ("range", b"r"))
    new_member(g, "a", T0, protocols=(("range", b"r"), ("cooperative-sticky", b"c")))
    new_member(g, "b", T0, protocols=both)
    new_member(g, "c", T0, protocols=both)
    fx = g.tick(T0 + DELAY)
    result = fx.joins["a"]
    assert isinstance(result, JoinResult) and result.protocol_name == "cooperative-sticky"
    assert [m.metadata for m in result.members] == [b"c", b"c", b"c"]  # each member's metadata for it


def test_a_member_with_no_common_protocol_or_another_protocol_type_is_refused() -> None:
    g, now = stable_group("a")
    with pytest.raises(InconsistentGroupProtocolError):
        g.join(join(protocols=(("roundrobin", b""),)), "x", now)
    with pytest.raises(InconsistentGroupProtocolError):
        g.join(join(protocol_type="connect"), "x", now)
    with pytest.raises(InconsistentGroupProtocolError):  # an empty group still wants a type and protocols
        ClassicGroup("h").join(join(protocols=()), "x", now)


def test_an_unknown_member_id_is_refused_and_a_pending_id_expires_with_its_session() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    _, fx = g.join(join("ghost"), "unused", T0)
    assert isinstance(fx.joins["ghost"], UnknownMemberIdError)
    member_id, _ = g.join(join(), "p", T0)
    assert g.pending and g.has_members
    g.tick(T0 + SESSION)
    assert not g.pending and not g.has_members
    _, fx = g.join(join(member_id), "unused", T0 + SESSION)
    assert isinstance(fx.joins[member_id], UnknownMemberIdError)


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_generation_back_the_leader_rebalances() -> None:
    g, now = stable_group("a", "b")
    _, fx = g.join(join("b"), "unused", now)
    answer = fx.joins["b"]
    assert isinstance(answer, JoinResult) and answer.generation == g.generation and g.state == STABLE
    _, fx = g.join(join("a"), "unused", now)
    assert fx.joins == {} and g.state == PREPARING
    with pytest.raises(RebalanceInProgressError):
        g.heartbeat("b", None, 1, now)
    _, fx = g.join(join("b"), "unused", now)  # everyone rejoined: completes at once (no initial delay now)
    assert g.state == COMPLETING and g.generation == 2 and set(fx.joins) == {"a", "b"}


def test_changed_metadata_rebalances() -> None:
    g, now = stable_group("a", "b")
    _, fx = g.join(join("b", protocols=(("range", b"new"),)), "unused", now)
    assert g.state == PREPARING and fx.joins == {}


# ------------------------------------------------------------------------------------------------- syncs


def test_followers_syncs_wait_for_the_leaders_and_every_member_is_handed_its_own_assignment() -> None:
    g = ClassicGroup("g", initial_delay_ms=0)
    for n in ("a", "b", "c"):
        g.join(join(n and "", v4=False), n, T0)
    # with no initial delay each join completed a generation of its own: rejoin all for one generation
    for n in ("a", "b", "c"):
        g.join(join(n), "unused", T0)
    assert g.state == COMPLETING
    assert g.sync("b", None, g.generation, None, None, {}, T0).syncs == {}  # parked
    fx = g.sync("a", None, g.generation, "consumer", "range", {"a": b"A", "b": b"B"}, T0)
    assert fx.store and g.state == STABLE
    assert fx.syncs == {"a": b"A", "b": b"B"}  # c's assignment was missing: empty, handed out on its sync
    assert g.sync("c", None, g.generation, None, None, {}, T0).syncs == {"c": b""}


def test_sync_errors() -> None:
    g, now = stable_group("a", "b")
    with pytest.raises(UnknownMemberIdError):
        g.sync("x", None, g.generation, None, None, {}, now)
    with pytest.raises(IllegalGenerationError):
        g.sync("a", None, g.generation - 1, None, None, {}, now)
    with pytest.raises(InconsistentGroupProtocolError):
        g.sync("a", None, g.generation, None, "roundrobin", {}, now)
    g.join(join("a"), "unused", now)  # the leader rejoins: PreparingRebalance until b does
    with pytest.raises(RebalanceInProgressError):
        g.sync("b", None, g.generation, None, None, {}, now)


def test_a_rebalance_while_completing_answers_the_parked_syncs_rebalance_in_progress() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    new_member(g, "a", T0)
    new_member(g, "b", T0)
    g.tick(T0 + DELAY)
    g.sync("b", None, g.generation, None, None, {}, T0 + DELAY)
    _, fx = g.join(join(), "c", T0 + DELAY)  # a new member: MEMBER_ID_REQUIRED, pending
    fx = g.join(join("c"), "unused", T0 + DELAY)[1]
    assert g.state == PREPARING and isinstance(fx.syncs["b"], RebalanceInProgressError)


def test_members_that_do_not_sync_in_the_rebalance_timeout_are_removed() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    new_member(g, "a", T0)
    new_member(g, "b", T0)
    g.tick(T0 + DELAY)
    g.sync("a", None, g.generation, None, None, {"a": b"A", "b": b"B"}, T0 + DELAY)
    for t in range(T0 + DELAY, T0 + DELAY + REBALANCE, 3000):  # both heartbeat; b never syncs
        g.heartbeat("a", None, g.generation, t)
        g.heartbeat("b", None, g.generation, t)
    g.tick(T0 + DELAY + REBALANCE)
    assert list(g.members) == ["a"] and g.state == PREPARING


# ------------------------------------------------------------------------------------- liveness, exit


def test_a_silent_member_expires_after_its_session_and_the_others_rebalance() -> None:
    g, now = stable_group("a", "b")
    g.heartbeat("a", None, g.generation, now + SESSION // 2)
    g.tick(now + SESSION + 1)
    assert list(g.members) == ["a"] and g.state == PREPARING
    _, fx = g.join(join("a"), "unused", now + SESSION + 1)
    result = fx.joins["a"]
    assert isinstance(result, JoinResult) and [m.member_id for m in result.members] == ["a"]


def test_a_parked_join_keeps_a_member_alive_and_a_rebalance_timeout_removes_who_did_not_rejoin() -> None:
    g, now = stable_group("a", "b")
    g.join(join("a"), "unused", now)  # a rejoins, b does not (it heartbeats, getting REBALANCE_IN_PROGRESS)
    for t in range(now, now + REBALANCE, 3000):
        with pytest.raises(RebalanceInProgressError):
            g.heartbeat("b", None, g.generation, t)
    fx = g.tick(now + REBALANCE)
    assert list(g.members) == ["a"] and g.state == COMPLETING and set(fx.joins) == {"a"}


def test_the_leader_leaving_passes_the_lead_and_the_last_one_empties_the_group() -> None:
    g, now = stable_group("a", "b")
    errors, _ = g.leave([("a", None), ("nobody", None)], now)
    assert errors[0] is None and isinstance(errors[1], UnknownMemberIdError)
    assert g.leader == "b" and g.state == PREPARING
    g.join(join("b"), "unused", now)
    assert g.state == COMPLETING and g.leader == "b"
    errors, fx = g.leave([("b", None)], now)
    assert errors == [None] and g.state == EMPTY and fx.store and g.leader is None and g.protocol_name is None


def test_a_new_member_whose_join_stays_parked_five_minutes_is_removed() -> None:
    g, now = stable_group("a")
    new_member(g, "b", now)  # a rebalance that a never rejoins... but a is alive: it keeps heartbeating
    assert g.members["b"].awaiting_join
    assert not g.members["b"].expired(now + NEW_MEMBER_JOIN_TIMEOUT_MS)
    assert g.members["b"].expired(now + NEW_MEMBER_JOIN_TIMEOUT_MS + 1)


def test_heartbeat_errors() -> None:
    g, now = stable_group("a")
    g.heartbeat("a", None, g.generation, now)
    with pytest.raises(UnknownMemberIdError):
        g.heartbeat("x", None, g.generation, now)
    with pytest.raises(IllegalGenerationError):
        g.heartbeat("a", None, g.generation + 1, now)
    g.remove_all(CoordinatorNotAvailableError("gone"))
    assert g.state == DEAD
    with pytest.raises(CoordinatorNotAvailableError):
        g.heartbeat("a", None, g.generation, now)


# ---------------------------------------------------------------------------------------------- static


def test_a_restarted_static_member_takes_its_place_without_a_rebalance_and_fences_its_old_id() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    first, fx = g.join(join(instance="i-1"), "i-1-a", T0)  # static: no MEMBER_ID_REQUIRED
    assert first == "i-1-a" and fx.joins == {}
    g.tick(T0 + DELAY)
    g.sync(first, "i-1", g.generation, None, None, {first: b"A"}, T0 + DELAY)
    generation = g.generation
    again, fx = g.join(join(instance="i-1"), "i-1-b", T0 + DELAY + 1)
    answer = fx.joins[again]
    assert isinstance(answer, JoinResult) and answer.generation == generation and g.state == STABLE
    assert answer.leader == first and answer.members == ()  # the old leader id: no assignment to run
    assert fx.store
    assert g.sync(again, "i-1", generation, None, None, {}, T0 + DELAY + 1).syncs == {again: b"A"}
    with pytest.raises(FencedInstanceIdError):
        g.heartbeat(first, "i-1", generation, T0 + DELAY + 1)
    with pytest.raises(FencedInstanceIdError):
        g.check_commit(first, "i-1", generation, T0 + DELAY + 1)
    errors, _ = g.leave([("", "i-1")], T0 + DELAY + 2)  # a static member may leave by its instance id
    assert errors == [None] and not g.members and not g.static


# ------------------------------------------------------------------------------------------- commits


def test_commits_are_fenced_by_member_and_generation_and_simple_commits_need_an_empty_group() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    g.check_commit("", None, -1, T0)  # no members: an assign() consumer's commit
    new_member(g, "a", T0)
    new_member(g, "b", T0)
    with pytest.raises(UnknownMemberIdError):
        g.check_commit("", None, -1, T0)
    g.tick(T0 + DELAY)
    with pytest.raises(RebalanceInProgressError):  # CompletingRebalance: sync first
        g.check_commit("a", None, g.generation, T0 + DELAY)
    g.sync("a", None, g.generation, None, None, {}, T0 + DELAY)
    g.check_commit("a", None, g.generation, T0 + DELAY)
    with pytest.raises(IllegalGenerationError):
        g.check_commit("a", None, g.generation - 1, T0 + DELAY)
    g.join(join("a"), "unused", T0 + DELAY)  # preparing: a cooperative member may commit what it revokes
    g.check_commit("a", None, g.generation, T0 + DELAY)


# ---------------------------------------------------------------------------------------- stored shape


def test_a_stable_group_survives_its_stored_state_and_its_members_views_decode() -> None:
    g = ClassicGroup("g", initial_delay_ms=DELAY)
    new_member(g, "a", T0, protocols=(("range", sub("t", "u")),))
    new_member(g, "b", T0, protocols=(("range", sub("t")),))
    g.tick(T0 + DELAY)
    assignment = {"a": consumer_protocol.encode_assignment([("t", 0), ("u", 0)]),
                  "b": consumer_protocol.encode_assignment([("t", 1)])}
    g.sync("a", None, g.generation, None, None, assignment, T0 + DELAY)
    assert g.subscribed("u") and not g.subscribed("v")
    state = g.to_state()
    assert state["assignment"] == {"a": [["t", 0], ["u", 0]], "b": [["t", 1]]} and state["state"] == STABLE
    again = ClassicGroup.rebuild("g", state, 5)
    assert again.state == STABLE and again.generation == g.generation and again.leader == "a"
    assert again.summary() == g.summary()
    again.heartbeat("b", None, g.generation, 6)  # members carry on with the new coordinator
    assert again.sync("b", None, g.generation, None, None, {}, 6).syncs == {"b": assignment["b"]}
    assert again.members["a"].expired(6 + SESSION + 1)


def test_an_empty_group_is_stored_as_empty() -> None:
    g, now = stable_group("a")
    _, fx = g.leave([("a", None)], now)
    assert fx.store
    again = ClassicGroup.rebuild("g", g.to_state(), now, wall_ms=123)
    assert again.state == EMPTY and again.generation == g.generation and not again.members


def test_effects_are_empty_by_default() -> None:
    assert Effects() == Effects(joins={}, syncs={}, store=False)
