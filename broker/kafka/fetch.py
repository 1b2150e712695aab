"""Kafka's fetch rules over the fetch service's leader-only reads: when to answer (``min_bytes``, ``max_wait``) and
how much.

When (Kafka's ``DelayedFetch``): every partition is read at once; the answer goes out then if ``max_wait`` is 0,
if any partition failed, or if ``min_bytes`` are there. Otherwise each empty partition long-polls (the leader
replica wakes it when its high watermark moves) until the bytes read reach ``min_bytes`` or ``max_wait`` ends;
partitions that got nothing are read once more at the end so each carries its current offsets.

How much (KIP-74): partitions are filled in request order, each up to its ``partition_max_bytes`` and the
response up to ``max_bytes``, in whole batches; the first partition with data keeps at least its first batch
even when that is larger, so a consumer can never be stuck behind one big batch. Later partitions that no longer
fit come back empty, with their offsets.

Reads run concurrently, each through :meth:`FetchService.fetch <broker.fetch.service.FetchService.fetch>` (the
leader's replica, the client's leader epoch checked). Records are never decoded: only batch headers are looked
at, to cut at a batch boundary.

Zero copy (``zero_copy``, the connection can ``sendfile``): a read may come back as file ranges (the fetch
service's ``FileRecords``: duplicated segment descriptors) instead of bytes; small reads, and read_committed ones
with an aborted transaction's batches to drop, stay bytes. The limits cut ranges exactly as they cut bytes
(``FileRecords.cut``), so the answer's bytes are the same either way. Invariant: every descriptor a read opened
is either in the answers returned (the caller's to close, broker/kafka/apis.py) or closed here: a range cut to
nothing, a read superseded while waiting, and every read of a fetch that fails or is cancelled.

A replica's fetch (``FetchWant.replica`` set) takes the same path to the follower-fetch service
(broker/replication/follower_fetch.py), which decides everything of it: who may fetch (assigned, registered,
the broker epoch ZooKeeper holds, the leader epoch), the replication quota, reading up to the log end (no
isolation level), and the fetch offset as the follower's acknowledgement. So the first read of every partition,
all at once and before any wait, acknowledges each of them: the high watermark moves then, and an acks=all
produce the follower's last fetch completed is answered without waiting for this fetch's end. The wait is
Kafka's ``DelayedFetch`` for a follower: it ends on bytes (counted up to the log end, so the first append to any
of the partitions ends it when ``min_bytes`` is 1, as followers send), on an error, or at ``max_wait``; a moved
high watermark or log start offset does not end it (nor does it in Kafka): the follower learns them with its next
answer, one round later, which costs it nothing (its high watermark only bounds what it would serve as leader,
and a new leader's catches up on its followers' first fetches). A replica's fetch waits with one waiter on all
of its empty partitions (``Reader.wait_for_appends``: resolved by the first append or role change among them),
not a long-poll task per partition, then looks again only at the partitions appended to (or whose leadership
changed); each look records the same acknowledgement again, which changes nothing. Its reads run one after the
other (see ``_read_all``).

A follower's incremental round leaves out the partitions its session holds quiet (broker/fetch/sessions.py), so
it may have no partition to read at all; it waits all the same, and a quiet partition that changes meanwhile joins
it (:class:`Joining`): looked at once, then waited on with the others, its answer after theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.fetch.service import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchRequest,
    FileRecords,
    PartitionData,
    ReplicaFetch,
)
from broker.fetch.sessions import SessionEntry
from odradek.protocol.errors import OdradekError, UnknownServerError
from odradek.protocol.records import LOG_OVERHEAD, iter_batch_headers


class Reader(Protocol):
    """A leader's read of one partition, and a replica fetch's one wait on many (``FetchService`` is one)."""

    async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData: ...

    async def wait_for_appends(self, partitions: Sequence[tuple[str, int, int]], timeout_s: float,
                               waiter: asyncio.Future[None] | None = None) -> list[int]: ...

    def fetch_if_quiet(self, topic: str, partition: int, offset: int, replica: ReplicaFetch,
                       mark: SessionEntry | None = None) -> PartitionData | None: ...

    async def acknowledge_at_log_end(self, topic: str, partition: int, offset: int,
                                     replica: ReplicaFetch) -> PartitionData | None: ...


class Joining(Protocol):
    """The partitions a follower's round left out as quiet, joining it when they change while it waits."""

    def arm(self, waiter: asyncio.Future[None]) -> None: ...

    def disarm(self, waiter: asyncio.Future[None]) -> None: ...

    def take(self) -> list[FetchWant]: ...


@dataclass(frozen=True, slots=True)
class FetchWant:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    replica: ReplicaFetch | None = None  # a follower's fetch: who fetches (see the module docstring)
    mark: SessionEntry | None = None  # a follower's session entry, marked if the look finds the partition quiet


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    want: FetchWant
    read: PartitionData | None  # bytes, or file ranges for a zero-copy fetch; None when ``error`` is set
    error: OdradekError | None = None

    @property
    def size(self) -> int:
        return 0 if self.read is None else self.read.size

    def close(self) -> None:
        """Release the read's file ranges, if it holds any (idempotent)."""
        if self.read is not None:
            self.read.close()


def close_all(answers: Sequence[FetchAnswer]) -> None:
    """Release every answer's file ranges (an answer dropped unsent)."""
    for a in answers:
        a.close()


async def fetch(reader: Reader, wants: list[FetchWant], *, max_wait_ms: int, min_bytes: int,
                max_bytes: int, committed: bool, zero_copy: bool = False,
                joining: Joining | None = None) -> list[FetchAnswer]:
    """One answer per want, in the same order (see the module docstring). ``zero_copy``: reads may be file
    ranges, which the caller closes once the answer is sent or dropped. ``joining``: a follower's round that
    left quiet partitions out; those that join it are appended to ``wants`` (and their answers after the others)."""
    answers: list[FetchAnswer] = []
    try:
        answers = await _read_all(reader, wants, committed, zero_copy)
        replica = joining is not None or (bool(wants) and wants[0].replica is not None)
        if max_wait_ms > 0 and replica and not _complete(answers, min_bytes):
            await _wait_replica(reader, wants, answers, max_wait_ms, min_bytes, zero_copy, joining)
        elif max_wait_ms > 0 and wants and not _complete(answers, min_bytes):
            await _wait(reader, wants, answers, max_wait_ms, min_bytes, committed, zero_copy)
            # Partitions that got nothing: their offsets as they are now (no storage hop when still empty).
            empty = [i for i, a in enumerate(answers) if a.error is None and not a.size]
            again = await _read_all(reader, [wants[i] for i in empty], committed, zero_copy)
            for i, answer in zip(empty, again, strict=True):
                answers[i].close()  # empty: holds nothing, but the rule is the rule
                answers[i] = answer
    except BaseException:
        close_all(answers)
        raise
    return _within_limits(answers, max_bytes)


async def _read_all(reader: Reader, wants: list[FetchWant], committed: bool, zero_copy: bool) -> list[FetchAnswer]:
    """One look at each partition. A replica's reads one after the other: they are at the log end (nothing to
    read, answered without suspending) or just behind it (bytes in the page cache), so a task each would cost
    more than it overlaps; and a partition with nothing to say to the follower (``Reader.fetch_if_quiet``, most
    of a session's partitions on most rounds), or only an acknowledgement to record at the log end
    (``Reader.acknowledge_at_log_end``, the first look of most rounds under acks=all), is answered without the
    read path. A consumer's concurrently: its
    reads may go to the disk, and overlap there. If this fails or is cancelled, the reads that did return are
    closed."""
    if wants and wants[0].replica is not None:
        answers: list[FetchAnswer] = []
        quiet, acknowledge = reader.fetch_if_quiet, reader.acknowledge_at_log_end
        try:
            for w in wants:
                assert w.replica is not None
                data = quiet(w.topic, w.partition, w.offset, w.replica, w.mark)
                if data is None:
                    data = await acknowledge(w.topic, w.partition, w.offset, w.replica)
                answers.append(await _read(reader, w, 0, committed, zero_copy) if data is None
                               else FetchAnswer(w, data))
        except BaseException:
            close_all(answers)
            raise
        return answers
    tasks = [asyncio.ensure_future(_read(reader, w, 0, committed, zero_copy)) for w in wants]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                (await task).close()
        raise


def _complete(answers: list[FetchAnswer], min_bytes: int) -> bool:
    return any(a.error is not None for a in answers) or sum(a.size for a in answers) >= max(min_bytes, 1)


async def _wait_replica(reader: Reader, wants: list[FetchWant], answers: list[FetchAnswer], max_wait_ms: int,
                        min_bytes: int, zero_copy: bool, joining: Joining | None) -> None:
    """A replica's wait: one waiter on all its empty partitions (``Reader.wait_for_appends``), then another
    look at those it names (appended to, or their leadership changed), until ``min_bytes`` are read, a read
    fails, or ``max_wait_ms`` ends; ``answers`` is updated in place. A partition nothing happened to keeps its
    first look's answer (no records, its offsets as of the fetch's start: the follower learns a newer high
    watermark from its next fetch, one round later, as it would in Kafka). Partitions ``joining`` the round are
    looked at as they come, and waited on after that as the others."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    while not _complete(answers, min_bytes):
        joined = joining.take() if joining is not None else []
        if joined:
            answers.extend(await _read_all(reader, joined, False, zero_copy))
            wants.extend(joined)
            continue
        remaining = deadline - loop.time()
        empty = [i for i, a in enumerate(answers) if a.read is not None and not a.size]
        if remaining <= 0 or (not empty and joining is None):
            return
        # Woken by records past the log end each read saw (not past the fetch offset: a throttled partition
        # answered empty below its log end must not wake the wait at once, again and again), or a partition
        # joining.
        waits = [(wants[i].topic, wants[i].partition, _log_end(answers[i])) for i in empty]
        if joining is None:
            moved = await reader.wait_for_appends(waits, remaining)
        else:
            waiter: asyncio.Future[None] = loop.create_future()
            joining.arm(waiter)
            try:
                moved = await reader.wait_for_appends(waits, remaining, waiter)
            finally:
                joining.disarm(waiter)
        look = [empty[j] for j in moved]
        again = await _read_all(reader, [wants[i] for i in look], False, zero_copy)
        for i, answer in zip(look, again, strict=True):
            answers[i].close()
            answers[i] = answer


def _log_end(answer: FetchAnswer) -> int:
    assert answer.read is not None
    return answer.read.log_end_offset


async def _wait(reader: Reader, wants: list[FetchWant], answers: list[FetchAnswer], max_wait_ms: int,
                min_bytes: int, committed: bool, zero_copy: bool) -> None:
    """Long-poll the empty partitions until ``min_bytes`` are read, a read fails, or ``max_wait_ms`` ends;
    ``answers`` is updated in place with every read that returned. A poll that returned but was not taken (the
    wait ended first) is closed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    polls: dict[asyncio.Task[FetchAnswer], int] = {}

    def poll(i: int) -> None:
        wait_ms = int((deadline - loop.time()) * 1000)
        if wait_ms > 0:
            polls[asyncio.create_task(_read(reader, wants[i], wait_ms, committed, zero_copy))] = i

    try:
        for i, a in enumerate(answers):
            if a.read is not None and not a.size:
                poll(i)
        while polls and not _complete(answers, min_bytes):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait(polls, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = polls.pop(task)
                answers[i].close()
                answers[i] = task.result()
                if answers[i].read is not None and not answers[i].size:
                    poll(i)  # woken by a move that did not reach this offset: wait again
    finally:
        for task in polls:
            task.cancel()
        for task in polls:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                (await task).close()


async def _read(reader: Reader, want: FetchWant, wait_ms: int, committed: bool, zero_copy: bool) -> FetchAnswer:
    """One partition's read: ``wait_ms`` bounds both the wait for an active leadership here and the long-poll at
    the end of the log (0: one look)."""
    try:
        read = await reader.fetch(FetchRequest(
            want.topic, want.partition, want.offset, want.max_bytes, max_wait_ms=wait_ms,
            isolation_level=READ_COMMITTED if committed and want.replica is None else READ_UNCOMMITTED,
            min_bytes=1 if wait_ms > 0 else 0, current_leader_epoch=want.current_leader_epoch, replica=want.replica),
            zero_copy=zero_copy)
    except OdradekError as e:
        return FetchAnswer(want, None, e)
    except Exception as e:  # a storage fault: this partition's error, not the whole connection's
        return FetchAnswer(want, None, UnknownServerError(f"reading {want.topic}-{want.partition} failed: {e}"))
    if not zero_copy and not isinstance(read.records, bytes | bytearray):  # not asked for: none to hold open
        read.close()
        return FetchAnswer(want, None, UnknownServerError(f"reading {want.topic}-{want.partition} gave file ranges"))
    return FetchAnswer(want, read)


def _within_limits(answers: list[FetchAnswer], max_bytes: int) -> list[FetchAnswer]:
    """The answers cut to the limits (see "How much" in the module docstring); owns ``answers``: on an error
    (a header that cannot be read), every answer, cut or not, is closed."""
    out: list[FetchAnswer] = []
    try:
        _cut_all(answers, max_bytes, out)
    except BaseException:
        close_all(out)
        close_all(answers[len(out):])  # a cut that failed consumed nothing
        raise
    return out


def _cut_all(answers: list[FetchAnswer], max_bytes: int, out: list[FetchAnswer]) -> None:
    budget = max_bytes
    first = True
    for a in answers:
        if a.read is None or not a.size:
            out.append(a)
            continue
        records = a.read.records
        limit = min(a.want.max_bytes, budget)
        data: bytes | bytearray | FileRecords
        if isinstance(records, bytes | bytearray):
            data = _whole_batches(records, limit, at_least_one=first)
            size = len(data)
        else:  # file ranges: the same cut (consumes ``records``; an empty cut holds no descriptor)
            cut = records.cut(limit, at_least_one=first)
            size = cut.size
            data = cut if size else b""
        first = first and not size
        budget -= size
        out.append(a if data is records else FetchAnswer(a.want, dataclasses.replace(a.read, records=data)))


def _whole_batches(data: bytes | bytearray, limit: int, *, at_least_one: bool) -> bytes | bytearray:
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
