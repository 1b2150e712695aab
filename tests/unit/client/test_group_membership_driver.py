"""The thread driver of the member state machine (odradek/client/group_membership.py's ``Membership``) against a
fake group API: it sends what the state machine asks for, hands join answers and losses to its listener, and
feeds answers and typed errors back. Real threads, short timers; no network."""

from __future__ import annotations

import threading
from typing import Any

from odradek.client.group_membership import JoinResult, Membership, plan_rebalance
from odradek.client.types import TopicPartition as TP
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    IllegalGenerationError,
    OdradekError,
    UnknownMemberIdError,
)
from tests.harness.wait import SLOW_MACHINE_S, hold_for, wait_until

# The session of a member that is not meant to lose it: longer than a loaded machine may starve the driver's
# heartbeat thread.
SESSION_MS = 10_000


class FakeGroupApi:
    """A coordinator reduced to what a member sees: joins answer the next scripted assignment, heartbeats answer
    the next scripted error (or success), every call is recorded."""

    group_id = "g"
    request_timeout_ms = 1000

    def __init__(self, assignments: list[tuple[list[int], list[int]]]) -> None:
        self._lock = threading.Lock()
        self.assignments = list(assignments)  # (assignment, revoke) per join
        self.heartbeat_errors: list[OdradekError] = []
        self.joins: list[dict[str, Any]] = []
        self.heartbeats: list[tuple[str, int]] = []
        self.leaves: list[str] = []
        self.generation = 0
        self.members = 0

    def call(self, method: str, *segments: str, payload: Any = None, query: dict[str, Any] | None = None,
             timeout_ms: float | None = None) -> Any:
        with self._lock:
            if method == "POST" and segments == ("members",):
                self.joins.append(payload)
                member = payload.get("member_id")
                if member is None:
                    self.members += 1
                    member = f"m{self.members}"
                assignment, revoke = self.assignments.pop(0) if self.assignments else ([], [])
                self.generation += 1
                return {"member_id": member, "generation": self.generation,
                        "assignment": [["t", p] for p in assignment], "revoke": [["t", p] for p in revoke]}
            if method == "POST" and segments[-1] == "heartbeat":
                self.heartbeats.append((segments[1], payload["generation"]))
                if self.heartbeat_errors:
                    raise self.heartbeat_errors.pop(0)
                return {"rebalance": False}
            if method == "DELETE":
                self.leaves.append(segments[1])
                return {}
        raise AssertionError(f"unexpected call {method} {segments}")


class Application:
    """The listener: applies join answers as GroupConsumer does (in its own thread, here the test's)."""

    def __init__(self) -> None:
        self.owned: set[TP] = set()
        self.answers: list[JoinResult] = []
        self.lost: list[str] = []
        self.membership: Membership | None = None

    def owned_partitions(self) -> set[TP]:
        return set(self.owned)

    def on_join(self, result: JoinResult) -> None:
        self.answers.append(result)

    def on_lost(self, reason: str) -> None:
        self.owned = set()
        self.lost.append(reason)

    def apply(self, result: JoinResult) -> None:
        assert self.membership is not None
        plan = plan_rebalance(self.owned, result)
        self.owned = set(plan.keep | plan.added)
        self.membership.applied(rejoin=plan.must_rejoin)


def start(api: FakeGroupApi, session_ms: int = SESSION_MS) -> tuple[Membership, Application]:
    app = Application()
    m = Membership(api, app, client_id="c", assignor="cooperative-sticky",  # type: ignore[arg-type]
                   session_timeout_ms=session_ms, rebalance_timeout_ms=1000, max_poll_interval_ms=60_000,
                   heartbeat_interval_ms=50, retry_backoff_ms=10)
    app.membership = m
    m.subscribe(["t"], None)
    return m, app


def test_joins_heartbeats_in_its_generation_and_rejoins_as_a_new_member_when_unknown() -> None:
    api = FakeGroupApi([([0, 1], []), ([0], [])])
    m, app = start(api)
    try:
        wait_until(lambda: len(app.answers) == 1, SLOW_MACHINE_S, "the join answer", interval=0.01)
        assert api.joins[0]["owned"] == [] and "member_id" not in api.joins[0]
        app.apply(app.answers[0])
        assert app.owned == {TP("t", 0), TP("t", 1)} and m.member_id == "m1" and m.generation == 1
        wait_until(lambda: len(api.heartbeats) >= 2, SLOW_MACHINE_S, "heartbeats", interval=0.01)
        assert set(api.heartbeats) == {("m1", 1)}
        api.heartbeat_errors.append(UnknownMemberIdError("gone"))
        wait_until(lambda: len(app.answers) == 2, SLOW_MACHINE_S, "a join as a new member", interval=0.01)
        assert app.lost == ["heartbeat answered UNKNOWN_MEMBER_ID"] and app.owned == set()
        assert "member_id" not in api.joins[1] and api.joins[1]["owned"] == []
        assert app.answers[1].member_id == "m2"
    finally:
        m.close()
    assert api.leaves == ["m2"]


def test_a_cooperative_revocation_joins_again_without_the_revoked_partition() -> None:
    api = FakeGroupApi([([0, 1], []), ([0, 1], [1]), ([0], [])])
    m, app = start(api)
    try:
        wait_until(lambda: len(app.answers) == 1, SLOW_MACHINE_S, "the first answer", interval=0.01)
        app.apply(app.answers[0])
        m.rejoin()
        wait_until(lambda: len(app.answers) == 2, SLOW_MACHINE_S, "the revoking answer", interval=0.01)
        hold_for(lambda: len(api.joins) == 2, 0.1, "no join before the answer is applied")
        app.apply(app.answers[1])
        wait_until(lambda: len(api.joins) == 3, SLOW_MACHINE_S, "the join after revoking", interval=0.01)
        assert api.joins[2]["owned"] == [["t", 0]] and api.joins[2]["member_id"] == "m1"
    finally:
        m.close()


def test_an_illegal_generation_heartbeat_loses_but_keeps_the_member_id() -> None:
    api = FakeGroupApi([([0], []), ([0], [])])
    m, app = start(api)
    try:
        wait_until(lambda: len(app.answers) == 1, SLOW_MACHINE_S, "the first answer", interval=0.01)
        app.apply(app.answers[0])
        api.heartbeat_errors.append(IllegalGenerationError("old"))
        wait_until(lambda: len(api.joins) == 2, SLOW_MACHINE_S, "the rejoin", interval=0.01)
        assert app.lost == ["heartbeat answered ILLEGAL_GENERATION"]
        assert api.joins[1]["member_id"] == "m1" and api.joins[1]["owned"] == []
    finally:
        m.close()


def test_commit_failures_are_told_apart_by_type() -> None:
    api = FakeGroupApi([([0], [])])
    m, app = start(api, session_ms=60_000)
    try:
        wait_until(lambda: len(app.answers) == 1, SLOW_MACHINE_S, "the answer", interval=0.01)
        app.apply(app.answers[0])
        member, generation = m.fencing()
        assert not m.commit_failed(BrokerNotAvailableError("down"), member, generation)
        assert app.lost == [] and app.owned == {TP("t", 0)}
        assert m.commit_failed(UnknownMemberIdError("gone"), member, generation)  # fenced: the partitions are lost
        assert app.lost == ["a commit was answered UNKNOWN_MEMBER_ID"] and app.owned == set()
    finally:
        m.close()


def test_a_session_that_may_have_expired_is_lost_and_joined_again_as_a_new_member() -> None:
    api = FakeGroupApi([([0], [])])
    api.heartbeat_errors = [BrokerNotAvailableError("down")] * 1000  # the coordinator is unreachable
    m, app = start(api, session_ms=1000)
    try:
        wait_until(lambda: len(app.answers) == 1, SLOW_MACHINE_S, "the answer", interval=0.01)
        app.apply(app.answers[0])
        wait_until(lambda: app.lost[:1] == ["session timed out"], SLOW_MACHINE_S, "the loss", interval=0.01)
        assert app.owned == set()
        wait_until(lambda: len(api.joins) >= 2, SLOW_MACHINE_S, "the join after the loss", interval=0.01)
        assert "member_id" not in api.joins[1]  # as a new member: the coordinator may have expired the old one
    finally:
        m.close(leave=False)
