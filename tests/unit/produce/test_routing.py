"""LeaderRouter: one answer to "who leads", and waits for a leader bounded by the request's deadline.

A fake replica manager stands in for the real one (same typed errors from ``partition_info`` and
``leader_partition``); the integration test tests/integration/test_topic_create_produce.py runs the real thing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from broker.produce.routing import LeaderRouter, Remote
from odradek.protocol.errors import LeaderNotAvailableError, NotLeaderOrFollowerError, UnknownTopicError
from tests.harness.wait import SLOW_MACHINE_S, wait_until_async

ME, OTHER = 1, 2
# A request deadline far beyond the test's length: a wait that is ended by the test, never by the deadline.
FAR_S = 10 * SLOW_MACHINE_S
# "Answers at once" (or "at its deadline") against "waits until a far deadline, or for ever": an answer within
# PROMPT_S proves the first, as PROMPT_S is a tenth of FAR_S yet far more than the few loop iterations an answer takes
# even on a loaded machine.
PROMPT_S = 30.0


@dataclass
class FakePartition:
    leader_epoch: int
    leads: bool = True


@dataclass
class FakeCache:
    counts: dict[str, int] = field(default_factory=dict)

    def partition_count(self, topic: str) -> int:
        return self.counts.get(topic, 0)


@dataclass
class FakeInfo:
    leader: int
    leader_epoch: int


class FakeReplicas:
    broker_id = ME

    def __init__(self) -> None:
        self.cache = FakeCache()
        self.infos: dict[tuple[str, int], FakeInfo] = {}
        self.local: dict[tuple[str, int], FakePartition] = {}
        self.urls = {ME: "http://me", OTHER: "http://other"}

    def partition_info(self, topic: str, partition: int) -> FakeInfo:
        if self.cache.partition_count(topic) == 0:
            raise UnknownTopicError(f"topic '{topic}' does not exist")
        info = self.infos.get((topic, partition))
        if info is None or info.leader < 0:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now")
        return info

    def leader_partition(self, topic: str, partition: int) -> FakePartition:
        info = self.partition_info(topic, partition)
        part = self.local.get((topic, partition))
        if part is None or not part.leads:
            # what the real one says while its replica is not leader yet: the self-contradicting message
            raise NotLeaderOrFollowerError(
                f"broker {ME} is not the leader of {topic}-{partition}; broker {info.leader} is"
            )
        return part

    def leader_url(self, broker_id: int) -> str | None:
        return self.urls.get(broker_id)


class Signal:
    """The metadata watcher's ``changed(timeout)``: set() wakes every waiter."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waits = 0  # calls of changed(): a waiter has looked, found nothing, and now waits for a change

    async def changed(self, timeout: float) -> None:
        self.waits += 1
        event = self.event
        await asyncio.wait_for(event.wait(), timeout)

    def set(self) -> None:
        self.event.set()
        self.event = asyncio.Event()


def _deadline(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def waits_for_a_change(signal: Signal, times: int) -> None:
    """Until a waiter has called ``signal.changed`` ``times`` times in all: it found no answer and waits."""

    async def seen() -> bool:
        return signal.waits >= times

    await wait_until_async(seen, SLOW_MACHINE_S, f"call {times} of changed()", interval=0.001)


def test_becoming_leader_is_leader_not_available_and_never_names_the_same_broker_twice() -> None:
    replicas = FakeReplicas()
    replicas.cache.counts["t"] = 1
    replicas.infos[("t", 0)] = FakeInfo(ME, 3)
    router = LeaderRouter(replicas, Signal().changed)  # type: ignore[arg-type]
    with pytest.raises(LeaderNotAvailableError) as err:
        router.route("t", 0)
    assert "becoming the leader" in err.value.message
    assert err.value.message.count(f"broker {ME}") == 1

    replicas.local[("t", 0)] = FakePartition(leader_epoch=2)  # leads, but an older epoch than the cache's
    with pytest.raises(LeaderNotAvailableError):
        router.route("t", 0)
    replicas.local[("t", 0)] = FakePartition(leader_epoch=3)
    assert router.route("t", 0) is replicas.local[("t", 0)]


def test_another_leader_is_forwarded_to_or_named() -> None:
    replicas = FakeReplicas()
    replicas.cache.counts["t"] = 1
    replicas.infos[("t", 0)] = FakeInfo(OTHER, 5)
    replicas.local[("t", 0)] = FakePartition(leader_epoch=4)  # a stale local leadership: the cache decides
    router = LeaderRouter(replicas, Signal().changed)  # type: ignore[arg-type]
    assert router.route("t", 0) == Remote(OTHER, "http://other")
    with pytest.raises(NotLeaderOrFollowerError) as err:
        router.leader("t", 0)
    assert err.value.message == f"broker {ME} is not the leader of t-0; broker {OTHER} is"
    assert err.value.details["leader"] == OTHER and err.value.details["leader_url"] == "http://other"


def test_await_route_waits_for_the_election_and_the_local_leadership() -> None:
    async def scenario() -> None:
        replicas = FakeReplicas()
        replicas.cache.counts["t"] = 1
        signal = Signal()
        router = LeaderRouter(replicas, signal.changed)  # type: ignore[arg-type]
        waiter = asyncio.create_task(router.await_route("t", 0, _deadline(FAR_S)))
        await waits_for_a_change(signal, 1)
        replicas.infos[("t", 0)] = FakeInfo(ME, 1)  # elected: this broker, not active yet
        signal.set()
        await waits_for_a_change(signal, 2)  # it looked again and still waits
        assert not waiter.done()
        replicas.local[("t", 0)] = FakePartition(leader_epoch=1)  # the replica manager applied it
        signal.set()
        assert await asyncio.wait_for(waiter, SLOW_MACHINE_S) is replicas.local[("t", 0)]

    asyncio.run(scenario())


def test_no_leader_by_the_deadline_answers_the_retriable_error() -> None:
    async def scenario() -> None:
        replicas = FakeReplicas()
        replicas.cache.counts["t"] = 1
        router = LeaderRouter(replicas, Signal().changed)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(LeaderNotAvailableError):
            await router.await_route("t", 0, _deadline(0.3))
        assert 0.25 <= loop.time() - started < PROMPT_S  # it waited for its deadline, and no longer

    asyncio.run(scenario())


def test_an_unknown_topic_is_waited_for_only_when_zookeeper_knows_it() -> None:
    async def scenario() -> None:
        replicas = FakeReplicas()
        signal = Signal()
        in_zookeeper: set[str] = {"new"}

        async def lookup(topic: str) -> object | None:
            return topic if topic in in_zookeeper else None

        router = LeaderRouter(replicas, signal.changed, lookup)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UnknownTopicError):
            await router.await_topic("missing", _deadline(FAR_S))
        assert loop.time() - started < PROMPT_S  # at once, not at the deadline: ZooKeeper does not know it either

        waiter = asyncio.create_task(router.await_topic("new", _deadline(FAR_S)))
        await waits_for_a_change(signal, 1)
        assert not waiter.done()
        replicas.cache.counts["new"] = 1
        signal.set()
        await asyncio.wait_for(waiter, SLOW_MACHINE_S)

    asyncio.run(scenario())
