"""The follower's multi-partition fetcher (broker/replication/leader_fetcher.py) against a real leader: both are
real partitions on real logs, and the endpoint between them is in memory, answering from the leader's
``read_for_follower`` (as the Kafka listener's replica fetch does) with the leader's real fetch-session cache."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.fetch import sessions as leader_sessions
from broker.log import Log
from broker.replication.fetch_session_handler import SessionRequest
from broker.replication.leader_endpoint import EpochEnd, FetchAnswer, FetchedPartition, FetchSettings
from broker.replication.leader_fetcher import REFRESH_S, LeaderFetcher
from broker.replication.partition import APPEND_HERE_MAX_BYTES, FOLLOWER, LEADER, InlineStorage, Partition
from odradek.protocol.errors import NotLeaderOrFollowerError, OdradekError

from .fakes import FakeIsrManager, batch, config, info

LEADER_ID, FOLLOWER_ID = 1, 2


class MemoryLeader:
    """A LeaderEndPoint over real leader partitions, with the leader's real session cache."""

    def __init__(self, parts: dict[tuple[str, int], Partition]) -> None:
        self.leader_id = LEADER_ID
        self.parts = parts
        self.cache = leader_sessions.FetchSessionCache(10, 1000, clock_ms=lambda: 0, rng=random.Random(1))
        self.requests: list[SessionRequest] = []
        self.fail_next = 0

    async def fetch(self, request: SessionRequest, *, replica_id: int, broker_epoch: int,
                    settings: FetchSettings) -> FetchAnswer:
        self.requests.append(request)
        if self.fail_next:
            self.fail_next -= 1
            from odradek.protocol.errors import BrokerNotAvailableError
            raise BrokerNotAvailableError("cut")
        wanted = [leader_sessions.PartitionFetch(t, p, d.fetch_offset, d.max_bytes, d.current_leader_epoch, -1,
                                                 d.log_start_offset) for (t, p), d in request.partitions.items()]
        context = self.cache.new_context(request.session_id, request.epoch, wanted, request.forgotten,
                                         privileged=True)
        if context.error is not None:
            return FetchAnswer(context.error.kafka_code, 0, {})
        results: list[FetchedPartition] = []
        for f in context.partitions:
            part = self.parts[f.key]
            try:
                read = await part.read_for_follower(replica_id, f.fetch_offset, f.current_leader_epoch,
                                                    f.max_bytes, 0)
                results.append(FetchedPartition(bytes(read.data), part.high_watermark, part.log_start_offset))
            except OdradekError as e:
                results.append(FetchedPartition(error=e))
        if not any(r.records for r in results):
            await asyncio.sleep(0.005)  # a real leader holds an empty fetch up to max_wait; a short one here
        reply = context.respond([leader_sessions.PartitionOutcome(len(r.records), r.high_watermark,
                                                                  r.log_start_offset, r.error is not None)
                                 for r in results])
        return FetchAnswer(0, reply.session_id, {context.partitions[i].key: results[i] for i in reply.carried})

    async def epoch_end_offsets(self, asks: Mapping[tuple[str, int], tuple[int, int]], *,
                                replica_id: int) -> dict[tuple[str, int], EpochEnd]:
        out = {}
        for key, (_, epoch) in asks.items():
            leader_epoch, end = self.parts[key].epoch_end_offset(epoch)
            out[key] = EpochEnd(leader_epoch, end)
        return out

    async def log_bounds(self, partition: tuple[str, int], *, replica_id: int) -> tuple[int, int]:
        part = self.parts[partition]
        return part.log_start_offset, part.log_end_offset

    async def close(self) -> None:
        pass


class SaturatedLoopStorage(InlineStorage):
    """Inline storage whose loop is too busy for a large copy (broker/log/loop_load.py)."""

    def loop_saturated(self) -> bool:
        return True


async def pair(tmp_path: Path, partitions: int) -> tuple[dict[Any, Partition], dict[Any, Partition]]:
    """``partitions`` partitions of topic t, each led by broker 1 (epoch 1) and followed by broker 2."""
    leaders, followers = {}, {}
    for p in range(partitions):
        for broker, role, out in ((LEADER_ID, LEADER, leaders), (FOLLOWER_ID, FOLLOWER, followers)):
            log = Log.open(tmp_path / f"t-{p}-b{broker}")
            log.high_watermark = 0
            part = Partition("t", p, broker, log, FakeIsrManager(), lambda b: f"http://broker-{b}")
            await part.apply(info(LEADER_ID, 1, (1, 2), replicas=(1, 2), partition=p), config())
            assert part.role == role
            out[("t", p)] = part
    return leaders, followers


async def until(condition: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_one_fetcher_replicates_every_partition_and_idle_ones_drop_out_of_the_session(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 4)
        endpoint = MemoryLeader(leaders)
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            for p in range(4):
                await leaders[("t", p)].append(batch(p + 1), acks=1, timeout_ms=1000)
            await until(lambda: all(followers[k].log_end_offset == leaders[k].log_end_offset for k in leaders))
            # the leader saw the follower at its log end: the high watermark moved, and the follower follows it
            await until(lambda: all(followers[k].high_watermark == leaders[k].log_end_offset for k in leaders))
            assert [leaders[("t", p)].high_watermark for p in range(4)] == [1, 2, 3, 4]
            assert endpoint.requests[0].full and len(endpoint.requests[0].partitions) == 4
            # now only partition 2 gets a record: incremental requests name it alone (its offset moved)
            before = len(endpoint.requests)
            await leaders[("t", 2)].append(batch(5), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 2)].log_end_offset == 8)
            later = endpoint.requests[before:]
            assert all(not r.full for r in later)
            assert {k for r in later for k in r.partitions} <= {("t", 2)}
        finally:
            task.cancel()
        assert fetcher.rounds > 0

    asyncio.run(main())


def test_a_divergent_tail_is_truncated_before_the_first_fetch(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        # the follower once led at epoch 1 and wrote 3 records nobody else has; the leader now leads at epoch 2
        f0 = followers[("t", 0)]
        await f0.apply(info(FOLLOWER_ID, 1, (2,), replicas=(1, 2), version=1), config())
        for _ in range(3):
            await f0.append(batch(1), acks=1, timeout_ms=1000)
        for part in [*leaders.values(), *followers.values()]:
            await part.apply(info(LEADER_ID, 2, (1, 2), replicas=(1, 2), version=5, partition=part.partition),
                             config())
        await leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
        fetcher = LeaderFetcher(MemoryLeader(leaders), FOLLOWER_ID, broker_epoch=lambda: 7)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            await until(lambda: f0.log_end_offset == 2 and f0.high_watermark == 2)
            assert f0.log.read(0, 1 << 20).data == leaders[("t", 0)].log.read(0, 1 << 20).data
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_partition_the_leader_refuses_is_held_back_while_the_others_go_on(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        endpoint = MemoryLeader(leaders)
        original = leaders[("t", 1)].read_for_follower

        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise NotLeaderOrFollowerError("moved")

        leaders[("t", 1)].read_for_follower = refuse  # type: ignore[method-assign]
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, backoff_s=0.2)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            await leaders[("t", 0)].append(batch(3), acks=1, timeout_ms=1000)
            await leaders[("t", 1)].append(batch(2), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 0)].log_end_offset == 3)
            assert followers[("t", 1)].log_end_offset == 0
            leaders[("t", 1)].read_for_follower = original  # type: ignore[method-assign]
            await until(lambda: followers[("t", 1)].log_end_offset == 2)
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_failed_round_starts_a_new_session_and_nothing_is_lost_or_doubled(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        endpoint = MemoryLeader(leaders)
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, backoff_s=0.01)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            await leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 0)].log_end_offset == 2)
            endpoint.fail_next = 2
            await leaders[("t", 0)].append(batch(3), acks=1, timeout_ms=1000)
            await leaders[("t", 1)].append(batch(1), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 0)].log_end_offset == 5 and followers[("t", 1)].log_end_offset == 1)
            full_after_failure = [r for r in endpoint.requests[1:] if r.full]
            assert full_after_failure, "a failed round must be followed by a full fetch"
            assert followers[("t", 0)].log.read(0, 1 << 20).data == leaders[("t", 0)].log.read(0, 1 << 20).data
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_partition_that_stops_following_this_leader_is_dropped(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        fetcher = LeaderFetcher(MemoryLeader(leaders), FOLLOWER_ID, broker_epoch=lambda: 7)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            await until(lambda: fetcher.rounds > 0)
            # partition 1's follower becomes the leader (epoch 2): this fetcher must not append to it any more
            await followers[("t", 1)].apply(info(FOLLOWER_ID, 2, (2,), replicas=(1, 2), version=9, partition=1),
                                            config())
            await leaders[("t", 1)].append(batch(4), acks=1, timeout_ms=1000)
            await leaders[("t", 0)].append(batch(1), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 0)].log_end_offset == 1)
            await asyncio.sleep(0.1)
            assert followers[("t", 1)].log_end_offset == 0
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_partition_whose_epoch_end_is_refused_is_asked_again_after_the_backoff_while_others_fetch(
        tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        # partition 1's follower holds records of epoch 1, so it asks where the leader ended that epoch
        for key in (("t", 1),):
            await leaders[key].append(batch(2), acks=1, timeout_ms=1000)
            await followers[key].append_replicated(bytes(leaders[key].log.read(0, 1 << 20).data), 0)
        endpoint = MemoryLeader(leaders)
        asked: list[tuple[str, int]] = []
        answer = endpoint.epoch_end_offsets

        async def refuse_twice(asks: Mapping[tuple[str, int], tuple[int, int]], *, replica_id: int) -> Any:
            asked.extend(asks)
            if len(asked) <= 2:
                return {key: EpochEnd(error=NotLeaderOrFollowerError("not yet")) for key in asks}
            return await answer(asks, replica_id=replica_id)

        endpoint.epoch_end_offsets = refuse_twice  # type: ignore[method-assign]
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, backoff_s=0.15)
        for part in followers.values():
            fetcher.add(part)
        task = asyncio.create_task(fetcher.run())
        try:
            started = asyncio.get_running_loop().time()
            await leaders[("t", 0)].append(batch(3), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 0)].log_end_offset == 3)  # partition 0 does not wait for 1
            await leaders[("t", 1)].append(batch(1), acks=1, timeout_ms=1000)
            await until(lambda: followers[("t", 1)].log_end_offset == 3)
            # asked once, refused, again only after each backoff: not at every round of partition 0's fetches
            assert asked == [("t", 1)] * 3
            assert asyncio.get_running_loop().time() - started >= 0.25
        finally:
            task.cancel()

    asyncio.run(main())


class OneThrottled:
    """The follower's replication quota (``ReplicationThrottle.follower_limit``) naming partition 1 alone."""

    def __init__(self, rate: int) -> None:
        from broker.quotas import TokenBucket

        self.bucket = TokenBucket(rate)

    def follower_limit(self, topic: str, partition: int, in_isr: bool) -> Any:
        return self.bucket if partition == 1 else None


def test_a_throttled_partition_replicates_at_its_rate_and_never_holds_back_the_others(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        value = bytes(range(256)) * 8  # 2 KiB records, one per batch
        for _ in range(40):
            await leaders[("t", 1)].append(batch(1, value), acks=1, timeout_ms=1000)
        total = leaders[("t", 1)].log.size_in_bytes
        # partition 0's first record is not measured: each side's first append of an epoch writes (and fsyncs)
        # the leader-epoch checkpoint, which a loaded machine can stretch to half a second
        await leaders[("t", 0)].append(batch(1), acks=1, timeout_ms=1000)
        rate = 40_000  # ~2 s for partition 1's ~80 KiB
        fetcher = LeaderFetcher(MemoryLeader(leaders), FOLLOWER_ID, broker_epoch=lambda: 7,
                                throttle=OneThrottled(rate))  # type: ignore[arg-type]
        for part in followers.values():
            fetcher.add(part)
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(fetcher.run())
        try:
            started = loop.time()
            await until(lambda: followers[("t", 1)].log_end_offset > 0 and followers[("t", 0)].log_end_offset == 1)
            # partition 1 is in debt now; partition 0 (not throttled) gets each record at once all the same
            lags = []
            for i in range(5):
                appended = loop.time()
                await leaders[("t", 0)].append(batch(1), acks=1, timeout_ms=1000)
                await until(lambda i=i: followers[("t", 0)].log_end_offset == i + 2)
                lags.append(loop.time() - appended)
            assert followers[("t", 1)].log_end_offset < 40  # still catching up meanwhile
            # held back, every record would wait on partition 1's debt; the median leaves a loaded machine's
            # stray fsync or scheduling stall out of the verdict
            assert sorted(lags)[2] < 0.25, lags
            await until(lambda: followers[("t", 1)].log_end_offset == 40, timeout=10)
            elapsed = loop.time() - started
            # the bucket starts empty and goes into debt by at most one capped fetch: the rate holds within 30 %
            assert total / rate * 0.7 <= elapsed <= total / rate * 1.3 + 0.5, (elapsed, total / rate)
        finally:
            task.cancel()

    asyncio.run(main())


def test_a_fetcher_waiting_idle_ends_when_cancelled_in_the_step_its_last_partition_is_removed(
        tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 1)
        endpoint = MemoryLeader(leaders)

        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise NotLeaderOrFollowerError("moved")

        leaders[("t", 0)].read_for_follower = refuse  # type: ignore[method-assign]
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, backoff_s=5)
        fetcher.add(followers[("t", 0)])
        task = asyncio.create_task(fetcher.run())
        await until(lambda: fetcher.rounds == 1)
        await asyncio.sleep(0.05)  # the partition is held back: the fetcher waits for it, or for a change
        # what the fetcher manager does when a partition's leader moves: remove it, then cancel the empty fetcher
        fetcher.remove(("t", 0))
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1)
        assert done, "the cancellation was lost: the fetcher kept waiting"
        assert task.cancelled()

    asyncio.run(main())


async def one_round(fetcher: LeaderFetcher) -> None:
    """What ``run`` does once: truncate what is pending, then fetch what is ready."""
    await fetcher._truncate_pending()
    await fetcher._fetch_round(fetcher._ready())


def test_a_round_looks_only_at_the_partitions_something_happened_to(tmp_path: Path) -> None:
    """The request is kept between rounds: an idle partition is not looked at again (its offsets, its role, its
    throttle) until an answer brings it records, or ``REFRESH_S`` passes; the session still asks for all of
    them (an incremental request naming none)."""
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 30)
        clock = [100.0]
        endpoint = MemoryLeader(leaders)
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, clock=lambda: clock[0])
        for part in followers.values():
            fetcher.add(part)
        looked: list[tuple[str, int]] = []
        real = fetcher._current

        def current(f: Any) -> bool:
            looked.append((f.part.topic, f.part.partition))
            return real(f)

        fetcher._current = current  # type: ignore[method-assign]
        await one_round(fetcher)  # the full fetch: every partition looked at, truncated, asked
        assert len(set(looked)) == 30
        looked.clear()
        await one_round(fetcher)
        await one_round(fetcher)
        assert looked == [] and endpoint.requests[-1].partitions == {}  # incremental, nothing to say, nothing seen
        await leaders[("t", 4)].append(batch(2), acks=1, timeout_ms=1000)
        await one_round(fetcher)  # brings t-4's records: its answer alone is looked at
        assert followers[("t", 4)].log_end_offset == 2 and looked == [("t", 4)]
        looked.clear()
        await one_round(fetcher)  # t-4 asked from its new end: its request rebuilt, it alone
        assert set(looked) == {("t", 4)} and endpoint.requests[-1].partitions[("t", 4)].fetch_offset == 2
        assert set(endpoint.requests[-1].partitions) == {("t", 4)}
        looked.clear()
        clock[0] += REFRESH_S  # and at least this often, every partition
        await one_round(fetcher)
        assert len(set(looked)) == 30 and endpoint.requests[-1].partitions == {}

    asyncio.run(main())


def test_a_partition_that_stopped_being_current_is_dropped_from_the_request_when_its_answer_says_so(
        tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        endpoint = MemoryLeader(leaders)
        fetcher = LeaderFetcher(endpoint, FOLLOWER_ID, broker_epoch=lambda: 7, clock=lambda: 100.0)
        for part in followers.values():
            fetcher.add(part)
        await one_round(fetcher)
        await one_round(fetcher)
        # Both sides move to epoch 2 (the manager would re-add the follower; here it does not): the follower's
        # t-1 is no longer current for this fetcher, and the leader fences the old epoch.
        for parts in (leaders, followers):
            await parts[("t", 1)].apply(info(LEADER_ID, 2, (1, 2), replicas=(1, 2), partition=1, version=1),
                                        config())
        await leaders[("t", 1)].append(batch(1), acks=1, timeout_ms=1000)
        await one_round(fetcher)  # t-1 joins the leader's round with its error: held back, looked at again
        assert followers[("t", 1)].log_end_offset == 0
        await one_round(fetcher)
        assert ("t", 1) not in fetcher._wanted and followers[("t", 1)].log_end_offset == 0

    asyncio.run(main())


def test_an_answer_too_big_for_the_loop_goes_through_the_storage_queue_and_a_moved_log_start_is_followed(
        tmp_path: Path) -> None:
    """A round applies a partition at once when its append is a page-cache write on the loop, and through the
    partition's storage queue when it is not (here: more than ``APPEND_HERE_MAX_BYTES`` on a saturated loop);
    either way the records land, the high watermark follows, and so does the leader's log start after a
    DeleteRecords."""
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        followers[("t", 0)]._storage = SaturatedLoopStorage()
        fetcher = LeaderFetcher(MemoryLeader(leaders), FOLLOWER_ID, broker_epoch=lambda: 7, clock=lambda: 100.0)
        applied: list[tuple[int, bool | None]] = []  # (partition, what append_replicated_here answered)
        for (_, p), part in followers.items():
            fetcher.add(part)

            def spy(data: bytes, leader_hw: int, leader_epoch: int | None = None, *,
                    real: Any = part.append_replicated_here, p: int = p) -> bool | None:
                out = real(data, leader_hw, leader_epoch)
                if data:
                    applied.append((p, out))
                return out  # type: ignore[no-any-return]

            part.append_replicated_here = spy  # type: ignore[method-assign]
        for p in (0, 1):  # the first records of an epoch go through the queue (the epoch checkpoint's fsync)
            await leaders[("t", p)].append(batch(1), acks=1, timeout_ms=1000)
        await one_round(fetcher)
        applied.clear()
        await leaders[("t", 0)].append(batch(1, b"x" * (APPEND_HERE_MAX_BYTES + 1000)), acks=1, timeout_ms=1000)
        await leaders[("t", 1)].append(batch(3), acks=1, timeout_ms=1000)
        await one_round(fetcher)
        assert set(applied) == {(0, None), (1, True)}  # the big one queued, the small one at once
        assert [followers[("t", p)].log_end_offset for p in (0, 1)] == [2, 4]
        await one_round(fetcher)  # the leader saw the follower at its log end: its high watermark moved
        assert [leaders[("t", p)].high_watermark for p in (0, 1)] == [2, 4]
        await leaders[("t", 1)].delete_records(2)
        for _ in range(2):
            await one_round(fetcher)
        assert followers[("t", 1)].high_watermark == 4
        assert followers[("t", 1)].log_start_offset == 2  # the leader's, within the follower's high watermark
        assert followers[("t", 0)].log_start_offset == 0

    asyncio.run(main())
