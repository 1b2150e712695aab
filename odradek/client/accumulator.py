"""The producer's record accumulator: per-partition queues of batches, and the rules for when one is sent.

Kept free of threads, clocks and I/O (the caller passes ``now`` and holds the lock) so the batching rules, which
decide throughput and ordering, are unit-tested exactly. The rules are Kafka's ``RecordAccumulator``:

* records for one partition go into its open (last) batch until ``batch_size`` bytes, then a new batch opens;
  a record larger than ``batch_size`` gets a batch of its own;
* a batch is sendable when it is closed (full, or a newer one exists), its ``linger`` has passed, or a flush or
  close is in progress; a batch being retried waits for its backoff instead of the linger;
* a partition with a request in flight is *muted*: nothing more is drained from it until the answer comes back,
  so a retried batch is never overtaken (``max.in.flight.requests.per.connection=1`` per partition);
* several sendable batches of one partition leave in one request (the binary path takes concatenated batches),
  up to ``max_request_size`` bytes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError

from odradek.client.types import Header, RecordMetadata, TopicPartition
from odradek.protocol.partitioner import DefaultPartitioner
from odradek.protocol.records import HEADER_SIZE, encode_batch

__all__ = [
    "ABORTED",
    "APPENDED",
    "APPENDED_WAKE",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordTuple",
    "append_keyless",
    "estimate_size",
]

RecordTuple = tuple[bytes | None, bytes | None, int, tuple[Header, ...]]

APPENDED = 0  # went into the open batch; nothing changed for the sender
APPENDED_WAKE = 1  # opened a batch or filled one: the sender's next deadline moved
ABORTED = 2  # would have opened a new batch and the caller asked not to (sticky partitioning picks again)

# Upper bound of a record's framing in a v2 batch (length, attributes, timestamp and offset deltas, key and
# value lengths, header count), so that estimated sizes never undershoot for ordinary records.
RECORD_OVERHEAD = 21


def estimate_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Bytes a record adds to an uncompressed batch, slightly pessimistic (Kafka's ``estimateSizeInBytes``)."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for h_key, h_value in headers:
        size += 10 + len(h_key.encode()) + (len(h_value) if h_value else 0)
    return size


class ProducerBatch:
    """The records of one partition that travel as one v2 record batch, with their futures."""

    __slots__ = (
        "attempts",
        "closed",
        "created",
        "deadline",
        "done",
        "encoded",
        "futures",
        "partition",
        "records",
        "retry_at",
        "sequence",
        "size",
        "topic",
        "tp",
    )

    def __init__(self, tp: TopicPartition, now: float, delivery_timeout: float) -> None:
        self.tp = tp
        self.topic, self.partition = tp
        self.records: list[RecordTuple] = []
        self.futures: list[Future[RecordMetadata]] = []
        self.size = HEADER_SIZE
        self.created = now
        self.deadline = now + delivery_timeout
        self.attempts = 0
        self.retry_at = 0.0
        self.closed = False
        self.encoded: bytes | None = None
        self.sequence = -1  # the batch's base sequence (idempotent producer), fixed at its first send
        self.done = threading.Event()

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {len(self.records)} records, {self.size} B)"

    def encode(self, compression: int, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False) -> bytes:
        """The wire bytes, built once: a retry resends exactly the same batch (same producer id, epoch and
        sequence, which is how the leader recognises it as a duplicate)."""
        if self.encoded is None:
            self.sequence = base_sequence
            self.encoded = encode_batch(self.records, compression=compression, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                                        is_transactional=transactional)
        return self.encoded

    def complete(self, base_offset: int, log_append_time: int | None = None) -> None:
        """Resolve every future; ``base_offset < 0`` (acks=0) gives offsets of -1."""
        topic, partition = self.tp
        records = self.records
        for i, fut in enumerate(self.futures):
            offset = base_offset + i if base_offset >= 0 else -1
            ts = records[i][2] if log_append_time is None else log_append_time
            try:
                fut.set_result(RecordMetadata(topic, partition, offset, ts))
            except InvalidStateError:  # the caller cancelled it; the record was sent anyway
                continue
        self.done.set()

    def fail(self, exc: BaseException) -> None:
        for fut in self.futures:
            try:
                fut.set_exception(exc)
            except InvalidStateError:
                continue
        self.done.set()


Drained = tuple[TopicPartition, str, list[ProducerBatch]]


class RecordAccumulator:
    """Per-partition batch queues. Not thread-safe: the producer guards it with its one lock."""

    def __init__(
        self,
        batch_size: int = 16384,
        linger_ms: float = 5,
        delivery_timeout_ms: float = 120_000,
        max_request_size: int = 1 << 20,
        max_batches_per_request: int | None = None,
    ) -> None:
        # An idempotent producer sends at most as many batches per partition and request as the leader remembers
        # per producer (5): a request retried after its append succeeded is then recognised whole as duplicates.
        self.max_batches_per_request = max_batches_per_request
        self.batch_size = batch_size
        self.linger = linger_ms / 1000.0
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.max_request_size = max_request_size
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._muted: set[TopicPartition] = set()
        self._incomplete: set[ProducerBatch] = set()
        self._leaderless: set[TopicPartition] = set()  # as of the last drain
        self._flushes = 0
        self.closing = False

    # ---------------------------------------------------------------------------------------------- appending

    def append(
        self,
        tp: TopicPartition,
        record: RecordTuple,
        future: Future[RecordMetadata],
        size: int,
        now: float,
        abort_on_new_batch: bool = False,
    ) -> int:
        """Add one record to ``tp``'s open batch (or a new one); returns APPENDED, APPENDED_WAKE or ABORTED."""
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        elif dq:
            last = dq[-1]
            if not last.closed:
                if last.size + size <= self.batch_size or not last.records:
                    last.records.append(record)
                    last.futures.append(future)
                    last.size += size
                    if last.size >= self.batch_size:
                        last.closed = True
                        return APPENDED_WAKE
                    return APPENDED
                last.closed = True  # cannot take this record: it is as good as full
        if abort_on_new_batch:
            return ABORTED
        batch = ProducerBatch(tp, now, self.delivery_timeout)
        batch.records.append(record)
        batch.futures.append(future)
        batch.size += size
        if batch.size >= self.batch_size:
            batch.closed = True
        dq.append(batch)
        self._incomplete.add(batch)
        return APPENDED_WAKE

    # ----------------------------------------------------------------------------------------------- draining

    def _sendable(self, batch: ProducerBatch, now: float) -> bool:
        if batch.attempts:
            return now >= batch.retry_at
        return batch.closed or self._flushes > 0 or self.closing or now - batch.created >= self.linger

    def drain(
        self, now: float, leader_of: Callable[[TopicPartition], str | None]
    ) -> tuple[list[Drained], bool]:
        """Take every sendable batch of every unmuted partition whose leader is known, and mute those partitions.

        Returns ``(requests, leaderless)``: one ``(tp, leader_url, batches)`` per partition, and whether some
        sendable partition had no known leader (the caller should refresh metadata).
        """
        out: list[Drained] = []
        leaderless = self._leaderless
        leaderless.clear()
        empty: list[TopicPartition] = []
        for tp, dq in self._queues.items():
            if not dq:
                if tp not in self._muted:
                    empty.append(tp)
                continue
            if tp in self._muted or not self._sendable(dq[0], now):
                continue
            url = leader_of(tp)
            if url is None:
                leaderless.add(tp)
                continue
            batches: list[ProducerBatch] = []
            total = 0
            while dq:
                batch = dq[0]
                if batches and (total + batch.size > self.max_request_size or not self._sendable(batch, now)
                                or len(batches) == self.max_batches_per_request):
                    break
                dq.popleft()
                batch.closed = True
                batches.append(batch)
                total += batch.size
            self._muted.add(tp)
            out.append((tp, url, batches))
        for tp in empty:
            del self._queues[tp]
        return out, bool(leaderless)

    def next_deadline(self, now: float) -> float | None:
        """Seconds until some queued batch becomes sendable or expires (None: nothing queued, sleep until told).

        Partitions that had no leader at the last drain count only by their expiry: the caller retries them
        after its metadata backoff, not in a busy loop.
        """
        best: float | None = None
        for tp, dq in self._queues.items():
            if not dq:
                continue
            first = dq[0]
            if tp in self._muted or tp in self._leaderless:
                at = first.deadline
            elif first.attempts:
                at = min(first.retry_at, first.deadline)
            elif first.closed or self._flushes or self.closing:
                return 0.0
            else:
                at = min(first.created + self.linger, first.deadline)
            if best is None or at < best:
                best = at
        return None if best is None else max(0.0, best - now)

    # ---------------------------------------------------------------------------------------------- outcomes

    def requeue(self, tp: TopicPartition, batches: list[ProducerBatch], retry_at: float) -> None:
        """Put a failed request's batches back at the head of their queue, in order, and unmute the partition."""
        dq = self._queues.get(tp)
        if dq is None:
            dq = self._queues[tp] = deque()
        for batch in reversed(batches):
            batch.attempts += 1
            batch.retry_at = retry_at
            dq.appendleft(batch)
        self._muted.discard(tp)

    def finish(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        """The request is over for good (success or final failure): forget its batches, unmute the partition."""
        for batch in batches:
            self._incomplete.discard(batch)
        self._muted.discard(tp)

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove queued (not in-flight) batches past their delivery timeout; the caller fails them."""
        expired: list[ProducerBatch] = []
        for dq in self._queues.values():
            while dq and dq[0].deadline <= now:
                batch = dq.popleft()
                self._incomplete.discard(batch)
                expired.append(batch)
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (a forced close); in-flight ones finish on their own."""
        aborted: list[ProducerBatch] = []
        for dq in self._queues.values():
            while dq:
                batch = dq.popleft()
                self._incomplete.discard(batch)
                aborted.append(batch)
        return aborted

    # ------------------------------------------------------------------------------------------------- flush

    def begin_flush(self) -> list[ProducerBatch]:
        """Make every batch sendable now; returns the batches the flush must wait for."""
        self._flushes += 1
        return list(self._incomplete)

    def end_flush(self) -> None:
        self._flushes -= 1

    @property
    def incomplete(self) -> int:
        """Batches not yet acknowledged or failed (queued or in flight)."""
        return len(self._incomplete)

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The queued batches of one partition, oldest first (for tests and introspection)."""
        return list(self._queues.get(tp, ()))

    def is_muted(self, tp: TopicPartition) -> bool:
        return tp in self._muted


def append_keyless(
    acc: RecordAccumulator,
    partitioner: DefaultPartitioner,
    topic: str,
    num_partitions: int,
    available: Sequence[int],
    record: RecordTuple,
    future: Future[RecordMetadata],
    size: int,
    now: float,
) -> int:
    """KIP-480 in two steps: try the sticky partition's open batch; if the record would open a new batch there,
    move the topic's sticky partition on first and append there instead. Caller holds the producer's lock.
    """
    part = partitioner.partition(topic, None, num_partitions, available)
    res = acc.append(TopicPartition(topic, part), record, future, size, now, True)
    if res != ABORTED:
        return res
    part = partitioner.on_new_batch(topic, num_partitions, available, part)
    acc.append(TopicPartition(topic, part), record, future, size, now)
    return APPENDED_WAKE  # the batch that could not take the record is closed: the sender should look
