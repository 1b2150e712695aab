"""Reads of REST v2 consumer instances (broker/rest_consumers.py ``RestInstanceManager.read``) against real group
coordinators over a fake ZooKeeper store (group_brokers.py) and an in-memory log standing in for the fetch and
offsets services: how a read shares its timeout with the group join, lets join answers through during its
long-poll, and finds positions in assign mode (committed offsets, else ``auto.offset.reset``; no group needed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from broker import rest_consumers
from broker.fetch.offsets import ListOffsetsRequest, PartitionOffsets
from broker.fetch.service import FetchRequest
from broker.rest_consumers import ConsumerInstance, InstanceConfig, RestInstanceManager
from odradek.protocol.errors import IllegalStateError, OffsetOutOfRangeError
from odradek.protocol.model import BrokerInfo
from odradek.protocol.model import TopicPartition as TP
from odradek.protocol.records import NewRecord, encode_batch
from tests.unit.broker.group_brokers import PARTITIONS, Brokers, two_brokers

ALL = {TP("t", p) for p in range(PARTITIONS)}
LONG_POLL_MS = 20_000
PROMPT_S = LONG_POLL_MS / 1000 / 2  # answered well before the long-poll's end: what these tests are about


class MemoryLog:
    """The fetch and offsets services over in-memory partitions: a fetch at the end long-polls for an append."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, int], list[bytes]] = {}
        self.appended = asyncio.Event()

    def append(self, tp: TP, *values: bytes) -> None:
        self.values.setdefault((tp.topic, tp.partition), []).extend(values)
        self.appended.set()
        self.appended = asyncio.Event()

    async def fetch_anywhere(self, req: FetchRequest) -> Any:
        deadline = time.monotonic() + req.max_wait_ms / 1000
        while True:
            log = self.values.get((req.topic, req.partition), [])
            offset = req.offset or 0
            if offset < len(log):
                batch = encode_batch([NewRecord(None, v, 1_000) for v in log[offset:]], base_offset=offset)
                return SimpleNamespace(records=batch)
            appended = self.appended
            try:
                await asyncio.wait_for(appended.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return SimpleNamespace(records=b"")

    async def list_offsets(self, req: ListOffsetsRequest) -> PartitionOffsets:
        return PartitionOffsets(0, len(self.values.get((req.topic, req.partition), [])))


class NoLocator:
    async def created(self, group: str, name: str) -> None:
        pass

    async def deleted(self, group: str, name: str) -> None:
        pass


def manager(b: Brokers, log: MemoryLog) -> RestInstanceManager:
    broker = SimpleNamespace(broker_id=1, info=lambda: BrokerInfo(1, "127.0.0.1", 1), zk=None, fetches=log,
                             offsets=log)
    return RestInstanceManager(broker, router=b.router1, locator=NoLocator())  # type: ignore[arg-type]


def run(test: Callable[[Brokers, MemoryLog], Awaitable[None]]) -> None:
    async def main() -> None:
        async with two_brokers() as brokers:
            await asyncio.wait_for(test(brokers, MemoryLog()), 60)

    asyncio.run(main())


async def subscribed(m: RestInstanceManager, name: str, **config: Any) -> ConsumerInstance:
    inst = m.create("g", name, InstanceConfig(**{"format": "json", "auto_offset_reset": "earliest", **config}))
    await m.subscribe(inst, ["t"], None)
    return inst


def test_the_read_that_starts_the_join_returns_the_records_once_assigned() -> None:
    """The join and the fetch share the read's timeout (Confluent: kafka-rest v2/KafkaConsumerReadTask.java, its
    polls until the request's timeout, the join happening inside KafkaConsumer.poll)."""

    async def test(b: Brokers, log: MemoryLog) -> None:
        m = manager(b, log)
        for tp in ALL:
            log.append(tp, b'"v"')
        x = await subscribed(m, "x")
        started = time.monotonic()
        records = await m.read(x, LONG_POLL_MS, 1 << 20)
        assert records and time.monotonic() - started < PROMPT_S
        await m.close()

    run(test)


def test_a_join_answer_during_a_long_poll_is_applied_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read long-polling under the instance's lock lets a join answer through (here a cooperative revoke that
    another member waits for), then goes on with the new assignment within its own timeout."""
    monkeypatch.setattr(rest_consumers, "HEARTBEAT_INTERVAL_MS", 100)  # x hears of y's join sooner

    async def test(b: Brokers, log: MemoryLog) -> None:
        m = manager(b, log)
        x = await subscribed(m, "x")
        while x.assigned != ALL:  # x owns every (empty) partition
            await asyncio.sleep(0.02)
        started = time.monotonic()
        reading = asyncio.create_task(m.read(x, LONG_POLL_MS, 1 << 20))
        await asyncio.sleep(0.2)
        assert x.lock.locked() and not reading.done()  # the long-poll holds the lock
        y = await subscribed(m, "y")
        while not y.assigned:  # needs x's revoke, applied under x's lock
            assert time.monotonic() - started < PROMPT_S, "x's read kept its lock from the rebalance"
            await asyncio.sleep(0.02)
        assert not reading.done() and len(x.assigned) == 2 and not x.assigned & y.assigned
        mine = sorted(x.assigned)[0]
        log.append(mine, b'"after"')
        records = await asyncio.wait_for(reading, PROMPT_S)
        assert [(r["partition"], r["offset"]) for r in records] == [(mine.partition, 0)]
        assert time.monotonic() - started < PROMPT_S
        await m.close()

    run(test)


def test_an_assign_only_instance_needs_no_group() -> None:
    """Committed offsets, else auto.offset.reset, a group that does not exist being one with nothing committed;
    none: Kafka's NoOffsetForPartitionException (as OFFSET_OUT_OF_RANGE); commits go into the group id, on close
    too when auto-committing (Confluent: kafka-rest v2/KafkaConsumerState.java, assign and commitOffsets on a
    consumer with the instance's group.id; KafkaConsumer.close auto-commits)."""

    async def test(b: Brokers, log: MemoryLog) -> None:
        m = manager(b, log)
        tp0, tp1 = TP("t", 0), TP("t", 1)
        log.append(tp0, b"1", b"2", b"3")
        log.append(tp1, b"4")
        strict = m.create("fresh", "strict", InstanceConfig(auto_offset_reset="none"))
        with pytest.raises(IllegalStateError):
            await m.read(strict, 0, 1 << 20)
        m.assign(strict, [tp0, tp1])
        with pytest.raises(OffsetOutOfRangeError, match=r"no reset policy for partitions: \[t-0, t-1\]"):
            await m.read(strict, 1000, 1 << 20)
        assert "fresh" not in b.store.offsets

        early = m.create("fresh", "early", InstanceConfig(auto_offset_reset="earliest", auto_commit_enable=True))
        m.assign(early, [tp0])
        assert [r["offset"] for r in await m.read(early, LONG_POLL_MS, 1 << 20)] == [0, 1, 2]
        late = m.create("fresh", "late", InstanceConfig())  # latest
        m.assign(late, [tp1])
        assert await m.read(late, 0, 1 << 20) == [] and late.positions == {tp1: 1}

        await m.delete("fresh", "early")  # auto-commit on closing, into the group id
        assert b.store.offsets["fresh"][("t", 0)][0] == 3
        log.append(tp0, b"5")
        log.append(tp1, b"6")
        with pytest.raises(OffsetOutOfRangeError, match=r"partitions: \[t-1\]"):  # t-0 has a commit now
            await m.read(strict, 1000, 1 << 20)
        await m.commit(strict, {tp1: (1, "")})  # an assign-mode commit: a standalone committer's
        records = await m.read(strict, LONG_POLL_MS, 1 << 20)
        records += await m.read(strict, 0, 1 << 20)
        assert sorted((r["partition"], r["offset"]) for r in records) == [(0, 3), (1, 1)]
        await m.close()

    run(test)
