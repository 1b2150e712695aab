"""Kafka's fetch rules over the leader's reads: when to answer (``min_bytes``, ``max_wait``) and how much.

When (Kafka's ``DelayedFetch``): every partition is read at once; the answer goes out then if ``max_wait`` is 0,
if any partition failed, or if ``min_bytes`` are there. Otherwise each empty partition long-polls (the leader
replica wakes it when its high watermark moves) until the bytes read reach ``min_bytes`` or ``max_wait`` ends;
partitions that got nothing are read once more at the end so each carries its current offsets.

How much (KIP-74): partitions are filled in request order, each up to its ``partition_max_bytes`` and the
response up to ``max_bytes``, in whole batches; the first partition with data keeps at least its first batch
even when that is larger, so a consumer can never be stuck behind one big batch. Later partitions that no longer
fit come back empty, with their offsets.

Reads run concurrently. Records stay bytes: only batch headers are looked at, to cut at a batch boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

from broker.kafka.partitions import PartitionRead
from odradek.protocol.errors import OdradekError, UnknownServerError
from odradek.protocol.records import LOG_OVERHEAD, iter_batch_headers


class Reader(Protocol):
    """A leader's read of one partition (``LeaderPartitions.read``)."""

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int, *,
                   committed: bool, current_leader_epoch: int = -1) -> PartitionRead: ...


@dataclass(frozen=True, slots=True)
class FetchWant:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    want: FetchWant
    read: PartitionRead | None  # None when ``error`` is set
    error: OdradekError | None = None


async def fetch(leaders: Reader, wants: list[FetchWant], *, max_wait_ms: int, min_bytes: int,
                max_bytes: int, committed: bool) -> list[FetchAnswer]:
    """One answer per want, in the same order (see the module docstring)."""
    answers = list(await asyncio.gather(*(_read(leaders, w, 0, committed) for w in wants)))
    if max_wait_ms > 0 and wants and not _complete(answers, min_bytes):
        await _wait(leaders, wants, answers, max_wait_ms, min_bytes, committed)
        # Partitions that got nothing: their offsets as they are now (no storage hop when still empty).
        empty = [i for i, a in enumerate(answers) if a.error is None and a.read is not None and not a.read.data]
        again = await asyncio.gather(*(_read(leaders, wants[i], 0, committed) for i in empty))
        for i, answer in zip(empty, again, strict=True):
            answers[i] = answer
    return _within_limits(answers, max_bytes)


def _complete(answers: list[FetchAnswer], min_bytes: int) -> bool:
    return any(a.error is not None for a in answers) or _bytes(answers) >= max(min_bytes, 1)


def _bytes(answers: list[FetchAnswer]) -> int:
    return sum(len(a.read.data) for a in answers if a.read is not None)


async def _wait(leaders: Reader, wants: list[FetchWant], answers: list[FetchAnswer], max_wait_ms: int,
                min_bytes: int, committed: bool) -> None:
    """Long-poll the empty partitions until ``min_bytes`` are read, a read fails, or ``max_wait_ms`` ends;
    ``answers`` is updated in place with every read that returned."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    polls: dict[asyncio.Task[FetchAnswer], int] = {}

    def poll(i: int) -> None:
        wait_ms = int((deadline - loop.time()) * 1000)
        if wait_ms > 0:
            polls[asyncio.create_task(_read(leaders, wants[i], wait_ms, committed))] = i

    try:
        for i, a in enumerate(answers):
            if a.read is not None and not a.read.data:
                poll(i)
        while polls and not _complete(answers, min_bytes):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait(polls, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = polls.pop(task)
                answers[i] = task.result()
                if answers[i].read is not None and not answers[i].read.data:
                    poll(i)  # woken by a move that did not reach this offset: wait again
    finally:
        for task in polls:
            task.cancel()
        for task in polls:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _read(leaders: Reader, want: FetchWant, wait_ms: int, committed: bool) -> FetchAnswer:
    try:
        read = await leaders.read(want.topic, want.partition, want.offset, want.max_bytes, wait_ms,
                                  committed=committed, current_leader_epoch=want.current_leader_epoch)
    except OdradekError as e:
        return FetchAnswer(want, None, e)
    except Exception as e:  # a storage fault: this partition's error, not the whole connection's
        return FetchAnswer(want, None, UnknownServerError(f"reading {want.topic}-{want.partition} failed: {e}"))
    return FetchAnswer(want, read)


def _within_limits(answers: list[FetchAnswer], max_bytes: int) -> list[FetchAnswer]:
    budget = max_bytes
    first = True
    out: list[FetchAnswer] = []
    for a in answers:
        if a.read is None or not a.read.data:
            out.append(a)
            continue
        limit = min(a.want.max_bytes, budget)
        data = _whole_batches(a.read.data, limit, at_least_one=first)
        first = first and not data
        budget -= len(data)
        out.append(a if len(data) == len(a.read.data) else FetchAnswer(
            a.want, PartitionRead(data, a.read.high_watermark, a.read.last_stable_offset, a.read.log_start_offset,
                                  a.read.aborted)))
    return out


def _whole_batches(data: bytes, limit: int, *, at_least_one: bool) -> bytes:
    """The longest prefix of whole batches within ``limit`` bytes (the first batch anyway if ``at_least_one``)."""
    if len(data) <= limit:
        return data
    end = 0
    for pos, h in iter_batch_headers(data):
        size = h.batch_length + LOG_OVERHEAD
        if pos + size > limit and not (at_least_one and pos == 0):
            break
        end = pos + size
    return data[:end]
