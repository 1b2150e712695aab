"""The Kafka-protocol replica fetchers in /metrics (issue 25; Kafka's FetcherStats, FetcherLagMetrics and
ReplicaFetcherManager MaxLag): the real fetcher manager and fetchers on real partitions, behind the in-memory
leaders of test_leader_fetcher and test_fetcher_manager, read through the broker's registry as a scrape reads
them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from broker.metrics import BrokerMetrics
from broker.replication.fetch_session_handler import FETCH_SESSION_ID_NOT_FOUND, SessionRequest
from broker.replication.fetcher_manager import FetcherManager
from broker.replication.leader_endpoint import FetchAnswer, FetchSettings
from broker.replication.partition import Partition

from .fakes import batch, config, info
from .test_fetcher_manager import Endpoint
from .test_leader_fetcher import FOLLOWER_ID, LEADER_ID, MemoryLeader, pair, until

P = "odradek_replica_fetcher_"


class ScriptedLeader(MemoryLeader):
    """A MemoryLeader that treats each fetch as ``script`` says, one word a fetch ("answer"; "fail": the leader
    out of reach; "refuse": a top-level FETCH_SESSION_ID_NOT_FOUND), then holds every further fetch (``held``
    counts them) until ``gate`` is set."""

    def __init__(self, parts: dict[Any, Partition], script: Iterable[str]) -> None:
        super().__init__(parts)
        self.script = list(script)
        self.gate = asyncio.Event()
        self.held = 0

    async def fetch(self, request: SessionRequest, **kwargs: Any) -> FetchAnswer:
        if not self.script:
            self.held += 1
            await self.gate.wait()
            return await super().fetch(request, **kwargs)
        step = self.script.pop(0)
        if step == "refuse":
            return FetchAnswer(FETCH_SESSION_ID_NOT_FOUND, 0, {})
        if step == "fail":
            self.fail_next += 1
        return await super().fetch(request, **kwargs)


def watched(manager: FetcherManager) -> BrokerMetrics:
    metrics = BrokerMetrics(lambda: [])
    metrics.watch_replica_fetchers(manager)
    return metrics


def value(metrics: BrokerMetrics, name: str, **labels: object) -> float | None:
    """One sample as a scrape shows it (None when absent); labels default to fetcher 0 of the leader."""
    if name != "max_lag":
        labels = {"leader": LEADER_ID, "fetcher": 0, **labels}
    return metrics.registry.get_sample_value(P + name, {k: str(v) for k, v in labels.items()})


async def follow_all(manager: FetcherManager, parts: Iterable[Partition]) -> None:
    for part in parts:
        await manager.follow(part, restart=True)


def test_nothing_is_exported_without_kafka_fetchers() -> None:
    # the HTTP transport (no fetcher manager) shows none of these metrics, not even a zero max lag
    assert P.encode() not in BrokerMetrics(lambda: []).render()


def test_counters_and_lag_move_as_fetches_succeed(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 2)
        # the leader alone in the ISR: its high watermark runs ahead of the follower, which then lags
        for part in [*leaders.values(), *followers.values()]:
            await part.apply(info(LEADER_ID, 2, (LEADER_ID,), replicas=(1, 2), version=1, partition=part.partition),
                             config())
        for _ in range(3):
            await leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
        await leaders[("t", 1)].append(batch(1), acks=1, timeout_ms=1000)
        assert (leaders[("t", 0)].high_watermark, leaders[("t", 1)].high_watermark) == (6, 1)
        endpoint = ScriptedLeader(leaders, ["answer"])
        # one batch per partition per answer: partition 0 takes three rounds to catch up
        manager = FetcherManager(FOLLOWER_ID, lambda leader, index: endpoint, broker_epoch=lambda: 7,
                                 settings=FetchSettings(partition_max_bytes=1))
        metrics = watched(manager)
        await follow_all(manager, followers.values())
        try:
            await until(lambda: endpoint.held == 1)  # one answer applied, the next request sent and held
            assert followers[("t", 0)].log_end_offset == 2 and followers[("t", 1)].log_end_offset == 1
            assert value(metrics, "requests_total") == 2
            assert value(metrics, "round_seconds_count") == 1
            assert value(metrics, "errors_total") == 0
            assert value(metrics, "records_total") == 3
            assert value(metrics, "bytes_total") == len(batch(2)) + len(batch(1))
            assert value(metrics, "partitions") == 2
            assert value(metrics, "partition_lag", topic="t", partition=0) == 4  # hw 6, log end 2
            assert value(metrics, "partition_lag", topic="t", partition=1) == 0
            assert value(metrics, "max_lag") == 4
            endpoint.gate.set()
            await until(lambda: followers[("t", 0)].log_end_offset == 6 and value(metrics, "max_lag") == 0)
            assert value(metrics, "records_total") == 7
            assert value(metrics, "bytes_total") == sum(p.log.size_in_bytes for p in leaders.values())
            assert value(metrics, "errors_total") == 0
            assert value(metrics, "round_seconds_count") >= 3  # type: ignore[operator]
            assert value(metrics, "round_seconds_sum") > 0  # type: ignore[operator]
        finally:
            await manager.close()

    asyncio.run(main())


def test_failed_and_refused_fetches_count_as_errors_and_a_closing_fetcher_does_not(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 1)
        await leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
        endpoint = ScriptedLeader(leaders, ["fail", "fail", "refuse", "answer"])
        manager = FetcherManager(FOLLOWER_ID, lambda leader, index: endpoint, broker_epoch=lambda: 7)
        metrics = watched(manager)
        await follow_all(manager, followers.values())
        try:
            await until(lambda: endpoint.held == 1)
            assert value(metrics, "requests_total") == 5
            assert value(metrics, "errors_total") == 3  # two not answered, one refused as a whole
            assert value(metrics, "round_seconds_count") == 2  # the refusal and the answer: both came back
            assert value(metrics, "records_total") == 2
        finally:
            await manager.close()  # cancels the held request: the fetcher closing, not a failure
        assert value(metrics, "errors_total") == 3
        assert value(metrics, "requests_total") == 5  # a closed fetcher's counters stay
        assert value(metrics, "partitions") is None  # its gauges do not
        assert value(metrics, "partition_lag", topic="t", partition=0) is None
        assert value(metrics, "max_lag") == 0

    asyncio.run(main())


def test_a_fetcher_left_without_partitions_leaves_the_gauges_and_its_counters_go_on_when_it_returns(
        tmp_path: Path) -> None:
    async def main() -> None:
        _, followers = await pair(tmp_path, 3)
        # partition 2 moves to leader 3: broker 2 follows it from a second fetcher
        await followers[("t", 2)].apply(info(3, 2, (3, 2), replicas=(3, 2), version=1, partition=2), config())
        made: list[Endpoint] = []

        def endpoints(leader: int, index: int) -> Endpoint:
            made.append(Endpoint(leader, index))
            return made[-1]

        manager = FetcherManager(FOLLOWER_ID, endpoints, broker_epoch=lambda: 7)  # type: ignore[arg-type]
        metrics = watched(manager)
        await follow_all(manager, followers.values())
        try:
            await until(lambda: all(e.fetched for e in made))
            assert value(metrics, "partitions") == 2
            assert value(metrics, "partitions", leader=3) == 1
            assert value(metrics, "partition_lag", leader=3, topic="t", partition=2) == 0
            await manager.unfollow(("t", 2))  # its fetcher's last partition: the fetcher closes
            assert value(metrics, "partitions", leader=3) is None
            assert value(metrics, "partition_lag", leader=3, topic="t", partition=2) is None
            assert value(metrics, "partitions") == 2
            closed = value(metrics, "requests_total", leader=3)
            assert closed is not None and closed > 0
            await manager.follow(followers[("t", 2)], restart=True)
            await until(lambda: made[-1].fetched)
            assert value(metrics, "partitions", leader=3) == 1
            # the new fetcher counts on from its predecessor's total (each fetch is counted as it is sent)
            assert value(metrics, "requests_total", leader=3) == closed + len(made[-1].fetched)
        finally:
            await manager.close()

    asyncio.run(main())


def test_a_truncated_partition_is_counted(tmp_path: Path) -> None:
    async def main() -> None:
        leaders, followers = await pair(tmp_path, 1)
        # the follower once led at epoch 1 and wrote 3 records nobody else has; the leader now leads at epoch 2
        f0 = followers[("t", 0)]
        await f0.apply(info(FOLLOWER_ID, 1, (2,), replicas=(1, 2), version=1), config())
        for _ in range(3):
            await f0.append(batch(1), acks=1, timeout_ms=1000)
        for part in [*leaders.values(), f0]:
            await part.apply(info(LEADER_ID, 2, (1, 2), replicas=(1, 2), version=5), config())
        await leaders[("t", 0)].append(batch(2), acks=1, timeout_ms=1000)
        endpoint = MemoryLeader(leaders)
        manager = FetcherManager(FOLLOWER_ID, lambda leader, index: endpoint, broker_epoch=lambda: 7)
        metrics = watched(manager)
        await follow_all(manager, followers.values())
        try:
            await until(lambda: f0.log_end_offset == 2 and f0.high_watermark == 2)
            assert value(metrics, "truncations_total") == 1
            assert value(metrics, "records_total") == 2
        finally:
            await manager.close()

    asyncio.run(main())
