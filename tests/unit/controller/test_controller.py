"""The controller's event handlers against an in-memory fake of our ZooKeeper facade (tests/unit/fakes/zk.py):
election, broker death, controlled shutdown, preferred election, version conflicts, deposition, outages."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from broker.controller.controller import (
    BrokerChange,
    ControlledShutdown,
    Controller,
    Elected,
    RebalanceSettings,
    Resync,
)
from broker.metadata.events import Event
from odradek.protocol.errors import ControllerMovedError, NotControllerError, StaleBrokerEpochError
from odradek.protocol.model import LeaderAndIsr, TopicPartition
from tests.unit.fakes.zk import FakeZk

THREE = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


class Harness:
    """A controller for broker 1 over a fake facade; ``drain`` handles every event its watches signalled."""

    def __init__(self, zk: FakeZk) -> None:
        self.zk = zk
        self.released = 0
        self.controller = Controller(1, zk, self._release, RebalanceSettings(enabled=False))  # type: ignore[arg-type]

    def _release(self) -> None:
        self.released += 1

    async def drain(self) -> None:
        """Handle queued events until none are left (watch callbacks arrive through call_soon_threadsafe)."""
        for _ in range(50):
            for _ in range(5):
                await asyncio.sleep(0)
            events = self.controller.queue.take_pending(lambda e: True)
            if not events:
                return
            for event in events:
                await self.controller._handle(event)
        raise AssertionError("the controller kept producing events")

    async def elect(self) -> None:
        await self.controller._handle(Elected())
        await self.drain()


def run(test: Callable[[Harness], Awaitable[None]], zk: FakeZk | None = None) -> None:
    async def main() -> None:
        await test(Harness(zk or cluster_of_three()))

    asyncio.run(main())


def cluster_of_three(topics: dict[str, dict[int, list[int]]] | None = None,
                     configs: dict[str, dict[str, str]] | None = None) -> FakeZk:
    zk = FakeZk()
    for b in (1, 2, 3):
        zk.add_broker(b)
    for topic, partitions in (topics or {"t": THREE}).items():
        zk.add_topic(topic, partitions, (configs or {}).get(topic))
    return zk


def test_election_claims_the_epoch_and_brings_new_partitions_online() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        assert h.controller.active and h.controller.epoch == 1 and h.zk.controller == 1
        for p, replicas in THREE.items():
            assert h.zk.state("t", p) == LeaderAndIsr(replicas[0], 0, replicas, 1)
        # A topic created later is picked up through the topics watch.
        h.zk.add_topic("u", {0: [2, 1]})
        await h.drain()
        assert h.zk.state("u", 0) == LeaderAndIsr(2, 0, [2, 1], 1)

    run(test)


def test_broker_death_reelects_its_partitions_with_an_epoch_bump_in_batches() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        h.zk.calls.state_reads.clear()
        h.zk.calls.state_writes.clear()
        h.zk.remove_broker(2)
        await h.drain()
        # partition 1 was led by 2: the next live ISR member in assignment order (3) leads, epoch bumped
        assert h.zk.state("t", 1) == LeaderAndIsr(3, 1, [3, 1], 1)
        # the others keep their leader and lose 2 from the ISR, also with an epoch bump
        assert h.zk.state("t", 0) == LeaderAndIsr(1, 1, [1, 3], 1)
        assert h.zk.state("t", 2) == LeaderAndIsr(3, 1, [3, 1], 1)
        # one batched read and one batched write for all three partitions, nothing one by one
        assert h.zk.calls.state_reads == [3] and h.zk.calls.state_writes == [3]
        assert h.zk.calls.single_state_calls == 0

    run(test)


def test_partition_without_live_isr_member_goes_offline_once_unless_unclean_is_allowed() -> None:
    zk = cluster_of_three({"clean": {0: [1, 2]}, "dirty": {0: [1, 2]}},
                          {"dirty": {"unclean.leader.election.enable": "true"}})

    async def test(h: Harness) -> None:
        await h.elect()
        for topic in ("clean", "dirty"):
            h.zk.set_state(topic, 0, LeaderAndIsr(2, 3, [2], 1))  # 1 fell out of the ISR
        await h.drain()
        h.zk.remove_broker(2)
        await h.drain()
        assert h.zk.state("clean", 0) == LeaderAndIsr(-1, 4, [2], 1)  # offline, ISR never empty
        assert h.zk.state("dirty", 0) == LeaderAndIsr(1, 4, [1], 1)  # unclean: the out-of-sync replica leads
        h.zk.add_broker(3)  # a broker change that does not help: no second epoch bump for the offline one
        await h.drain()
        assert h.zk.state("clean", 0).leader_epoch == 4

    run(test, zk)


def test_a_write_that_loses_to_a_leaders_isr_change_is_decided_again_from_a_fresh_read() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        # Between the controller's read and its write, leader 1 drops the lagging 2 from partition 0's ISR.
        h.zk.before_state_write = lambda: h.zk.set_state("t", 0, LeaderAndIsr(1, 1, [1, 3], 1))
        h.zk.remove_broker(3)
        await h.drain()
        # decided again from the leader's write (epoch 1, ISR [1, 3]), not from the stale read: neither change is lost
        assert h.zk.state("t", 0) == LeaderAndIsr(1, 2, [1], 1)
        assert h.zk.state("t", 2) == LeaderAndIsr(1, 1, [1, 2], 1)
        assert h.zk.calls.state_writes[-2:] == [3, 1]  # the retry re-wrote only the partition that lost

    run(test)


def test_controlled_shutdown_moves_leaderships_and_leaves_isrs() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[list[tuple[str, int]]] = loop.create_future()
        await h.controller._handle(ControlledShutdown(2, h.zk.brokers[2].epoch, reply))
        assert reply.result() == []
        assert h.zk.state("t", 1) == LeaderAndIsr(3, 1, [3, 1], 1)
        assert h.zk.state("t", 0) == LeaderAndIsr(1, 1, [1, 3], 1)
        assert h.zk.state("t", 2) == LeaderAndIsr(3, 1, [3, 1], 1)

        stale: asyncio.Future[list[tuple[str, int]]] = loop.create_future()
        await h.controller._handle(ControlledShutdown(3, 12345, stale))
        with pytest.raises(StaleBrokerEpochError):
            stale.result()

    run(test)


def test_controlled_shutdown_of_the_only_isr_member_reports_what_it_still_leads() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        h.zk.set_state("t", 0, LeaderAndIsr(1, 1, [1], 1))
        await h.drain()
        reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
        await h.controller._handle(ControlledShutdown(1, h.zk.brokers[1].epoch, reply))
        assert reply.result() == [("t", 0)]
        assert h.zk.state("t", 0) == LeaderAndIsr(1, 1, [1], 1)

    run(test)


def test_controlled_shutdown_does_not_count_what_no_retry_could_move() -> None:
    """Kafka counts only replicated partitions (a single replica has nowhere to go); a partition whose other
    replicas have all left or are leaving cannot move either until a broker starts, so neither keeps the broker
    retrying. A lagging but live replica can still catch up: that one is counted (the test above)."""
    zk = cluster_of_three({"t": {0: [1, 2, 3]}, "single": {0: [1]}})

    async def test(h: Harness) -> None:
        await h.elect()
        loop = asyncio.get_running_loop()
        shutdowns = []
        for broker in (3, 2, 1):  # the controller (1) last, as `cluster down` stops them
            reply: asyncio.Future[list[tuple[str, int]]] = loop.create_future()
            await h.controller._handle(ControlledShutdown(broker, h.zk.brokers[broker].epoch, reply))
            shutdowns.append(reply.result())
        assert shutdowns == [[], [], []]
        assert h.zk.state("t", 0).leader == 1 and h.zk.state("single", 0).leader == 1

    run(test, zk)


def test_preferred_election_gives_leadership_back_and_clears_the_request() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        h.zk.set_state("t", 0, LeaderAndIsr(2, 1, [2, 3, 1], 1))
        h.zk.set_state("t", 1, LeaderAndIsr(3, 1, [3], 1))  # preferred 2 is out of the ISR: stays
        await h.drain()
        assert h.zk.request_preferred_election([])  # all partitions
        await h.drain()
        assert h.zk.state("t", 0) == LeaderAndIsr(1, 2, [2, 3, 1], 1)
        assert h.zk.state("t", 1) == LeaderAndIsr(3, 1, [3], 1)
        assert h.zk.preferred is None

    run(test)


def test_a_deposed_controller_gets_controller_moved_resigns_and_writes_nothing() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        before = dict(h.zk.states)
        h.zk.another_controller(3)
        h.zk.remove_broker(2)
        await h.drain()
        assert not h.controller.active and h.controller.epoch is None
        assert h.released == 1
        assert h.zk.states == before  # every write was fenced by the epoch's zkVersion
        assert h.zk.controller == 3  # the resignation did not delete the new controller's claim

        # A deposed controller's pending controlled shutdown is answered with the reason.
        h2 = Harness(cluster_of_three())
        await h2.elect()
        h2.zk.another_controller(3)
        reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
        h2.zk.before_state_write = None
        await h2.controller._handle(ControlledShutdown(2, h2.zk.brokers[2].epoch, reply))
        with pytest.raises(ControllerMovedError):
            reply.result()
        assert not h2.controller.active

    run(test)


def test_a_lost_session_ends_the_term_at_once_and_drops_what_was_queued_for_it() -> None:
    """kazoo's LOST (on its own thread) makes the controller inactive at once, before its task runs: the broker may
    register again with a new session first, and must not report itself controller then. Events queued for the
    ended term never run (a pending controlled shutdown is refused with NOT_CONTROLLER); the Resign runs first."""
    async def test(h: Harness) -> None:
        await h.elect()
        queue = h.controller.queue
        h.zk.remove_broker(2)  # a broker death the deposed term must not act on
        queue.put(BrokerChange())
        reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
        queue.put(ControlledShutdown(3, h.zk.brokers[3].epoch, reply))
        before = dict(h.zk.states)
        lost = threading.Thread(target=h.controller.session_lost_threadsafe)
        lost.start()
        lost.join()
        assert not h.controller.active  # at once, with nothing handled yet
        handled: list[str] = []
        original = h.controller._handle

        async def record(event: Event) -> None:
            handled.append(type(event).__name__)
            await original(event)

        queue._handle = record
        task = asyncio.create_task(queue.run())
        try:
            for _ in range(200):
                await asyncio.sleep(0.01)
                if h.released:
                    break
        finally:
            queue.close()
            await task
        assert handled == ["Resign"], handled
        assert h.released == 1 and h.controller.epoch is None
        assert h.zk.states == before  # the broker death was left to the next controller
        with pytest.raises(NotControllerError):
            reply.result()

        await h.controller._handle(Elected())  # a later term: active again
        assert h.controller.active

    run(test)


def test_events_failing_while_zookeeper_is_down_are_retried_until_it_answers() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        queue = h.controller.queue
        queue._min_backoff_s, queue._max_backoff_s = 0.01, 0.02
        task = asyncio.create_task(queue.run())
        try:
            h.zk.unavailable = True
            h.zk.remove_broker(2)  # the watch fires; the re-read fails while ZooKeeper is down
            queue.put(BrokerChange())
            for _ in range(200):
                await asyncio.sleep(0.01)
                if queue.retrying:
                    break
            assert queue.retrying, "the failed event was dropped instead of retried"
            assert h.zk.state("t", 1).leader == 2
            h.zk.unavailable = False
            for _ in range(300):
                await asyncio.sleep(0.01)
                if h.zk.state("t", 1).leader == 3 and not queue.retrying:
                    break
            assert h.zk.state("t", 1) == LeaderAndIsr(3, 1, [3, 1], 1)
            # and the watch was re-armed by the successful re-read: the next change is seen too
            h.zk.remove_broker(3)
            for _ in range(300):
                await asyncio.sleep(0.01)
                if h.zk.state("t", 1).leader == 1:
                    break
            assert h.zk.state("t", 1) == LeaderAndIsr(1, 2, [1], 1)
        finally:
            queue.close()
            await task

    run(test)


def test_resync_after_a_reconnect_catches_a_missed_broker_death() -> None:
    async def test(h: Harness) -> None:
        await h.elect()
        h.zk._watches.clear()  # the connection dropped: kazoo forgot every watch
        h.zk.brokers.pop(2)  # ... and a broker died meanwhile, with no watch to tell us
        await h.drain()
        assert h.zk.state("t", 1).leader == 2
        await h.controller._handle(Resync())
        await h.drain()
        assert h.zk.state("t", 1) == LeaderAndIsr(3, 1, [3, 1], 1)
        h.zk.remove_broker(3)  # the resync re-armed the watches
        await h.drain()
        assert h.zk.state("t", 1).leader == 1

    run(test)


def test_failover_to_a_new_controller_keeps_existing_states() -> None:
    zk = cluster_of_three()

    async def test(h: Harness) -> None:
        await h.elect()
        h.zk.set_state("t", 0, LeaderAndIsr(2, 5, [2, 1], 1))
        await h.controller._handle(Elected())  # already active: nothing happens
        assert h.zk.controller_epoch == 1
        h.zk.controller = None  # the old controller's session went
        h.zk.another_controller(2)
        h.zk.controller = None
        second = Harness(h.zk)
        await second.elect()
        assert second.controller.epoch == 3
        assert h.zk.state("t", 0) == LeaderAndIsr(2, 5, [2, 1], 1)  # read, not re-initialised
        assert TopicPartition("t", 0) in second.controller.ctx.states

    run(test, zk)
