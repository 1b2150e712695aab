"""Produce as a service: partition records, encode one batch per partition, append locally or forward.

Why here and not in the HTTP layer: the REST-proxy JSON produce takes records for many partitions in one
request; choosing partitions (Kafka's default partitioner), encoding batches, and going to each partition's
leader is broker work. The HTTP handler only parses the body and renders the per-record results.

Each partition's batch goes where :class:`~broker.produce.routing.LeaderRouter` says: appended here when this
broker's leadership is active, forwarded to the leader otherwise. While no leader is known yet, or ours is not
active yet, or the leader answers that leadership moved, it waits for the metadata to change and tries again,
all within the request's ``timeout_ms`` (as the embedded producer of Confluent's REST Proxy retries), so a
produce right after a topic creation succeeds instead of failing per record.

A client's own encoded batches (the binary path, ``append_batches``) are leader-only: they are checked as Kafka's
LogValidator checks them (a refused batch leaves no trace) and appended here, or refused naming the leader.

It resends only when the first attempt certainly wrote nothing (``retry_is_safe``): a REST produce carries no
producer id or sequence, so a resend after an append that did happen is a second copy the client never asked
for (an acks=all wait that loses its leadership after the append is such a case: a broker-side resend would
duplicate values of a REST producer that never retried). An ambiguous failure goes back to the client as a
retriable per-record error instead; the client decides, and an ``Idempotency-Key`` makes its retry (and ours)
safe.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from broker.interbroker import InterBrokerClient
from broker.produce import forwarding as forward
from broker.produce.routing import (
    LeaderRouter,
    MetadataChanged,
    Remote,
    TopicLookup,
    deadline_after,
    remaining_ms,
)
from broker.produce.txn_verification import TxnVerifier, verify_transactional
from broker.replication.partition import POSSIBLY_APPENDED
from broker.replication.replica_manager import ReplicaManager
from odradek.protocol import speedups
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    InvalidRequestError,
    InvalidTimestampError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OdradekError,
    UnknownPartitionError,
)
from odradek.protocol.partitioner import to_positive
from odradek.protocol.records import COMPRESSION_MASK, iter_batch_headers
from odradek.protocol.speedups import RawTexts, encode_batch, validate_client_batches

Row = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]  # key, value, timestamp, headers

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}
ACKS_PARAM = {0: "0", 1: "1", -1: "all"}  # the binary path's query value for each acks level

INT64_MAX = 2**63 - 1
INLINE_VALIDATE_BYTES = 256 * 1024  # about 0.2 ms of the compiled check: less than a thread hop costs
_ASCII_INT = re.compile(r"-?[0-9]{1,19}")


def parse_acks(raw: str | None) -> int:
    acks = ACKS.get((raw or "all").lower())
    if acks is None:
        raise InvalidRequestError(f"acks must be 0, 1 or all, not {raw!r}")
    return acks


def retry_is_safe(exc: OdradekError, *, idempotent: bool = False) -> bool:
    """Whether the broker may resend a produce that failed with ``exc`` without risking a second copy.

    Safe: LEADER_NOT_AVAILABLE (routing's own answer, here or at the leader, before any append); a
    NOT_LEADER_OR_FOLLOWER raised before appending (the leader's role check, or a forward that reached a broker
    which no longer leads); a forward whose connection could not even be opened (``sent=False``: nothing was
    sent). Everything else is ambiguous or final: a NOT_LEADER_OR_FOLLOWER after the append (``possibly_appended``:
    an acks=all wait that lost leadership), NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout, a connection that
    broke after the request went out. ``idempotent`` (an Idempotency-Key): the leader recognises a resent
    request, so any leadership change may be waited out and retried.
    """
    if isinstance(exc, LeaderNotAvailableError):
        return True
    if isinstance(exc, NotLeaderOrFollowerError):
        return idempotent or not exc.details.get(POSSIBLY_APPENDED)
    if isinstance(exc, BrokerNotAvailableError):
        return exc.details.get("sent") is False
    return False


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    base_offset: int | None
    leader: int | None
    error: OdradekError | None = None


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one client batch may hold besides the topic's max.message.bytes (BrokerConfig's
    max_records_per_batch and max_decompressed_batch_bytes; the defaults are BrokerConfig's)."""

    max_records_per_batch: int = 100_000
    max_decompressed_batch_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AppendedBatches:
    """A client's batches, appended by this broker's leader replica (Kafka's PartitionResponse). ``batch_offsets``:
    each batch's base offset, when an idempotent retry was answered partly from the producer's state.
    ``log_start_offset``: the partition's log start offset once the append was acknowledged (Produce v5+ carries
    it, so a producer learns of deleted records; -1: not known)."""

    base_offset: int
    last_offset: int
    record_count: int
    log_append_time: int | None  # the broker's time stamped on the batches, when LogAppendTime is in force
    leader: int
    leader_epoch: int
    batch_offsets: tuple[int, ...] | None = None
    log_start_offset: int = -1


class ProduceService:
    def __init__(self, replicas: ReplicaManager, session: InterBrokerClient, *,
                 metadata_changed: MetadataChanged | None = None, lookup_topic: TopicLookup | None = None,
                 router: LeaderRouter | None = None, batch_limits: BatchLimits | None = None) -> None:
        """``metadata_changed`` is the metadata watcher's change signal (without it waits poll); ``lookup_topic``
        asks ZooKeeper about a topic this broker has not heard of yet (without it, unknown topics fail at once);
        ``router``: the broker's leader router, shared with its other services (built from the two above when
        not given); ``batch_limits``: the broker's limits on a client's batches."""
        self._replicas = replicas
        self._session = session
        self.router = router or LeaderRouter(replicas, metadata_changed or asyncio.sleep, lookup_topic)
        self._limits = batch_limits or BatchLimits()
        self._round_robin: dict[str, itertools.count[int]] = {}

    def choose_partitions(self, topic: str, rows: Sequence[Row], named: Sequence[int | None] | None,
                          fixed: int | None, seed: str | None = None) -> list[int]:
        """Each record's partition: the path's, else the one it names, else Kafka's default partitioner.

        With ``seed`` (an idempotency key) keyless records start from a partition the seed picks, so a retry
        of the same request lands on the same partitions (where the key is remembered).
        """
        count = self._replicas.cache.partition_count(topic)
        if count == 0:
            self._replicas.partition_info(topic, 0)  # raises UNKNOWN_TOPIC with the right message
        if fixed is not None:
            self._check_partition(topic, fixed, count)
            return [fixed] * len(rows)
        counter = (itertools.count(to_positive(speedups.murmur2(seed.encode()))) if seed is not None
                   else self._round_robin.setdefault(topic, itertools.count(random.randrange(1 << 16))))
        chosen = [
            to_positive(speedups.murmur2(key)) % count if key is not None else next(counter) % count
            for key, _value, _ts, _headers in rows
        ]
        if named is not None:
            for i, partition in enumerate(named):
                if partition is not None:
                    self._check_partition(topic, partition, count)
                    chosen[i] = partition
        return chosen

    async def await_topic(self, topic: str, deadline: float) -> None:
        """Return once this broker knows ``topic``, waiting (until ``deadline``, loop time) only when ZooKeeper
        knows it; UNKNOWN_TOPIC otherwise (a produce to a missing topic fails at once)."""
        await self.router.await_topic(topic, deadline)

    def timestamp_diff_ms(self, topic: str) -> int:
        """The topic's message.timestamp.difference.max.ms (Kafka's default: Long.MAX_VALUE, i.e. no check)."""
        raw = self._replicas.cache.configs.get(topic, {}).get("message.timestamp.difference.max.ms")
        value = _non_negative(raw) if raw is not None else None
        return INT64_MAX if value is None else value

    def check_timestamps(self, topic: str, rows: Sequence[Row]) -> None:
        """Explicit record timestamps against the topic's message.timestamp.difference.max.ms, before anything
        is written (records without one get the broker's time, always within it)."""
        max_diff_ms = self.timestamp_diff_ms(topic)
        if max_diff_ms >= INT64_MAX:
            return
        now_ms = int(time.time() * 1000)
        for i, row in enumerate(rows):
            ts = row[2]
            if ts is not None and abs(ts - now_ms) > max_diff_ms:
                raise InvalidTimestampError(
                    f"records[{i}].timestamp {ts} is more than {max_diff_ms} ms from the broker's time {now_ms} "
                    "(message.timestamp.difference.max.ms)")

    async def append_batches(self, topic: str, partition: int, data: bytearray, acks: int, timeout_ms: int,
                             idempotency_key: str | None = None, *,
                             verify_txn: TxnVerifier | None = None) -> AppendedBatches:
        """A client's encoded batches, appended by this broker's leader replica (leader-only: waits, until
        ``timeout_ms``, while this broker is becoming leader; NOT_LEADER_OR_FOLLOWER naming the leader when
        another broker leads). Checked first as Kafka's LogValidator (sizes, record counts, decompressed size,
        timestamps, CRCs): a refused batch leaves no trace. The check runs on the event loop when it is cheaper
        than a thread hop (small, uncompressed, compiled), else in a thread.

        ``verify_txn`` (KIP-890's verification; both doors pass it with the request's transactional id):
        asked before a transactional batch whose producer has no transaction open on this partition yet, it
        raises (INVALID_TXN_STATE, ...) unless the coordinator added the partition to that transaction, and the
        append refuses a batch whose producer's transaction ended meanwhile (a marker since the question), so a
        late or stray batch cannot open a transaction nobody will end."""
        deadline = deadline_after(timeout_ms)
        part = await self.router.await_leader(topic, partition, deadline)
        check = functools.partial(
            validate_client_batches, data, max_batch_bytes=part.log.config.max_message_bytes,
            max_records=self._limits.max_records_per_batch,
            max_decompressed_bytes=self._limits.max_decompressed_batch_bytes,
            max_timestamp_diff_ms=self.timestamp_diff_ms(topic), now_ms=int(time.time() * 1000),
            allow_transactional=True)
        if _cheap_to_validate(data):
            check()
        else:
            await asyncio.to_thread(check)
        guards = None if verify_txn is None else await verify_transactional(part, data, verify_txn)
        result = await part.append(data, acks, remaining_ms(deadline), idempotency_key, guards)
        batch_offsets = getattr(result, "batch_offsets", None)  # an idempotent retry answered partly from state
        return AppendedBatches(result.first_offset, result.last_offset, result.record_count, result.log_append_time,
                               self.router.broker_id, part.leader_epoch,
                               None if batch_offsets is None else tuple(batch_offsets), part.log_start_offset)

    @staticmethod
    def _check_partition(topic: str, partition: int, count: int) -> None:
        if partition >= count:
            raise UnknownPartitionError(f"partition {partition} of topic '{topic}' does not exist "
                                        f"(it has {count} partitions)")

    async def produce(self, topic: str, rows: Sequence[Row], partitions: Sequence[int], acks: int,
                      timeout_ms: int, deadline: float | None = None,
                      idempotency_key: str | None = None) -> dict[int, PartitionResult]:
        """One batch per partition, appended concurrently; per-partition errors are returned, not raised.

        ``deadline`` (loop time, default ``timeout_ms`` from now) bounds every wait, leader elections included.
        """
        deadline = deadline_after(timeout_ms) if deadline is None else deadline
        now_ms = int(time.time() * 1000)
        if len(set(partitions)) == 1:
            groups: dict[int, Sequence[Row]] = {partitions[0]: rows}
        else:
            grouped: dict[int, list[Row]] = {}
            for row, p in zip(rows, partitions, strict=True):
                grouped.setdefault(p, []).append(row)
            groups = dict(grouped)
        batches = {p: encode_batch(group, now_ms=now_ms) for p, group in groups.items()}
        return await self.produce_encoded(topic, batches, acks, timeout_ms, deadline, idempotency_key)

    def encode_plain(self, topic: str, body: bytes, binary: bool, fixed: int | None, max_records: int,
                     max_values: int, parsed: Callable[[], tuple[list[Any], RawTexts | None] | None],
                     ) -> tuple[dict[int, bytes], list[int]] | None:
        """A REST v2 body's plain records as one batch per partition (partitioned as ``choose_partitions``
        does), by the compiled codec: first its one pass over the body's bytes (``produce_body``), else, for a
        body that pass leaves alone, ``produce_batches`` over ``parsed()`` (orjson's tree and the raw JSON
        texts; it raises the request-level errors). None when the topic is not known here yet, the path's
        partition does not exist, or a record is not plain: the caller then takes ``choose_partitions`` and
        ``produce``. ``max_records`` and ``max_values`` are the request's bounds (any body past them is left to
        ``parsed``, whose checks refuse it)."""
        count = self._replicas.cache.partition_count(topic)
        if count == 0 or (fixed is not None and fixed >= count):
            return None
        counter = self._round_robin.setdefault(topic, itertools.count(random.randrange(1 << 16)))
        target = -1 if fixed is None else fixed
        now_ms = int(time.time() * 1000)
        encoded = speedups.produce_body(body, binary, count, target, counter, now_ms, max_records, max_values)
        if encoded is not None:
            return encoded
        plain = parsed()
        return None if plain is None else speedups.produce_batches(*plain, binary, count, target, counter, now_ms)

    async def produce_encoded(self, topic: str, batches: dict[int, bytes], acks: int, timeout_ms: int,
                              deadline: float, idempotency_key: str | None = None) -> dict[int, PartitionResult]:
        """Append each partition's batch concurrently; per-partition errors are returned, not raised.

        The common case first, without a task per partition: with acks 0 or 1, each partition this broker
        leads now (an active leadership) has its append started at once (``Partition.begin_append``, one
        storage job each) and all are awaited together. A partition led elsewhere, not led yet, or whose start
        refused it takes ``append`` (forwarding, waiting out elections, its retry rules), as does one whose
        append failed in a way ``retry_is_safe`` says wrote nothing."""
        started: dict[int, asyncio.Future[Any]] = {}
        rest: list[int] = []
        if acks != -1:
            for p, data in batches.items():
                try:
                    route = self.router.route(topic, p)
                    if isinstance(route, Remote):
                        rest.append(p)
                    else:
                        started[p] = route.begin_append(bytearray(data), acks, idempotency_key)
                except OdradekError:
                    rest.append(p)
        else:
            rest = list(batches)
        outcomes: list[Any]
        if not rest and all(f.done() for f in started.values()):  # appended on the loop: no wait, no gathering
            outcomes = [_outcome(f) for f in started.values()]
        else:
            slow = [self.append(topic, p, batches[p], acks, timeout_ms, deadline, idempotency_key) for p in rest]
            outcomes = await asyncio.gather(*started.values(), *slow, return_exceptions=True)
        results: dict[int, PartitionResult] = {}
        again: list[int] = []
        for p, outcome in zip([*started, *rest], outcomes, strict=True):
            if isinstance(outcome, PartitionResult):
                results[p] = outcome
            elif isinstance(outcome, OdradekError):
                if retry_is_safe(outcome, idempotent=idempotency_key is not None):
                    again.append(p)
                else:
                    results[p] = PartitionResult(p, None, None, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results[p] = PartitionResult(p, outcome.first_offset, self.router.broker_id)
        if again:
            for r in await asyncio.gather(*(self.append(topic, p, batches[p], acks, timeout_ms, deadline,
                                                        idempotency_key) for p in again)):
                results[r.partition] = r
        return results

    async def append(self, topic: str, partition: int, data: bytes, acks: int, timeout_ms: int,
                     deadline: float | None = None, idempotency_key: str | None = None) -> PartitionResult:
        """Append here or at the leader, waiting out leader elections until the deadline; errors are returned.

        Retried only while ``retry_is_safe``: an append that may have happened is never sent twice."""
        deadline = deadline_after(timeout_ms) if deadline is None else deadline
        try:
            while True:
                route = await self.router.await_route(topic, partition, deadline)
                try:
                    if isinstance(route, Remote):
                        reply = await forward.produce_batches(self._session, route.url, topic, partition, data,
                                                              ACKS_PARAM[acks], remaining_ms(deadline),
                                                              idempotency_key)
                        return PartitionResult(partition, reply.get("base_offset"), reply.get("leader"))
                    result = await route.append(bytearray(data), acks, remaining_ms(deadline), idempotency_key)
                    return PartitionResult(partition, result.first_offset, self.router.broker_id)
                except OdradekError as e:
                    if not retry_is_safe(e, idempotent=idempotency_key is not None):
                        raise
                    if not await self.router.wait_for_change(deadline):
                        raise
        except OdradekError as e:
            return PartitionResult(partition, None, None, e)


def _cheap_to_validate(data: bytearray) -> bool:
    """Whether checking these batches on the event loop costs less than a thread hop: the compiled check, at
    most 256 KiB, no codec (a small compressed batch may inflate up to the cap)."""
    if not speedups.COMPILED or len(data) > INLINE_VALIDATE_BYTES:
        return False
    return all(not h.attributes & COMPRESSION_MASK for _, h in iter_batch_headers(data))


def _non_negative(raw: str) -> int | None:
    """A config value as an integer in ``[0, INT64_MAX]`` in ASCII digits, else None (as the API's params)."""
    if not _ASCII_INT.fullmatch(raw):
        return None
    value = int(raw)
    return value if 0 <= value <= INT64_MAX else None


def _outcome(done: asyncio.Future[Any]) -> Any:
    """A done future's result, or its exception (as ``gather(return_exceptions=True)`` gives it)."""
    if done.cancelled():
        return asyncio.CancelledError()
    return done.exception() or done.result()
