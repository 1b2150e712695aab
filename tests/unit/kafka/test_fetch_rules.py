"""Kafka's fetch rules (broker/kafka/fetch.py): when a fetch answers, and how many bytes it carries."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from broker.fetch.service import FetchRequest, PartitionData
from broker.kafka.fetch import FetchWant, fetch
from odradek.protocol.errors import NotLeaderOrFollowerError
from odradek.protocol.records import encode_batch


def batches(offset: int, count: int, size: int = 100) -> bytes:
    return b"".join(encode_batch([(None, b"x" * size, 1, [])], base_offset=offset + i) for i in range(count))


BATCH = len(batches(0, 1))


class Log:
    """Per partition: the batches a read returns now; ``grow`` wakes long-polls, as a high watermark move does.
    A stand-in for the fetch service's leader-only ``fetch``."""

    def __init__(self, data: dict[int, bytes]) -> None:
        self.data = data
        self.moved = asyncio.Event()
        self.reads: list[tuple[int, int]] = []
        self.fail: set[int] = set()

    def grow(self, partition: int, data: bytes) -> None:
        self.data[partition] = data
        self.moved.set()
        self.moved = asyncio.Event()

    async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData:
        wait_ms = request.poll_ms
        self.reads.append((request.partition, wait_ms))
        if request.partition in self.fail:
            raise NotLeaderOrFollowerError("moved", leader=2)
        if not self.data.get(request.partition) and wait_ms > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.moved.wait(), wait_ms / 1000)
        data = self.data.get(request.partition, b"")
        return PartitionData(request.topic, request.partition, request.offset or 0, data, 100, 100, 0, 100, 1, 1)


def wants(*partitions: int, max_bytes: int = 1 << 20) -> list[FetchWant]:
    return [FetchWant("t", p, 0, max_bytes) for p in partitions]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_response_and_partition_limits_cut_at_batch_boundaries_and_the_first_batch_always_goes() -> None:
    async def main() -> None:
        log = Log({0: batches(0, 5), 1: batches(0, 5), 2: batches(0, 5)})
        # partition 0's first batch is over both limits but goes anyway; then the response budget is spent
        answers = await fetch(log, wants(0, 1, 2, max_bytes=BATCH // 2), max_wait_ms=0, min_bytes=1,
                              max_bytes=BATCH + 10, committed=False)
        assert [len(a.read.records) for a in answers] == [BATCH, 0, 0]
        answers = await fetch(log, wants(0, 1, 2, max_bytes=2 * BATCH + 1), max_wait_ms=0, min_bytes=1,
                              max_bytes=3 * BATCH, committed=False)
        assert [len(a.read.records) for a in answers] == [2 * BATCH, BATCH, 0]
        assert all(a.read.high_watermark == 100 for a in answers)  # emptied partitions still carry offsets

    run(main())


def test_an_empty_fetch_waits_until_data_arrives_not_until_max_wait() -> None:
    async def main() -> None:
        log = Log({})
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, log.grow, 1, batches(0, 1))
        started = loop.time()
        answers = await fetch(log, wants(0, 1), max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20,
                              committed=False)
        assert loop.time() - started < 5
        assert [len(a.read.records) for a in answers] == [0, BATCH]

    run(main())


def test_min_bytes_keeps_waiting_and_max_wait_ends_the_wait() -> None:
    async def main() -> None:
        log = Log({})
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, log.grow, 0, batches(0, 1))
        loop.call_later(0.15, log.grow, 1, batches(0, 1))
        answers = await fetch(log, wants(0, 1), max_wait_ms=10_000, min_bytes=2 * BATCH, max_bytes=1 << 20,
                              committed=False)
        assert [len(a.read.records) for a in answers] == [BATCH, BATCH]
        started = loop.time()
        empty = await fetch(Log({}), wants(0), max_wait_ms=200, min_bytes=1, max_bytes=1 << 20,
                            committed=False)
        assert 0.15 < loop.time() - started < 5 and empty[0].read.records == b""

    run(main())


def test_an_error_answers_at_once_without_waiting() -> None:
    async def main() -> None:
        log = Log({})
        log.fail.add(1)
        started = asyncio.get_running_loop().time()
        answers = await fetch(log, wants(0, 1), max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20,
                              committed=False)
        assert asyncio.get_running_loop().time() - started < 1
        assert answers[0].error is None and isinstance(answers[1].error, NotLeaderOrFollowerError)
        assert all(wait == 0 for _, wait in log.reads)

    run(main())
