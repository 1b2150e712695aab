"""The member state machine of the group protocol (odradek/protocol/group_member.py), with no I/O at all: each
test feeds answers and typed errors with the time they arrive, and checks the actions that come out.

The tables pair every group error with every state a member can be in when the answer arrives (stable, a join
in flight, a join answer being applied), for heartbeats, joins and commits; then cooperative and eager
revocation, the session clock, commit fencing, the poll interval and closing."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.protocol.errors import (
    BrokerNotAvailableError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidRequestError,
    NotCoordinatorError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from odradek.protocol.group_member import (
    APPLYING,
    JOINING,
    SESSION_MARGIN,
    STABLE,
    UNJOINED,
    Action,
    Assign,
    Fencing,
    GroupMember,
    JoinResult,
    Lost,
    Revoke,
    SendHeartbeat,
    SendJoin,
    SendLeave,
    is_commit_fenced,
)
from odradek.protocol.model import TopicPartition as TP

SESSION_MS = 10_000
BACKOFF_MS = 100
LIMIT_S = SESSION_MS / 1000 * SESSION_MARGIN


def member(**kwargs: Any) -> GroupMember:
    settings: dict[str, Any] = {
        "client_id": "c", "assignor": "cooperative-sticky", "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 30_000, "max_poll_interval_ms": 60_000, "heartbeat_interval_ms": 3000,
        "retry_backoff_ms": BACKOFF_MS, "now": 0.0, **kwargs}
    m = GroupMember(**settings)
    m.subscribe(["t"], None)
    return m


def answer(generation: int, assignment: list[int], revoke: list[int] = (), member_id: str = "m1"  # type: ignore[assignment]
           ) -> JoinResult:
    return JoinResult(member_id, generation, frozenset(TP("t", p) for p in assignment),
                      frozenset(TP("t", p) for p in revoke))


def of(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def joined(owned: list[int] = (0, 1), generation: int = 3, now: float = 1.0) -> GroupMember:  # type: ignore[assignment]
    """A stable member of ``generation`` owning ``owned``, whose join answer arrived at ``now``."""
    m = member()
    [send] = m.tick(0.0)
    assert isinstance(send, SendJoin) and send.spec.member_id is None
    m.join_succeeded(answer(generation, list(owned)), now)
    m.applied()
    assert m.state == STABLE and m.assignment == {TP("t", p) for p in owned}
    return m


def in_state(state: str) -> tuple[GroupMember, SendHeartbeat]:
    """A member in ``state`` with a heartbeat in flight, sent at t=2."""
    m = joined()
    if state == JOINING:
        m.rejoin()
    elif state == APPLYING:
        m.rejoin()
        m.tick(1.5)
        m.heartbeat_succeeded(1.5, rebalance=False)  # the beat sent with the join, answered
        m.join_succeeded(answer(4, [0, 1]), 1.6)
        m._next_heartbeat = 0.0  # beat again now rather than an interval later
    actions = m.tick(2.0)
    [beat] = of(actions, SendHeartbeat)
    assert m.state == state
    return m, beat


def settle(m: GroupMember, state: str, now: float) -> None:
    """Finish what the state had under way: the join in flight answers (same assignment), an answer is applied."""
    if state == JOINING:
        m.join_succeeded(answer(4, [0, 1]), now)
    if state in (JOINING, APPLYING):
        m.applied()


# ------------------------------------------------------------------------------------------ heartbeat errors

TRANSIENT = [NotCoordinatorError("x"), CoordinatorNotAvailableError("x"), BrokerNotAvailableError("x"),
             RequestTimedOutError("x")]

# (state, error, lost?, member id forgotten?, a join follows once the state settles?)
HEARTBEAT_TABLE = [
    (STABLE, UnknownMemberIdError("x"), True, True, True),
    (STABLE, IllegalGenerationError("x"), True, False, True),
    (STABLE, RebalanceInProgressError("x"), False, False, True),
    *[(STABLE, e, False, False, False) for e in TRANSIENT],
    # A join in flight decides: fencing errors change nothing, a rebalance answer asks for nothing more.
    (JOINING, UnknownMemberIdError("x"), False, False, False),
    (JOINING, IllegalGenerationError("x"), False, False, False),
    (JOINING, RebalanceInProgressError("x"), False, False, False),
    *[(JOINING, e, False, False, False) for e in TRANSIENT],
    # An answer being applied does not protect the member: the coordinator has already moved on without it.
    (APPLYING, UnknownMemberIdError("x"), True, True, True),
    (APPLYING, IllegalGenerationError("x"), True, False, True),
    (APPLYING, RebalanceInProgressError("x"), False, False, True),
    *[(APPLYING, e, False, False, False) for e in TRANSIENT],
]


@pytest.mark.parametrize(("state", "error", "lost", "forgotten", "rejoins"), HEARTBEAT_TABLE,
                         ids=[f"{s}-{type(e).__name__}" for s, e, *_ in HEARTBEAT_TABLE])
def test_heartbeat_errors_by_type_and_state(state: str, error: Exception, lost: bool, forgotten: bool,
                                            rejoins: bool) -> None:
    m, _ = in_state(state)
    member_before = m.member_id
    actions = m.heartbeat_failed(error, 2.5)
    assert bool(of(actions, Lost)) == lost
    if lost:
        assert m.generation == -1 and m.assignment == frozenset() and m.commit_fencing() != Fencing("m1", 3)
    assert (m.member_id is None) == forgotten
    if not forgotten:
        assert m.member_id == member_before
    settle(m, state, 2.6)
    joins = of(m.tick(2.7), SendJoin)
    assert bool(joins) == rejoins
    if joins:
        assert joins[0].spec.member_id == (None if forgotten else "m1")
        assert joins[0].spec.owned == (() if lost else (TP("t", 0), TP("t", 1)))  # a loss owns nothing


@pytest.mark.parametrize("state", [STABLE, JOINING, APPLYING])
def test_a_rebalance_answer_proves_the_session_alive_in_every_state(state: str) -> None:
    m, _ = in_state(state)
    m.alive_since = 0.5
    m.heartbeat_failed(RebalanceInProgressError("x"), 9.0)
    assert m.alive_since == 2.0  # the send time of the beat, not its answer's


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__)
def test_a_failed_heartbeat_does_not_extend_the_session(error: Exception) -> None:
    m, _ = in_state(STABLE)
    m.heartbeat_failed(error, 2.5)
    assert m.alive_since == 1.0


def test_a_good_heartbeat_counts_from_its_send_and_may_ask_for_a_join() -> None:
    m, _ = in_state(STABLE)
    assert m.heartbeat_succeeded(7.0, rebalance=True) == []
    assert m.alive_since == 2.0
    assert of(m.tick(7.0), SendJoin)


def test_a_stale_heartbeat_answer_is_ignored() -> None:
    """Sent for generation 3; a join answered generation 4 meanwhile: its ILLEGAL_GENERATION says nothing."""
    m, beat = in_state(JOINING)
    assert beat.generation == 3
    m.join_succeeded(answer(4, [0, 1]), 2.2)
    assert m.heartbeat_failed(IllegalGenerationError("x"), 2.3) == []
    assert m.member_id == "m1" and m.generation == 4


def test_one_heartbeat_at_a_time_then_one_interval_after_its_answer() -> None:
    m, _ = in_state(STABLE)
    assert not of(m.tick(8.0), SendHeartbeat)  # still in flight
    m.heartbeat_succeeded(2.5, rebalance=False)
    assert not of(m.tick(5.4), SendHeartbeat)
    assert of(m.tick(5.5), SendHeartbeat)
    assert member(session_timeout_ms=900).heartbeat_interval_s == pytest.approx(0.3)  # at most a third


# ---------------------------------------------------------------------------------------------- join errors

# (error, lost and joins again at once as a new member?) -- anything else: after the backoff, same id, same owned.
JOIN_TABLE = [
    (UnknownMemberIdError("x"), True),
    (RebalanceInProgressError("x"), False),
    (NotCoordinatorError("x"), False),
    (CoordinatorNotAvailableError("x"), False),
    (BrokerNotAvailableError("x"), False),
    (RequestTimedOutError("x"), False),
    (InvalidRequestError("x"), False),
    (KeyError("generation"), False),  # an answer that does not parse
]


@pytest.mark.parametrize(("error", "as_new_member"), JOIN_TABLE, ids=[type(e).__name__ for e, _ in JOIN_TABLE])
def test_join_errors_by_type(error: Exception, as_new_member: bool) -> None:
    m = joined()
    m.rejoin()
    assert of(m.tick(2.0), SendJoin) and m.state == JOINING
    actions = m.join_failed(error, 2.5)
    assert bool(of(actions, Lost)) == as_new_member
    retry_at = 2.5 if as_new_member else 2.5 + BACKOFF_MS / 1000
    if not as_new_member:
        assert not of(m.tick(2.5), SendJoin)
        assert m.next_deadline() == pytest.approx(retry_at)
    [join] = of(m.tick(retry_at), SendJoin)
    assert join.spec.member_id == (None if as_new_member else "m1")
    assert join.spec.owned == (() if as_new_member else (TP("t", 0), TP("t", 1)))


def test_a_first_join_goes_without_an_id_and_carries_the_subscription() -> None:
    m = member()
    m.subscribe(None, "t.*")
    [join] = m.tick(0.0)
    assert isinstance(join, SendJoin)
    assert join.spec.to_json() == {"client_id": "c", "assignor": "cooperative-sticky", "session_timeout_ms": SESSION_MS,
                                   "rebalance_timeout_ms": 30_000, "max_poll_interval_ms": 60_000, "owned": [],
                                   "pattern": "t.*"}
    assert m.tick(0.0) == []  # one join at a time, no heartbeat without a member id
    assert m.state == JOINING


# ------------------------------------------------------------------------------------ revocation, cooperative/eager


def test_cooperative_revocation_gives_up_only_what_is_named_then_joins_again_without_it() -> None:
    m = joined([0, 1])
    m.rejoin()
    m.tick(2.0)
    actions = m.join_succeeded(answer(4, [0, 1], revoke=[1]), 3.0)
    assert actions == [Revoke(frozenset({TP("t", 1)}), 4)]
    assert m.state == APPLYING and not of(m.tick(3.0), SendJoin)  # nothing until the answer is applied
    m.applied()
    [join] = of(m.tick(3.1), SendJoin)
    assert join.spec.owned == (TP("t", 0),) and join.spec.member_id == "m1"


def test_eager_revocation_drops_what_the_answer_leaves_out_and_does_not_join_again() -> None:
    m = joined([0, 1])
    m.rejoin()
    m.tick(2.0)
    actions = m.join_succeeded(answer(4, [1, 2]), 3.0)
    assert actions == [Revoke(frozenset({TP("t", 0)}), 4), Assign(frozenset({TP("t", 2)}), 4)]
    m.applied()
    assert m.assignment == {TP("t", 1), TP("t", 2)} and not of(m.tick(3.1), SendJoin)


def test_a_partition_both_assigned_and_revoked_is_never_assigned() -> None:
    m = member()
    m.tick(0.0)
    assert m.join_succeeded(answer(1, [0], revoke=[0]), 1.0) == []
    m.applied()
    assert m.assignment == frozenset() and of(m.tick(1.1), SendJoin)


def test_applied_takes_what_the_application_really_owns() -> None:
    m = member()
    m.tick(0.0)
    assert m.join_succeeded(answer(1, [0, 1]), 1.0) == [Assign(frozenset({TP("t", 0), TP("t", 1)}), 1)]
    m.applied([TP("t", 0)])  # it could not start t-1
    m.rejoin()
    [join] = of(m.tick(1.1), SendJoin)
    assert join.spec.owned == (TP("t", 0),)


def test_an_answer_lost_before_it_is_applied_is_void() -> None:
    m = member()
    m.tick(0.0)
    m.join_succeeded(answer(1, [0, 1]), 1.0)
    assert m.pending_generation == 1
    assert of(m.expire(1.0 + LIMIT_S + 0.1), Lost)
    assert m.pending_generation is None
    m.applied()  # too late: ignored
    assert m.assignment == frozenset() and m.state == UNJOINED


# ----------------------------------------------------------------------------------------------- session


def test_the_session_expires_at_its_margin_counted_from_the_join_answer() -> None:
    m = joined(now=1.0)
    m._next_heartbeat = 1e9  # no beat: the session runs out
    assert not of(m.tick(1.0 + LIMIT_S - 0.01), Lost)
    assert m.next_deadline() == pytest.approx(1.0 + LIMIT_S, abs=0.01)
    actions = m.tick(1.0 + LIMIT_S + 0.01)
    [lost] = of(actions, Lost)
    assert lost.partitions == {TP("t", 0), TP("t", 1)} and lost.reason == "session timed out"
    [join] = of(actions, SendJoin)
    assert join.spec.member_id is None and join.spec.owned == ()


def test_session_expiry_with_a_join_in_flight_loses_and_the_answer_restores_the_member() -> None:
    m = joined(now=1.0)
    m.rejoin()
    m.tick(1.0)
    m.heartbeat_failed(BrokerNotAvailableError("x"), 1.1)
    assert m.session_expired(1.0 + LIMIT_S + 0.1)
    assert of(m.expire(1.0 + LIMIT_S + 0.1), Lost) and m.member_id is None and m.state == JOINING
    assert m.join_succeeded(answer(4, [0, 1]), 20.0) == [Assign(frozenset({TP("t", 0), TP("t", 1)}), 4)]
    assert m.member_id == "m1" and m.alive_since == 20.0


def test_no_session_before_the_first_join() -> None:
    m = member()
    assert not m.session_expired(1e9) and m.expire(1e9) == []


# ----------------------------------------------------------------------------------------- commit fencing


def test_commits_carry_the_current_generation_and_none_without_a_member_id() -> None:
    m = member()
    assert m.commit_fencing() is None
    m.tick(0.0)
    m.join_succeeded(answer(7, [0]), 1.0)
    assert m.commit_fencing() == Fencing("m1", 7)  # already while applying: revoked partitions commit in it
    assert is_commit_fenced(IllegalGenerationError("x")) and is_commit_fenced(UnknownMemberIdError("x"))
    assert is_commit_fenced(RebalanceInProgressError("x")) and not is_commit_fenced(BrokerNotAvailableError("x"))


# (state, error, lost?, forgotten?, joins?) for a commit sent with the current fencing.
COMMIT_TABLE = [
    (STABLE, UnknownMemberIdError("x"), True, True, True),
    (STABLE, IllegalGenerationError("x"), True, False, True),
    (STABLE, RebalanceInProgressError("x"), False, False, True),
    (STABLE, BrokerNotAvailableError("x"), False, False, False),
    (JOINING, UnknownMemberIdError("x"), False, False, False),
    (JOINING, IllegalGenerationError("x"), False, False, False),
    (APPLYING, UnknownMemberIdError("x"), False, False, False),
    (APPLYING, IllegalGenerationError("x"), False, False, False),
]


@pytest.mark.parametrize(("state", "error", "lost", "forgotten", "rejoins"), COMMIT_TABLE,
                         ids=[f"{s}-{type(e).__name__}" for s, e, *_ in COMMIT_TABLE])
def test_commit_errors_by_type_and_state(state: str, error: Exception, lost: bool, forgotten: bool,
                                         rejoins: bool) -> None:
    m, _ = in_state(state)
    m.heartbeat_succeeded(2.1, rebalance=False)
    actions = m.commit_failed(error, m.commit_fencing(), 2.2)
    assert bool(of(actions, Lost)) == lost and (m.member_id is None) == forgotten
    settle(m, state, 2.3)
    assert bool(of(m.tick(2.4), SendJoin)) == rejoins


def test_a_commit_refused_for_an_older_generation_changes_nothing() -> None:
    m = joined(generation=3)
    old = m.commit_fencing()
    m.rejoin()
    m.tick(2.0)
    m.join_succeeded(answer(4, [0, 1]), 2.5)
    m.applied()
    assert m.commit_failed(IllegalGenerationError("x"), old, 3.0) == []
    assert m.commit_fencing() == Fencing("m1", 4) and m.assignment == {TP("t", 0), TP("t", 1)}
    assert m.commit_failed(UnknownMemberIdError("x"), None, 3.0) == []  # a standalone commit's refusal


# -------------------------------------------------------------------------------------- poll interval, close


def test_the_poll_interval_loses_and_leaves_then_waits_for_a_poll() -> None:
    m = joined()
    m.heartbeat_succeeded(0.0, rebalance=False)
    actions = m.tick(61.0)
    assert [type(a) for a in actions] == [Lost, SendLeave] and actions[1] == SendLeave("m1", actions[1].reason)
    assert m.member_id is None and m.waiting_for_poll
    assert not of(m.tick(200.0), SendJoin)
    m.polled(201.0)
    [join] = of(m.tick(201.0), SendJoin)
    assert join.spec.member_id is None


def test_without_the_poll_interval_rule_an_idle_member_stays() -> None:
    m = member(leave_on_poll_timeout=False)
    m.tick(0.0)
    m.join_succeeded(answer(1, [0]), 100.0)
    m.applied()
    actions = m.tick(100.0)  # last polled at 0, the interval is 60 s: still a member, heartbeating
    assert [type(a) for a in actions] == [SendHeartbeat] and m.member_id == "m1"


def test_close_leaves_once_and_then_nothing_happens() -> None:
    m = joined()
    assert m.close() == [SendLeave("m1", "closed")]
    assert m.tick(1e9) == [] and m.next_deadline() is None and m.commit_fencing() is None
    assert m.join_succeeded(answer(9, [0]), 2.0) == [] and m.member_id is None
    assert member().close() == []  # never joined: nothing to leave
