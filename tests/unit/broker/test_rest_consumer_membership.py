"""The asyncio driver of the member state machine: REST v2 consumer instances (broker/rest_consumers.py) as group
members, against real group coordinators over a fake ZooKeeper store (group_brokers.py): the group's coordinator
in-process, or another broker's one inter-broker hop away. Records are not read here (no replicas): these tests
are about membership, commits, leaving and the instance registry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from broker import rest_consumers
from broker.rest_consumers import ConsumerInstance, InstanceConfig, RestInstanceManager
from odradek.protocol.model import BrokerInfo
from odradek.protocol.model import TopicPartition as TP
from tests.unit.broker.group_brokers import PARTITIONS, Brokers, two_brokers

ALL = {TP("t", p) for p in range(PARTITIONS)}


class FakeLocator:
    def __init__(self) -> None:
        self.created: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []

    async def created_(self, group: str, name: str) -> None:
        self.created.append((group, name))

    async def deleted_(self, group: str, name: str) -> None:
        self.deleted.append((group, name))


def manager(b: Brokers, locator: FakeLocator, timeout_ms: int = 60_000) -> RestInstanceManager:
    broker = SimpleNamespace(broker_id=1, info=lambda: BrokerInfo(1, "127.0.0.1", 1), zk=None)
    fake = SimpleNamespace(created=locator.created_, deleted=locator.deleted_)
    return RestInstanceManager(broker, instance_timeout_ms=timeout_ms, router=b.router1,  # type: ignore[arg-type]
                               locator=fake)  # type: ignore[arg-type]


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def run(test: Callable[[Brokers], Awaitable[None]]) -> None:
    async def main() -> None:
        async with two_brokers() as brokers:
            await asyncio.wait_for(test(brokers), 60)

    asyncio.run(main())


async def subscribed(m: RestInstanceManager, name: str) -> ConsumerInstance:
    inst = m.create("g", name, InstanceConfig())
    await m.subscribe(inst, ["t"], None)
    return inst


def test_two_instances_share_the_partitions_commit_as_members_and_leave_when_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_consumers, "HEARTBEAT_INTERVAL_MS", 100)  # x hears of y's join sooner

    async def test(b: Brokers) -> None:
        locator = FakeLocator()
        m = manager(b, locator)
        x = await subscribed(m, "x")
        await eventually(lambda: x.assigned == ALL, "x to own every partition")
        assert b.store.coordinators["g"] == 1  # this broker coordinates: in-process calls
        y = await subscribed(m, "y")
        await eventually(lambda: len(x.assigned) == len(y.assigned) == 2, "a cooperative handover to y")
        assert x.assigned | y.assigned == ALL and not x.assigned & y.assigned
        assert x.member is not None and x.member.member_id is not None
        assert x.member.member_id.startswith("rest-proxy-1-x-")

        mine = set(x.assigned)
        x.positions = {tp: 7 for tp in mine}
        await m.commit(x, None)  # as a member of its generation
        assert {tp: o[0] for tp, o in b.store.offsets["g"].items()} == {tuple(tp): 7 for tp in mine}

        await m.delete("g", "y")  # leaves at once: x gets everything back without waiting for a session
        assert locator.deleted == [("g", "y")]
        assert list(b.coordinator1.groups["g"].members) == [x.member.member_id]
        await eventually(lambda: x.assigned == ALL, "x to own every partition again")
        committed = await m.committed(x, sorted(ALL))
        assert {o["partition"]: o["offset"] for o in committed} == {
            p: 7 if TP("t", p) in mine else -1 for p in range(PARTITIONS)}
        await m.close()
        assert b.coordinator1.groups["g"].members == {} and locator.deleted == [("g", "y")]  # close: ephemeral

    run(test)


def test_a_member_the_coordinator_forgot_loses_its_partitions_and_joins_again(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    monkeypatch.setattr(rest_consumers, "HEARTBEAT_INTERVAL_MS", 100)

    async def test(b: Brokers) -> None:
        m = manager(b, FakeLocator())
        x = await subscribed(m, "x")
        await eventually(lambda: x.assigned == ALL, "the first assignment")
        assert x.member is not None
        old = x.member.member_id
        assert old is not None
        await b.coordinator1.leave("g", old)  # the coordinator forgets it (as after a missed session)
        await eventually(lambda: x.member is not None and x.member.member_id not in (None, old), "a new member id")
        await eventually(lambda: x.assigned == ALL, "the new member's assignment")
        assert list(b.coordinator1.groups["g"].members) == [x.member.member_id]
        await m.close()

    run(test)


def test_an_instance_of_another_brokers_group_is_a_member_through_one_hop() -> None:
    async def test(b: Brokers) -> None:
        assert await b.coordinator2.locate("g") == 2
        m = manager(b, FakeLocator())
        x = await subscribed(m, "x")
        await eventually(lambda: x.assigned == ALL, "the assignment, through broker 2")
        assert "g" not in b.coordinator1.groups
        assert x.member is not None and list(b.coordinator2.groups["g"].members) == [x.member.member_id]
        x.positions = {TP("t", 0): 3}
        await m.commit(x, None)
        assert b.store.offsets["g"][("t", 0)][0] == 3
        await m.unsubscribe(x)
        assert b.coordinator2.groups["g"].members == {} and x.assigned == set() and x.member is None

    run(test)


def test_an_expired_instance_commits_leaves_and_unregisters_its_name() -> None:
    async def test(b: Brokers) -> None:
        locator = FakeLocator()
        m = manager(b, locator, timeout_ms=400)
        x = await subscribed(m, "x")

        def assigned() -> bool:
            x.touch()  # a client polling: not idle yet
            return x.assigned == ALL

        await eventually(assigned, "the assignment")
        x.positions = {TP("t", 2): 11}
        await eventually(lambda: locator.deleted == [("g", "x")], "the reaper to delete the idle instance")
        assert not m.instances
        assert b.coordinator1.groups["g"].members == {}
        assert b.store.offsets["g"][("t", 2)][0] == 11  # auto-commit on the way out
        await m.close()

    run(test)


def test_closing_as_the_driver_is_woken_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's wake-up (a join, a heartbeat or a request setting ``wake``) and the instance's close can fall in
    the same event-loop step. The close cancels the driver and waits for it: the cancellation must not be lost to
    the wake-up (3.11's ``wait_for`` returns normally then), or the driver runs on and the close never ends."""
    monkeypatch.setattr(rest_consumers, "HEARTBEAT_INTERVAL_MS", 100)

    async def test(b: Brokers) -> None:
        for i in range(5):
            m = manager(b, FakeLocator())
            x = await subscribed(m, f"x{i}")
            await eventually(lambda x=x: x.assigned == ALL, "the assignment")
            await asyncio.sleep(0.01)  # the driver is back in its wait
            x.wake.set()  # woken, and in the same step cancelled by the close
            await asyncio.wait_for(m.close(), 10)
            assert x.task is None and x.member is None

    run(test)
