"""Routing a group operation to its coordinator (broker/group_router.py): in-process on the coordinating broker,
one inter-broker hop (marked forwarded) otherwise, never a second hop, typed errors kept across the hop.
Real coordinators over a fake ZooKeeper store; broker 2's real group API handlers over HTTP (group_brokers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.group_router import GroupRouter
from consumer_coordinator.coordinator import JoinRequest
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from tests.unit.broker.group_brokers import Brokers, two_brokers


def join_request(member_id: str | None = None, owned: list[tuple[str, int]] | None = None) -> JoinRequest:
    return JoinRequest(member_id, "client", "host", frozenset({"t"}), None, "range", 10_000, 5_000, owned or [])


def run(test: Callable[[Brokers], Awaitable[None]]) -> None:
    async def main() -> None:
        async with two_brokers() as brokers:
            await asyncio.wait_for(test(brokers), 30)

    asyncio.run(main())


class NoHops:
    """An inter-broker client that must not be used."""

    def url_of(self, node_id: int) -> str | None:
        raise AssertionError("a local operation went to another broker")

    async def send(self, node_id: int, request: Any) -> Any:
        raise AssertionError("a local operation went to another broker")


def test_the_coordinating_broker_runs_operations_in_process() -> None:
    async def test(b: Brokers) -> None:
        router = GroupRouter(b.coordinator1, NoHops())  # type: ignore[arg-type]
        joined = await router.join("mine", join_request())
        assert joined.coordinator == 1 and b.store.coordinators["mine"] == 1
        member, generation = joined.value["member_id"], joined.value["generation"]
        assert sorted(map(tuple, joined.value["assignment"])) == [("t", p) for p in range(4)]
        assert (await router.heartbeat("mine", member, generation)).value == {"rebalance": False}
        await router.commit("mine", member, generation, {("t", 0): (5, "m")})
        assert {tp: o[:2] for tp, o in (await router.committed_offsets("mine")).items()} == {("t", 0): (5, "m")}
        with pytest.raises(IllegalGenerationError):
            await router.commit("mine", member, generation - 1, {("t", 0): (6, "")})
        assert (await router.describe("mine")).value["members"][0]["member_id"] == member
        assert (await router.leave("mine", member)).coordinator == 1
        with pytest.raises(GroupIdNotFoundError):
            await router.committed_offsets("nobody")

    run(test)


def test_another_brokers_group_goes_one_hop_and_keeps_typed_errors() -> None:
    async def test(b: Brokers) -> None:
        assert await b.coordinator2.locate("theirs") == 2  # broker 2 claims it
        joined = await b.router1.join("theirs", join_request())
        assert joined.coordinator == 2 and "theirs" not in b.coordinator1.groups
        member, generation = joined.value["member_id"], joined.value["generation"]
        assert b.coordinator2.groups["theirs"].members[member].client_id == "client"
        assert (await b.router1.heartbeat("theirs", member, generation)).value == {"rebalance": False}
        await b.router1.commit("theirs", member, generation, {("t", 1): (9, "x")})
        assert b.store.offsets["theirs"][("t", 1)][:2] == (9, "x")
        with pytest.raises(UnknownMemberIdError):  # the remote's typed error, as a typed error here
            await b.router1.heartbeat("theirs", "nobody", generation)
        with pytest.raises(IllegalGenerationError):
            await b.router1.commit("theirs", member, generation + 5, {("t", 1): (10, "")})
        rejoined = await b.router1.join("theirs", join_request(member, owned=[("t", 0), ("t", 1)]))
        assert rejoined.value["member_id"] == member and rejoined.value["generation"] == generation + 1
        described = await b.router1.describe("theirs")
        assert described.coordinator == 2 and described.value["coordinator"] == 2
        await b.router1.leave("theirs", member)
        assert b.coordinator2.groups["theirs"].members == {}
        await b.router1.delete_offsets("theirs", "t", [1])
        assert ("t", 1) not in b.store.offsets["theirs"]

    run(test)


def test_a_forwarded_operation_is_never_forwarded_again() -> None:
    async def test(b: Brokers) -> None:
        assert await b.coordinator2.locate("theirs") == 2
        with pytest.raises(NotCoordinatorError):
            await b.router1.heartbeat("theirs", "m", 1, forwarded=True)

    run(test)


def test_a_coordinator_that_is_not_registered_is_not_available() -> None:
    async def test(b: Brokers) -> None:
        assert await b.coordinator1.locate("ours") == 1
        with pytest.raises(CoordinatorNotAvailableError):  # broker 2 knows no address of broker 1
            await b.router2.heartbeat("ours", "m", 1)

    run(test)
