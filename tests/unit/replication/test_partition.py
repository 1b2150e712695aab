"""Partition as a state machine: high watermark, ISR shrink/expand (with the maximal ISR while a change is in
flight), acks=all and min.insync.replicas, fencing. Real log on tmp_path, fake ISR manager and clock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from broker.log import Log
from broker.log.executor import StorageExecutor
from broker.replication.partition import (
    FOLLOWER,
    LEADER,
    CommittedIsr,
    Partition,
    PendingExpandIsr,
    PendingShrinkIsr,
    Role,
)
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from tests.harness.wait import SLOW_MACHINE_S

from .fakes import FakeIsrManager, batch, config, info, make_partition, settle

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(factory())  # type: ignore[arg-type]


def test_becoming_leader_records_the_epoch_start_and_a_stale_state_is_ignored(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        assert await part.apply(info(1, 3, (1, 2, 3), version=5), config()) == LEADER
        assert part.role is Role.LEADER and part.role == "leader"
        assert part.log.epoch_cache.entries() == [(3, 0)] and part.epoch_start_offset == 0
        assert await part.apply(info(2, 2, (1, 2), version=4), config()) is None  # older epoch: stale
        assert part.role == LEADER and part.leader_epoch == 3
        assert await part.apply(info(1, 3, (1, 2), version=4), config()) is None  # same epoch, older version
        assert part.isr == (1, 2, 3)
        assert await part.apply(info(2, 4, (2, 3), version=6), config()) == FOLLOWER
        assert part.role == FOLLOWER

    run(main)


def test_high_watermark_is_the_least_log_end_over_the_isr_and_never_moves_back(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2, 3)), config())
        await part.append(batch(5), acks=1, timeout_ms=1000)
        await settle()
        assert part.log_end_offset == 5 and part.high_watermark == 0  # followers have nothing yet
        await part.read_for_follower(2, 3, 0, 1 << 20, 0)
        await part.read_for_follower(3, 5, 0, 1 << 20, 0)
        assert part.high_watermark == 3
        await part.read_for_follower(2, 5, 0, 1 << 20, 0)
        assert part.high_watermark == 5
        assert not part.log.maybe_increment_high_watermark(2) and part.high_watermark == 5  # forward only
        assert not part.log.maybe_increment_high_watermark(99) or part.high_watermark <= part.log_end_offset

    run(main)


def test_acks_all_waits_for_every_isr_member(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2, 3)), config(min_isr=2))
        produce = asyncio.create_task(part.append(batch(2), acks=-1, timeout_ms=5000))
        await settle()
        await part.read_for_follower(2, 2, 0, 1 << 20, 0)
        await settle()
        assert not produce.done()  # broker 3 is in the ISR and has not fetched it: not committed
        await part.read_for_follower(3, 2, 0, 1 << 20, 0)
        result = await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert (result.first_offset, result.last_offset) == (0, 1) and part.high_watermark == 2

    run(main)


def test_acks_all_times_out_when_a_follower_never_fetches(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config())
        with pytest.raises(RequestTimedOutError):
            await part.append(batch(), acks=-1, timeout_ms=50)

    run(main)


def test_not_enough_replicas_refuses_before_writing(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1,)), config(min_isr=2))
        with pytest.raises(NotEnoughReplicasError):
            await part.append(batch(), acks=-1, timeout_ms=1000)
        assert part.log_end_offset == 0
        assert (await part.append(batch(), acks=1, timeout_ms=1000)).first_offset == 0  # acks=1 still works

    run(main)


def test_isr_shrinks_after_the_lag_time_and_acks_all_then_fails_after_append(tmp_path: Path) -> None:
    async def main() -> None:
        part, isr, clock = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config(min_isr=2, lag_ms=1000))
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=60_000))
        await settle()
        clock.advance_ms(500)
        part.maybe_shrink_isr()
        assert not isr.changes  # not lagging long enough yet
        clock.advance_ms(600)
        part.maybe_shrink_isr()
        assert isinstance(part.isr_state, PendingShrinkIsr) and part.isr_state.out_of_sync == (2,)
        assert part.maximal_isr == (1, 2) and part.high_watermark == 0  # still bounded by broker 2 while pending
        change = isr.succeed()
        assert change.state.isr == [1] and change.state.leader_epoch == 0  # the leader's own change: same epoch
        assert part.isr_state == CommittedIsr((1,)) and part.zk_version == isr.version
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert part.high_watermark == 1  # in the log, committed by the (smaller) ISR

    run(main)


def test_a_caught_up_follower_rejoins_and_counts_for_the_hw_while_pending(tmp_path: Path) -> None:
    async def main() -> None:
        part, isr, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1,)), config())
        await part.append(batch(4), acks=1, timeout_ms=1000)
        await settle()
        assert part.high_watermark == 4
        await part.read_for_follower(2, 2, 0, 1 << 20, 0)
        assert part.isr_state == CommittedIsr((1,)) and not isr.changes  # below the HW: not in sync
        await part.read_for_follower(2, 4, 0, 1 << 20, 0)
        assert part.isr_state == PendingExpandIsr((1,), 2) and part.maximal_isr == (1, 2)
        assert part.isr == (1,)  # min.insync counts the committed ISR only
        await part.append(batch(1), acks=1, timeout_ms=1000)
        await settle()
        assert part.high_watermark == 4  # broker 2 (maximal ISR) has not got offset 4 yet
        isr.succeed()
        assert part.isr == (1, 2)

    run(main)


def test_a_version_conflict_keeps_the_change_pending_until_the_controller_state_arrives(tmp_path: Path) -> None:
    async def main() -> None:
        part, isr, clock = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2, 3), version=1), config(lag_ms=100))
        clock.advance_ms(200)
        await part.append(batch(), acks=1, timeout_ms=1000)
        part.maybe_shrink_isr()
        isr.conflict()
        assert part.isr_state.in_flight
        part.maybe_shrink_isr()
        assert not isr.changes  # no retry against the stale version
        await part.apply(info(1, 0, (1, 3), version=2), config(lag_ms=100))  # what the controller wrote
        assert part.isr_state == CommittedIsr((1, 3)) and part.zk_version == 2

    run(main)


def test_a_newer_epoch_in_a_fetch_is_an_error_and_never_fences_the_leader(tmp_path: Path) -> None:
    """Issue 10: anyone can send a fetch, so only ZooKeeper's state may demote a leader (Kafka's
    UNKNOWN_LEADER_EPOCH); a fetch beyond the log end is OFFSET_OUT_OF_RANGE and moves no follower state."""
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 5, (1, 2)), config())
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000))
        await settle()
        with pytest.raises(FencedLeaderEpochError):
            await part.read_for_follower(2, 0, 4, 1 << 20, 0)  # an older epoch: the follower is stale
        with pytest.raises(UnknownLeaderEpochError):
            await part.read_for_follower(2, 0, 6, 1 << 20, 0)  # a newer one: an error, not a demotion
        assert part.role == LEADER
        with pytest.raises(OffsetOutOfRangeError):
            await part.read_for_follower(2, 10**18, 5, 1 << 20, 0)
        assert part.high_watermark == 0 and not produce.done()  # nothing acknowledged by the bogus offset
        await part.apply(info(2, 6, (2,)), config())  # ZooKeeper says another broker leads: now we step down
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(produce, SLOW_MACHINE_S)

    run(main)


def test_fence_on_session_loss_fails_waiting_produces(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config())
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000))
        await settle()
        part.fence("session lost")
        with pytest.raises(NotLeaderOrFollowerError) as e:
            await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert "no leader" in str(e.value)

    run(main)


def test_a_new_epoch_that_keeps_this_leader_keeps_its_acks_all_waits(tmp_path: Path) -> None:
    """The controller takes a dead follower out of the ISR with a new leader epoch, this replica still leader
    (Kafka's controller does the same): a produce waiting for that follower is acknowledged once the smaller
    ISR has it, with its first offset, rather than failed as NOT_LEADER_OR_FOLLOWER (which a producer without
    idempotence answers by writing the batch again), as Kafka's DelayedProduce does."""
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2, 3)), config(min_isr=2))
        await part.append(batch(2), acks=1, timeout_ms=1000)
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000))
        await settle()
        await part.read_for_follower(2, 3, 0, 1 << 20, 0)  # follower 2 has it; follower 3 died
        await settle()
        assert not produce.done()
        await part.apply(info(1, 1, (1, 2), version=1), config(min_isr=2))  # 3 out of the ISR, epoch 1
        # re-elected, this leader keeps follower 2's position (Kafka's resetReplicaState): no fetch needed
        result = await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert result.first_offset == 2 and part.high_watermark == 3 and part.log_end_offset == 3

    run(main)


def test_a_new_leader_knows_no_followers_position_until_it_fetches(tmp_path: Path) -> None:
    """Leader, follower, leader again: the positions its followers fetched at in its first term say nothing of
    their logs now (they may have followed another leader's), so the high watermark waits for their fetches."""
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config())
        await part.append(batch(2), acks=1, timeout_ms=1000)
        await part.read_for_follower(2, 2, 0, 1 << 20, 0)
        assert part.high_watermark == 2
        await part.apply(info(2, 1, (1, 2), version=1), config())
        await part.apply(info(1, 2, (1, 2), version=2), config())
        assert part.followers[2].log_end_offset == -1
        await part.append(batch(), acks=1, timeout_ms=1000)
        assert part.high_watermark == 2
        await part.read_for_follower(2, 3, 2, 1 << 20, 0)
        assert part.high_watermark == 3

    run(main)


def test_leadership_lost_and_regained_during_a_wait_fails_it(tmp_path: Path) -> None:
    """Leader, then follower (its log may be cut to the new leader's), then leader again before the waiting
    produce looks: the offset it waits for may hold another record now, so the wait fails as NOT_LEADER (the
    batch possibly appended), even though this replica leads when it looks."""
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 0, (1, 2)), config())
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000))
        await settle()
        await part.apply(info(2, 1, (1, 2), version=1), config())
        await part.apply(info(1, 2, (1, 2), version=2), config())
        assert part.role == LEADER
        await part.read_for_follower(2, 1, 2, 1 << 20, 0)  # the follower has the offset, in the new term
        with pytest.raises(NotLeaderOrFollowerError) as e:
            await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert "may or may not survive" in str(e.value)

    run(main)


def test_follower_append_takes_the_leader_hw_capped_at_its_log_end(tmp_path: Path) -> None:
    async def main() -> None:
        leader, _, _ = make_partition(tmp_path, broker_id=1)
        follower, _, _ = make_partition(tmp_path, broker_id=2)
        await leader.apply(info(1, 0, (1, 2)), config())
        await follower.apply(info(1, 0, (1, 2)), config())
        await leader.append(batch(3), acks=1, timeout_ms=1000)
        data = (await leader.read_for_follower(2, 0, 0, 1 << 20, 0)).data
        await follower.append_replicated(data, leader_hw=10)
        assert follower.log_end_offset == 3 and follower.high_watermark == 3
        assert follower.log.epoch_cache.entries() == [(0, 0)]

    run(main)


def test_a_new_leader_alone_in_the_isr_serves_what_it_held_while_its_epoch_job_waits(tmp_path: Path) -> None:
    """Kafka's makeLeader raises the high watermark before any read sees the new leader. Here the epoch job
    waits behind the partition's busy storage queue, and a read in that window must still see the follower's
    records (an unclean election's new leader answered [] once, until the job ran)."""
    async def main() -> None:
        storage = StorageExecutor("test-storage", threads=2)
        log = Log.open(tmp_path / "t-0-b1")
        log.high_watermark = 0
        part = Partition("t", 0, 1, log, FakeIsrManager(), lambda b: f"http://broker-{b}", storage=storage)
        try:
            await part.apply(info(2, 0, (2, 1), replicas=(1, 2)), config())
            assert await part.append_replicated(bytes(batch(2)), leader_hw=0, leader_epoch=0)
            assert (part.log_end_offset, part.high_watermark) == (2, 0)  # the leader's HW said nothing yet
            gate = threading.Event()
            blocked = asyncio.create_task(part._run(gate.wait))  # the partition's queue is busy
            await asyncio.sleep(0)
            becoming = asyncio.create_task(part.apply(info(1, 1, (1,), replicas=(1, 2)), config()))
            await asyncio.sleep(0.05)
            assert not becoming.done() and part.role == LEADER  # its epoch job waits behind the queue
            read = await part.read(0, 1 << 20, 0)
            assert part.high_watermark == 2 and read.next_offset == 2, read
            gate.set()
            assert await becoming == LEADER
            await blocked
            assert part.epoch_start_offset == 2 and part.log.epoch_cache.entries()[-1] == (1, 2)
        finally:
            gate.set()
            storage.shutdown()

    run(main)
