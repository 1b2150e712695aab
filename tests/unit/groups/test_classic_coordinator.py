"""What the group coordinator adds to Kafka's classic protocol state machine (classic_group.py): parked JoinGroup
and SyncGroup requests answered when the group moves on, the group stored in ZooKeeper when it is Stable or Empty
(and loaded from there by the next coordinator, whose members carry on), commit fencing, the views, and the rule
that a group is one kind or the other. Fakes of ZooKeeper and the clock (tests/unit/groups/fakes.py), the broker's
real event queue; the coordinator's ticker is parked and the test ticks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.metadata.events import EventQueue
from consumer_coordinator import consumer_protocol
from consumer_coordinator import coordinator as coord_module
from consumer_coordinator.classic_group import ClassicJoin, JoinResult
from consumer_coordinator.coordinator import ClassicJoinOutcome, GroupCoordinator, JoinRequest
from consumer_coordinator.group import COMPLETING, EMPTY, PREPARING, STABLE
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from tests.harness.wait import SLOW_MACHINE_S
from tests.unit.groups.fakes import FakeClock, FakeGroupStore, FakeMetadata, FakeSession
from zk.client import LOST

G = "g"
SESSION_MS = 10_000


class Cluster:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.store = FakeGroupStore()
        self.metadata = FakeMetadata()
        self.metadata.set_partitions("t", 4)
        self.sessions: dict[int, FakeSession] = {}

    @asynccontextmanager
    async def coordinator(self, broker_id: int = 1) -> AsyncIterator[GroupCoordinator]:
        session = self.sessions.setdefault(broker_id, FakeSession())
        c = GroupCoordinator(broker_id, session, self.metadata, lambda: 7,  # type: ignore[arg-type]
                             queue_factory=EventQueue, store=self.store, initial_rebalance_delay_ms=100)
        await c.start()
        try:
            yield c
        finally:
            await c.stop()


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    clock = FakeClock()
    monkeypatch.setattr(coord_module, "now_ms", lambda: clock.now)
    monkeypatch.setattr(coord_module, "wall_ms", lambda: clock.now)
    monkeypatch.setattr(coord_module, "TICK_S", 3600.0)
    return Cluster(clock)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    # A hang guard above the waits inside a scenario, so that those name what did not happen.
    asyncio.run(asyncio.wait_for(scenario(), 2 * SLOW_MACHINE_S))


def kafka_join(member_id: str = "", *, topics: tuple[str, ...] = ("t",), session_ms: int = SESSION_MS,
               protocol: str = "range") -> ClassicJoin:
    return ClassicJoin(member_id, None, "kc", "/10.0.0.1", session_ms, 30_000, "consumer",
                       ((protocol, consumer_protocol.encode_subscription(topics)),))


async def tick(c: GroupCoordinator) -> None:
    await c.call(c._tick)


async def start(c: GroupCoordinator, coro: Awaitable[Any]) -> asyncio.Task[Any]:
    """Start a request that may be parked; once this returns, the coordinator has handled it (at the fake
    clock's current time: a test moves the clock only after)."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)
    await tick(c)
    return task


async def member_id_of(c: GroupCoordinator) -> str:
    first = await c.join_classic(G, kafka_join())
    assert isinstance(first.answer, MemberIdRequiredError) and first.member_id.startswith("kc-")
    return first.member_id


async def stable(cluster: Cluster, c: GroupCoordinator, n: int) -> tuple[list[str], int]:
    """``n`` members joined (the v4 round trip), the initial delay passed, the leader synced partition p of
    "t" to member p."""
    await c.locate(G)
    ids = [await member_id_of(c) for _ in range(n)]
    joins = [await start(c, c.join_classic(G, kafka_join(m))) for m in ids]
    cluster.clock.advance(100)
    await tick(c)
    results = [(await asyncio.wait_for(j, SLOW_MACHINE_S)).answer for j in joins]
    assert all(isinstance(r, JoinResult) for r in results)
    generation = results[0].generation
    assignment = {m: consumer_protocol.encode_assignment([("t", i)]) for i, m in enumerate(ids)}
    syncs = [await start(c, c.sync_classic(G, m, None, generation, "consumer", "range", {})) for m in ids[1:]]
    leader = await c.sync_classic(G, ids[0], None, generation, "consumer", "range", assignment)
    assert leader.assignment == assignment[ids[0]] and leader.protocol_name == "range"
    assert [(await asyncio.wait_for(s, SLOW_MACHINE_S)).assignment for s in syncs] == [assignment[m] for m in ids[1:]]
    return ids, generation


def test_members_join_sync_and_the_stable_group_is_stored(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            (a, b), generation = await stable(cluster, c, 2)
            state = cluster.store.state(G)
            assert state is not None and state["kind"] == "classic" and state["state"] == STABLE
            assert state["generation"] == generation and state["assignment"] == {a: [["t", 0]], b: [["t", 1]]}
            described = await c.describe(G)
            assert described["kind"] == "classic" and described["leader"] == a
            assert [(m["member_id"], m["host"], m["assignment"]) for m in described["members"]] == [
                (a, "/10.0.0.1", [["t", 0]]), (b, "/10.0.0.1", [["t", 1]])]
            summary = await c.summary(G)
            assert summary.state == STABLE and summary.protocol_name == "range"
            assert [consumer_protocol.assignment_partitions(m.assignment) for m in summary.members] == [
                [("t", 0)], [("t", 1)]]
            listed = await c.listings(unclaimed=False)
            assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [(G, "consumer", STABLE)]

    run(scenario)


def test_commits_are_fenced_and_read_back_on_the_coordinator(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            (a, _b), generation = await stable(cluster, c, 2)
            await c.commit(G, a, generation, {("t", 0): (42, "meta")})
            with pytest.raises(IllegalGenerationError):
                await c.commit(G, a, generation - 1, {("t", 0): (43, "")})
            with pytest.raises(UnknownMemberIdError):
                await c.commit(G, "", -1, {("t", 0): (44, "")})  # members: no simple commit
            offsets = await c.fetch_offsets(G)
            assert {tp: o[:2] for tp, o in offsets.items()} == {("t", 0): (42, "meta")}
            with pytest.raises(NonEmptyGroupError):
                await c.delete(G)

    run(scenario)


def test_a_silent_member_expires_the_other_rejoins_and_the_last_leave_stores_the_empty_group(
        cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            (a, b), generation = await stable(cluster, c, 2)
            cluster.clock.advance(SESSION_MS // 2)
            await c.heartbeat_classic(G, a, None, generation)
            cluster.clock.advance(SESSION_MS // 2 + 1)
            await tick(c)
            assert list(c.classic[G].members) == [a] and c.classic[G].state == PREPARING
            with pytest.raises(RebalanceInProgressError):
                await c.heartbeat_classic(G, a, None, generation)
            rejoined = await c.join_classic(G, kafka_join(a))
            assert isinstance(rejoined.answer, JoinResult) and rejoined.answer.generation == generation + 1
            assert [m.member_id for m in rejoined.answer.members] == [a]
            errors = await c.leave_classic(G, [(a, None), (b, None)])  # b was expelled already
            assert errors[0] is None and isinstance(errors[1], UnknownMemberIdError)
            assert c.classic[G].state == EMPTY
            state = cluster.store.state(G)
            assert state is not None and state["state"] == EMPTY and state["members"] == {}
            await c.delete(G)
            assert G not in c.classic and cluster.store.state(G) is None

    run(scenario)


def test_a_new_coordinator_loads_the_stable_group_and_its_members_carry_on(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator(1) as c1:
            (a, b), generation = await stable(cluster, c1, 2)
        cluster.store.expire_session(1)
        async with cluster.coordinator(2) as c2:
            assert await c2.locate(G) == 2
            g = c2.classic[G]
            assert g.state == STABLE and g.generation == generation and g.leader == a
            await c2.heartbeat_classic(G, b, None, generation)  # no rebalance: the same generation goes on
            synced = await c2.sync_classic(G, b, None, generation, None, None, {})
            assert consumer_protocol.assignment_partitions(synced.assignment) == [("t", 1)]
            await c2.commit(G, b, generation, {("t", 1): (9, "")})

    run(scenario)


def test_a_group_is_one_kind_or_the_other(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            rest = JoinRequest(None, "rest", "host", frozenset({"t"}), None, "range", SESSION_MS, 30_000, [])
            joining = await start(c, c.join(G, rest))
            cluster.clock.advance(100)
            await tick(c)
            answer = await asyncio.wait_for(joining, SLOW_MACHINE_S)
            with pytest.raises(InconsistentGroupProtocolError):
                await c.join_classic(G, kafka_join())
            [error] = await c.leave_classic(G, [("m", None)])
            assert isinstance(error, UnknownMemberIdError)
            await c.leave(G, answer["member_id"])
            cluster.clock.advance(100)
            await tick(c)
            outcome = await c.join_classic(G, kafka_join())  # empty now: it becomes a Kafka-protocol group
            assert isinstance(outcome.answer, MemberIdRequiredError) and G in c.classic and G not in c.groups
            assert c.classic[G].generation >= answer["generation"]  # generations go on across kinds
            joined = await start(c, c.join_classic(G, kafka_join(outcome.member_id)))
            cluster.clock.advance(100)
            await tick(c)
            assert isinstance((await asyncio.wait_for(joined, SLOW_MACHINE_S)).answer, JoinResult)
            with pytest.raises(InconsistentGroupProtocolError):
                await c.join(G, rest)
            with pytest.raises(UnknownMemberIdError):  # the server-side API does not know its members
                await c.heartbeat(G, outcome.member_id, 1)

    run(scenario)


def test_bad_session_timeouts_and_unknown_groups(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            with pytest.raises(InvalidSessionTimeoutError):
                await c.join_classic(G, kafka_join(session_ms=1000))
            with pytest.raises(NotCoordinatorError):  # never located here
                await c.join_classic(G, kafka_join())

    run(scenario)


def test_a_lost_session_answers_parked_joins_not_coordinator(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            member = await member_id_of(c)
            parked = await start(c, c.join_classic(G, kafka_join(member)))
            await tick(c)
            assert not parked.done()
            cluster.sessions[1].change(LOST)
            outcome: ClassicJoinOutcome = await asyncio.wait_for(parked, SLOW_MACHINE_S)
            assert isinstance(outcome.answer, NotCoordinatorError)
            assert G not in c.classic

    run(scenario)


def test_a_stable_group_that_cannot_be_stored_rebalances(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a = await member_id_of(c)
            joining = await start(c, c.join_classic(G, kafka_join(a)))
            cluster.clock.advance(100)
            await tick(c)
            result = (await asyncio.wait_for(joining, SLOW_MACHINE_S)).answer
            assert isinstance(result, JoinResult)

            def broken(group: str, state: dict[str, Any]) -> None:
                raise OSError("ZooKeeper is gone")

            monkeypatch.setattr(cluster.store, "set_state", broken)
            with pytest.raises(CoordinatorNotAvailableError):
                await c.sync_classic(G, a, None, result.generation, None, None, {a: b"x"})
            assert c.classic[G].state in (PREPARING, COMPLETING)

    run(scenario)
