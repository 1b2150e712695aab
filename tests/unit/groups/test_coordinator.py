"""The group coordinator's membership (join, the assignment a join answers with, heartbeat, leave, expiry,
rebalances, commit fencing, failover), run against fakes of its collaborators (tests/unit/groups/fakes.py) on the
broker's real event queue.

Determinism: the clock is the fake's, and the coordinator's ticker is parked (``TICK_S``), so a test moves time
and then runs one tick itself (``tick``); every coordinator call is queued in order, so a join started before a
tick is registered before that tick runs (``start_join``). The pure group state machine is in
test_group_state.py; these tests are about what the coordinator adds: long-polled joins, the ZooKeeper nodes it
writes (members, owners, state, offsets) and the fencing it applies on its own task.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.metadata.events import EventQueue
from consumer_coordinator import coordinator as coord_module
from consumer_coordinator.coordinator import GroupCoordinator, JoinRequest
from consumer_coordinator.group import EMPTY, PREPARING, STABLE
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from tests.harness.wait import SLOW_MACHINE_S, wait_until_async
from tests.unit.groups.fakes import FakeClock, FakeGroupStore, FakeMetadata, FakeSession
from zk.client import LOST

G = "g"
SESSION_MS = 10_000
ALL = [["t", p] for p in range(4)]


class Cluster:
    """One coordinating broker's collaborators, shared by the coordinators a test starts (failover)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.store = FakeGroupStore()
        self.metadata = FakeMetadata()
        self.metadata.set_partitions("t", 4)
        self.sessions: dict[int, FakeSession] = {}

    @asynccontextmanager
    async def coordinator(self, broker_id: int = 1, *, delay_ms: int = 0,
                          changed: Callable[[float], Awaitable[None]] | None = None,
                          epoch: int | None = 7) -> AsyncIterator[GroupCoordinator]:
        session = self.sessions.setdefault(broker_id, FakeSession())
        c = GroupCoordinator(broker_id, session, self.metadata, lambda: epoch,  # type: ignore[arg-type]
                             queue_factory=EventQueue, store=self.store, changed=changed,
                             initial_rebalance_delay_ms=delay_ms)
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
    monkeypatch.setattr(coord_module, "TICK_S", 3600.0)  # ticks are the test's: tick()
    return Cluster(clock)


def request(member_id: str | None = None, *, owned: list[tuple[str, int]] | None = None, client: str = "client",
            session_ms: int = SESSION_MS, assignor: str = "range") -> JoinRequest:
    """A join of a new member (``member_id`` None: its id will start with ``client``, which orders the members
    for the range assignor) or a rejoin that lists what the member still owns."""
    return JoinRequest(member_id, client, "host", frozenset({"t"}), None, assignor, session_ms, 30_000,
                       list(owned or []))


async def start_join(c: GroupCoordinator, req: JoinRequest) -> asyncio.Task[dict[str, Any]]:
    """Start a long-polled join; once this returns, the join is queued ahead of anything queued after it."""
    task = asyncio.create_task(c.join(G, req))
    await asyncio.sleep(0)
    return task


async def tick(c: GroupCoordinator) -> None:
    """One run of the coordinator's timer work (expiry, completing ready rebalances), on its own task."""
    await c.call(c._tick)


async def join_all(c: GroupCoordinator, *reqs: JoinRequest) -> list[dict[str, Any]]:
    tasks = [await start_join(c, r) for r in reqs]
    await tick(c)
    return [await asyncio.wait_for(t, SLOW_MACHINE_S) for t in tasks]


def owned(answer: dict[str, Any]) -> list[tuple[str, int]]:
    return [(t, p) for t, p in answer["assignment"]]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    # A hang guard above the waits inside a scenario, so that those name what did not happen.
    asyncio.run(asyncio.wait_for(scenario(), 2 * SLOW_MACHINE_S))


# ------------------------------------------------------------------------------------------- join and sync


def test_a_join_long_polls_until_the_rebalance_completes_and_the_group_is_in_zookeeper(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator(delay_ms=300) as c:
            assert await c.locate(G) == 1
            task = await start_join(c, request())
            await tick(c)
            assert not task.done() and c.groups[G].state == PREPARING  # the stabilization window
            cluster.clock.advance(300)
            await tick(c)
            answer = await asyncio.wait_for(task, SLOW_MACHINE_S)
            member = answer["member_id"]
            assert member.startswith("client-")
            assert answer["generation"] == 1 and answer["assignment"] == ALL and answer["revoke"] == []
            assert answer["assignor"] == "range" and answer["coordinator"] == 1
            assert list(cluster.store.members[G]) == [member]
            assert cluster.store.owners[G] == {("t", p): member for p in range(4)}
            state = cluster.store.state(G)
            assert state is not None and state["generation"] == 1 and state["state"] == STABLE
            assert state["assignment"] == {member: ALL}

    run(scenario)


def test_members_joining_together_get_one_generation_and_disjoint_assignments(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            assert a["generation"] == b["generation"] == 1
            assert a["member_id"] != b["member_id"]
            assert sorted(owned(a) + owned(b)) == [("t", p) for p in range(4)] and set(owned(a)).isdisjoint(owned(b))
            assert (await c.describe(G))["members"] == sorted(
                ({"member_id": x["member_id"], "client_id": "client", "host": "host", "assignment": x["assignment"]}
                 for x in (a, b)), key=lambda m: m["member_id"])

    run(scenario)


def test_a_new_member_moves_partitions_only_after_their_owner_gave_them_up(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            (a,) = await join_all(c, request(client="a"))
            a_id = a["member_id"]
            b_task = await start_join(c, request(client="b"))  # range: a-* gets t-0 and t-1, b-* t-2 and t-3
            with pytest.raises(RebalanceInProgressError):  # a learns of the rebalance from its heartbeat
                await c.heartbeat(G, a_id, 1)
            a2_task = await start_join(c, request(a_id, owned=owned(a), client="a"))
            await tick(c)
            a2, b2 = await asyncio.wait_for(a2_task, SLOW_MACHINE_S), await asyncio.wait_for(b_task, SLOW_MACHINE_S)
            # generation 2: b's share is still a's, so it is revoked from a and withheld from b
            assert a2["generation"] == b2["generation"] == 2
            assert b2["assignment"] == [] and owned(a2) == [("t", 0), ("t", 1)]
            assert a2["revoke"] == [["t", 2], ["t", 3]]
            assert set(cluster.store.owners[G].values()) == {a_id}
            assert await c.heartbeat(G, a_id, 2) == {"rebalance": True}
            # a gave t-2 and t-3 up: generation 3 hands them to b, owner nodes and all
            done = await join_all(c, request(a_id, owned=owned(a2), client="a"), request(b2["member_id"], client="b"))
            assert [x["generation"] for x in done] == [3, 3]
            assert owned(done[1]) == [("t", 2), ("t", 3)]
            assert cluster.store.owners[G][("t", 2)] == b2["member_id"]
            assert await c.heartbeat(G, a_id, 3) == {"rebalance": False}

    run(scenario)


def test_a_join_with_an_unknown_member_id_is_refused(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            with pytest.raises(UnknownMemberIdError):
                await c.join(G, request("nobody"))
            assert G not in cluster.store.members

    run(scenario)


def test_a_newer_join_of_the_same_member_replaces_the_pending_one(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            (a, b) = await join_all(c, request(), request())
            first = await start_join(c, request(a["member_id"], owned=owned(a)))
            second = await start_join(c, request(a["member_id"], owned=owned(a)))
            with pytest.raises(RebalanceInProgressError):
                await asyncio.wait_for(first, SLOW_MACHINE_S)
            await join_all(c, request(b["member_id"], owned=owned(b)))
            assert (await asyncio.wait_for(second, SLOW_MACHINE_S))["generation"] == 2

    run(scenario)


# ------------------------------------------------------------------------------------ heartbeats, expiry


def test_heartbeats_are_fenced_by_member_generation_and_coordinator(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            (a,) = await join_all(c, request())
            assert await c.heartbeat(G, a["member_id"], 1) == {"rebalance": False}
            with pytest.raises(IllegalGenerationError):
                await c.heartbeat(G, a["member_id"], 0)
            with pytest.raises(UnknownMemberIdError):
                await c.heartbeat(G, "nobody", 1)
            with pytest.raises(NotCoordinatorError):
                await c.heartbeat("other", a["member_id"], 1)

    run(scenario)


def test_a_silent_member_expires_and_the_others_rebalance_without_it(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            cluster.clock.advance(SESSION_MS // 2)
            await c.heartbeat(G, a["member_id"], 1)  # b says nothing
            cluster.clock.advance(SESSION_MS // 2 + 1)
            await tick(c)
            assert list(cluster.store.members[G]) == [a["member_id"]]
            assert set(cluster.store.owners[G].values()) == {a["member_id"]}  # b's owner nodes released
            with pytest.raises(RebalanceInProgressError):
                await c.heartbeat(G, a["member_id"], 1)
            (a2,) = await join_all(c, request(a["member_id"], owned=owned(a)))
            assert a2["generation"] == 2 and a2["assignment"] == ALL
            with pytest.raises(UnknownMemberIdError):
                await c.heartbeat(G, b["member_id"], 1)

    run(scenario)


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            b_waits = await start_join(c, request(b["member_id"], owned=owned(b)))
            for _ in range(4):  # a stays alive (its heartbeats are refused, but count) and never rejoins
                await tick(c)
                assert not b_waits.done()
                cluster.clock.advance(8_000)
                with pytest.raises(RebalanceInProgressError):
                    await c.heartbeat(G, a["member_id"], 1)
            await tick(c)  # 32 s: past the 30 s rebalance timeout
            b2 = await asyncio.wait_for(b_waits, SLOW_MACHINE_S)
            assert b2["generation"] == 2 and b2["assignment"] == ALL
            assert list(cluster.store.members[G]) == [b["member_id"]]
            assert set(cluster.store.owners[G].values()) == {b["member_id"]}

    run(scenario)


# ------------------------------------------------------------------------------------------------- leave


def test_a_member_leaving_releases_its_partitions_and_the_rest_rebalance(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            await c.leave(G, b["member_id"])
            assert list(cluster.store.members[G]) == [a["member_id"]]
            assert set(cluster.store.owners[G].values()) == {a["member_id"]}
            state = cluster.store.state(G)
            assert state is not None and state["state"] == PREPARING and list(state["members"]) == [a["member_id"]]
            with pytest.raises(RebalanceInProgressError):
                await c.heartbeat(G, a["member_id"], 1)
            (a2,) = await join_all(c, request(a["member_id"], owned=owned(a)))
            assert a2["generation"] == 2 and a2["assignment"] == ALL
            with pytest.raises(UnknownMemberIdError):
                await c.leave(G, b["member_id"])
            with pytest.raises(NonEmptyGroupError):
                await c.delete(G)
            # the last member leaving empties the group: then it may be deleted
            await c.leave(G, a["member_id"])
            await tick(c)
            assert c.groups[G].state == EMPTY and cluster.store.owners[G] == {}
            await c.delete(G)
            assert G not in cluster.store.groups and G not in c.groups

    run(scenario)


def test_a_member_leaving_during_a_rebalance_is_not_waited_for(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            a_waits = await start_join(c, request(a["member_id"], owned=owned(a)))
            await tick(c)
            assert not a_waits.done()
            await c.leave(G, b["member_id"])
            await tick(c)
            a2 = await asyncio.wait_for(a_waits, SLOW_MACHINE_S)
            assert a2["generation"] == 2 and a2["assignment"] == ALL

    run(scenario)


# ------------------------------------------------------------------------------------------------ commits


def test_commits_are_fenced_by_member_and_generation(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            (a,) = await join_all(c, request())
            a_id = a["member_id"]
            await c.commit(G, a_id, 1, {("t", 0): (10, "m")})
            assert cluster.store.get_offsets(G) == {("t", 0): (10, "m", cluster.clock.now)}
            (b,) = [x for x in await join_all(c, request(), request(a_id, owned=owned(a)))
                    if x["member_id"] != a_id]
            with pytest.raises(IllegalGenerationError):  # a zombie of generation 1
                await c.commit(G, a_id, 1, {("t", 0): (99, "")})
            with pytest.raises(UnknownMemberIdError):
                await c.commit(G, "nobody", 2, {("t", 0): (99, "")})
            with pytest.raises(UnknownMemberIdError):  # a standalone commit into a group with members
                await c.commit(G, "", -1, {("t", 0): (99, "")})
            assert cluster.store.get_offsets(G)[("t", 0)][0] == 10
            await c.commit(G, b["member_id"], 2, {("t", 2): (5, "")})
            assert cluster.store.get_offsets(G)[("t", 2)][0] == 5
            with pytest.raises(IllegalGenerationError):  # nor one of a generation the group has not reached
                await c.commit(G, b["member_id"], 3, {("t", 2): (6, "")})

    run(scenario)


def test_a_standalone_commit_and_a_reset_go_into_an_empty_group_only(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            await c.commit(G, "", -1, {("t", 1): (3, "")})
            await c.reset_offsets(G, {("t", 1): 0})
            assert cluster.store.get_offsets(G)[("t", 1)][:2] == (0, "reset")
            await join_all(c, request())
            with pytest.raises(NonEmptyGroupError):
                await c.reset_offsets(G, {("t", 1): 0})

    run(scenario)


# -------------------------------------------------------------------------------- locating and failover


def test_locate_claims_a_free_group_and_names_the_holder_of_another(cluster: Cluster) -> None:
    async def scenario() -> None:
        cluster.store.claim_coordinator("theirs", 2, 1)
        async with cluster.coordinator() as c:
            with pytest.raises(GroupIdNotFoundError):
                await c.locate("unknown", must_exist=True)
            assert await c.locate(G) == 1 and cluster.store.coordinators[G] == 1 and G in c.groups
            assert await c.locate("theirs") == 2 and "theirs" not in c.groups
            with pytest.raises(NotCoordinatorError):
                await c.join("theirs", request())
        async with cluster.coordinator(3, epoch=None) as unregistered:
            with pytest.raises(CoordinatorNotAvailableError):
                await unregistered.locate("free")

    run(scenario)


def test_losing_the_zookeeper_session_unloads_the_groups_and_fails_pending_joins(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator() as c:
            await c.locate(G)
            a, b = await join_all(c, request(), request())
            pending = await start_join(c, request(a["member_id"], owned=owned(a)))
            await tick(c)
            cluster.store.expire_session(1)
            cluster.sessions[1].change(LOST)
            with pytest.raises(NotCoordinatorError):
                await asyncio.wait_for(pending, SLOW_MACHINE_S)
            assert c.groups == {}
            with pytest.raises(NotCoordinatorError):
                await c.heartbeat(G, b["member_id"], 1)

    run(scenario)


def test_a_new_coordinator_rebuilds_the_group_and_lets_its_members_rejoin(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with cluster.coordinator(1) as old:
            await old.locate(G)
            a, b = await join_all(old, request(), request())
            await old.commit(G, a["member_id"], 1, {("t", 0): (42, "")})
        cluster.store.expire_session(1)  # broker 1 died: its coordinator, member and owner nodes went with it
        assert G not in cluster.store.owners
        async with cluster.coordinator(2) as new:
            assert await new.locate(G) == 2
            # the old members keep what they held (owner nodes claimed again for them) until they rejoin
            assert cluster.store.owners[G] == {**{tp: a["member_id"] for tp in owned(a)},
                                               **{tp: b["member_id"] for tp in owned(b)}}
            assert sorted(cluster.store.members[G]) == sorted([a["member_id"], b["member_id"]])
            with pytest.raises(RebalanceInProgressError):
                await new.heartbeat(G, a["member_id"], 1)
            a2, b2 = await join_all(new, request(a["member_id"], owned=owned(a)),
                                    request(b["member_id"], owned=owned(b)))
            assert a2["generation"] == b2["generation"] == 2 and a2["coordinator"] == 2
            assert (owned(a2), owned(b2)) == (owned(a), owned(b))
            assert cluster.store.get_offsets(G)[("t", 0)][0] == 42

    run(scenario)


# ------------------------------------------------------------------------------------------------ metadata


def test_new_partitions_rebalance_the_group_and_a_deleted_topic_loses_its_offsets(cluster: Cluster) -> None:
    async def scenario() -> None:
        wake = asyncio.Event()

        async def changed(timeout_s: float) -> None:
            await asyncio.wait_for(wake.wait(), timeout_s)
            wake.clear()

        async with cluster.coordinator(changed=changed) as c:
            await c.locate(G)
            (a,) = await join_all(c, request())
            await c.commit(G, a["member_id"], 1, {("t", 0): (7, "")})
            cluster.metadata.set_partitions("t", 6)
            wake.set()

            async def preparing() -> bool:
                return c.groups[G].state == PREPARING

            await wait_until_async(preparing, SLOW_MACHINE_S, "a rebalance for the new partitions", interval=0.01)
            with pytest.raises(RebalanceInProgressError):
                await c.heartbeat(G, a["member_id"], 1)
            (a2,) = await join_all(c, request(a["member_id"], owned=owned(a)))
            assert a2["generation"] == 2 and len(a2["assignment"]) == 6
            cluster.metadata.delete("t")
            wake.set()

            async def offsets_gone() -> bool:
                return cluster.store.get_offsets(G) == {}

            await wait_until_async(offsets_gone, SLOW_MACHINE_S, "the deleted topic's offsets to go", interval=0.01)

    run(scenario)
