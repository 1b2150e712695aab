"""A follower's fetcher for every partition it follows from one leader, as Kafka's ``ReplicaFetcherThread``: one
multi-partition fetch per round, in an incremental fetch session, through a ``LeaderEndPoint``.

Why: one fetch per partition per round costs a request, a wait and a storage hop per partition; Kafka's follower
asks its leader for all of them at once, and the session (KIP-227) leaves idle partitions out of both the request
and the answer, so a follower of a thousand quiet partitions sends almost nothing.

The rules, per partition (those of broker/replication/replica_fetcher.py, the per-partition HTTP fetcher):

* **Truncation first** (KIP-101/279). A partition joins the fetcher untruncated: before its first fetch, one
  OffsetsForLeaderEpoch request for all such partitions asks where the leader ended our latest epoch (a partition
  the leader answers with an error is asked again after the backoff, not before), and the log
  is cut to ``min(the leader's end, our own end of that epoch)``; never by high watermark alone, which could lose
  committed records or keep a divergent tail (a log without epoch history falls back to the high watermark).
* **Fetch from the log end**, naming the leader epoch the partition follows (the leader fences either side if
  stale) and our log start offset; the leader's high watermark and log start offset come back and are followed.
* **The replication throttle** (KIP-73, broker/replication/throttle.py) caps what a throttled partition asks for
  and spends what it got; while the follower's quota is in debt, throttled partitions sit out of the fetch (Kafka's
  ``shouldFollowerThrottle``) and the others go on: a throttle never delays a partition it does not name.
* **One storage job per partition per answer**: the answer's batches for a partition are appended as bytes in one
  job on that partition's queue; the partitions of one answer are appended concurrently.
* **Errors are per partition**: OFFSET_OUT_OF_RANGE asks the leader's log bounds and cuts back to its end or
  starts over at its start; any other error (not the leader or a follower any more, a fenced or unknown leader
  epoch, an unknown topic, a stale broker epoch) holds that partition back for the backoff while the others go
  on; the replica manager's next state change re-adds or removes it.
* A partition is fetched only while it is *current*: still a follower of this leader at the leader epoch it was
  added with. An answer for a partition that stopped being current, or whose log end moved since the request was
  built, is dropped.

Failures to reach the leader fail the round (the session starts over with a full fetch) and back off.

**A round costs what changed.** The request's partitions are kept between rounds: a partition is looked at again
(its offsets, whether it is current, held back or throttled) only once something happened to it here (added, an
answer with records or an error, truncated) or it is one the round must check each time (held back, throttled,
not yet truncated), and every partition at least every ``REFRESH_S`` (its log start moves with its own retention,
unsignalled). The session's diff is set arithmetic over tuples (broker/replication/fetch_session_handler.py), and
the leader leaves the partitions it holds quiet out of its own work (broker/fetch/sessions.py): a round over a
thousand idle partitions touches none of them on either side.

Metrics (``FetcherStats``, Kafka's ``FetcherStats`` and ``FetcherLagMetrics``): plain numbers bumped once per round
or per partition of an answer, never per record, read by /metrics at scrape time (broker/metrics.py).

Concurrency: one task (``run``) per fetcher, on the broker's event loop; ``add`` and ``remove`` are called from
the same loop and take effect from the next round (a round in flight finishes with what it asked).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.metrics import LATENCY_BUCKETS
from broker.replication.fetch_session_handler import FetchSessionHandler, PartitionData
from broker.replication.leader_endpoint import FetchedPartition, FetchSettings, LeaderEndPoint, TopicPartition
from broker.replication.partition import FOLLOWER, Partition
from odradek.protocol.errors import OdradekError, OffsetOutOfRangeError

if TYPE_CHECKING:
    from broker.quotas import TokenBucket
    from broker.replication.throttle import ReplicationThrottle

log = logging.getLogger(__name__)

BACKOFF_S = 0.1  # Kafka's replica.fetch.backoff.ms is 1 s; a broker here recovers from most errors faster
FAILURE_LOG_EVERY_S = 10.0  # a leader's rounds failing on: one warning this often
REFRESH_S = 1.0  # every followed partition's request is rebuilt at least this often (see the module docstring)


@dataclass(slots=True)
class _Follow:
    part: Partition
    epoch: int  # the leader epoch the partition was added at
    truncated: bool = False
    delayed_until: float = 0.0
    leader_hw: int = -1  # the leader's high watermark in its last answer carrying this partition


@dataclass(slots=True)
class FetcherStats:
    """One fetcher's counters. They only grow: the fetcher manager keeps them per (leader, fetcher id) for the
    broker's life and hands them to each fetcher it starts there."""

    requests: int = 0  # Fetch requests sent
    errors: int = 0  # requests that failed: not answered (connection, timeout), or refused as a whole
    bytes: int = 0  # record bytes received in answers
    records: int = 0  # offsets appended (the follower's log end moved by; a compacted leader's gaps count)
    truncations: int = 0  # times a followed log was cut back (divergent tail, or out of the leader's range)
    round_sum: float = 0.0  # seconds of the answered requests' round trips
    # answered round trips per LATENCY_BUCKETS bucket (not cumulative), the last one past the largest bound
    round_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))

    def observe_round(self, seconds: float) -> None:
        self.round_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1  # bucket ``le`` holds <= le
        self.round_sum += seconds

    def round_buckets(self) -> list[tuple[float, int]]:
        """Cumulative (upper bound, count) pairs, as Prometheus buckets, ending with (inf, every round)."""
        out, total = [], 0
        for bound, count in zip((*LATENCY_BUCKETS, float("inf")), self.round_counts, strict=True):
            total += count
            out.append((bound, total))
        return out


class LeaderFetcher:
    """This broker (``broker_id``) following ``endpoint.leader_id`` for the partitions it is given."""

    def __init__(self, endpoint: LeaderEndPoint, broker_id: int, *, broker_epoch: Callable[[], int | None],
                 throttle: ReplicationThrottle | None = None, settings: FetchSettings | None = None,
                 backoff_s: float = BACKOFF_S, clock: Callable[[], float] = time.monotonic,
                 stats: FetcherStats | None = None) -> None:
        self.endpoint = endpoint
        self.leader_id = endpoint.leader_id
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._throttle = throttle
        self._settings = settings or FetchSettings()
        self._backoff_s = backoff_s
        self._clock = clock
        self._follows: dict[TopicPartition, _Follow] = {}
        # The request's partitions, kept between rounds; those in ``_unsteady`` are looked at again next round.
        self._wanted: dict[TopicPartition, PartitionData] = {}
        self._unsteady: set[TopicPartition] = set()
        self._refreshed = -REFRESH_S
        self._session = FetchSessionHandler()
        self._changed = asyncio.Event()
        self.rounds = 0  # fetch rounds answered, for tests and metrics
        self._failures = 0  # rounds failed in a row
        self._failure_logged = 0.0
        self.stats = stats if stats is not None else FetcherStats()

    # ------------------------------------------------------------------------------------------ membership

    def add(self, part: Partition) -> None:
        """Follow ``part`` (a follower of this leader) from the next round, truncating it first."""
        key = (part.topic, part.partition)
        self._follows[key] = _Follow(part, part.leader_epoch)
        self._unsteady.add(key)
        self._changed.set()

    def remove(self, key: TopicPartition) -> None:
        self._wanted.pop(key, None)
        self._unsteady.discard(key)
        if self._follows.pop(key, None) is not None:
            self._changed.set()

    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self._follows)

    def lags(self) -> dict[TopicPartition, int]:
        """Each followed partition's lag: the leader's high watermark in its last answer minus our log end,
        at least 0 (0 before any answer carried the partition)."""
        return {key: max(0, f.leader_hw - f.part.log_end_offset) for key, f in self._follows.items()}

    def _current(self, f: _Follow) -> bool:
        p = f.part
        return p.role == FOLLOWER and p.leader == self.leader_id and p.leader_epoch == f.epoch

    # ------------------------------------------------------------------------------------------------ loop

    async def run(self) -> None:
        while True:
            try:
                await self._truncate_pending()
                ready = self._ready()
                if not ready:
                    await self._idle()
                    continue
                await self._fetch_round(ready)
            except asyncio.CancelledError:
                raise
            except OdradekError as e:  # the leader out of reach, or refusing the whole request
                self._log_failure(e)
                await asyncio.sleep(self._backoff_s)
            except Exception:
                log.exception("fetcher of broker %d failed", self.leader_id)
                await asyncio.sleep(self._backoff_s)

    def _log_failure(self, e: OdradekError) -> None:
        """A failed round: a warning for the first of a run of failures and then every ``FAILURE_LOG_EVERY_S``
        (a leader that is down fails a round every backoff), the others at debug."""
        now = self._clock()
        if self._failures == 0 or now - self._failure_logged >= FAILURE_LOG_EVERY_S:
            log.warning("fetch from broker %d failed (%d in a row): %s", self.leader_id, self._failures + 1, e)
            self._failure_logged = now
        else:
            log.debug("fetch from broker %d failed: %s", self.leader_id, e)
        self._failures += 1

    def _ready(self) -> dict[TopicPartition, PartitionData]:
        """This round's request: every partition that is current, truncated, not held back, and not over the
        replication quota, with what it asks. Only the unsteady ones are looked at (see the module docstring)."""
        now = self._clock()
        if now - self._refreshed >= REFRESH_S:
            self._refreshed = now
            self._unsteady.update(self._follows)
        if not self._unsteady:
            return self._wanted
        wanted, unsteady = self._wanted, self._unsteady
        for key in list(unsteady):
            wanted.pop(key, None)
            f = self._follows.get(key)
            if f is None:
                unsteady.discard(key)
                continue
            if not (f.truncated and f.delayed_until <= now and self._current(f)):
                continue  # looked at again next round
            part = f.part
            cap = self._settings.partition_max_bytes
            bucket = self._bucket(part)
            if bucket is None:
                unsteady.discard(key)
            else:  # throttled: its debt and cap are looked at every round
                wait = bucket.delay()
                if wait > 0:  # over the follower's replication quota: this partition sits the debt out
                    f.delayed_until = now + wait
                    continue
                cap = bucket.cap(cap)
            wanted[key] = PartitionData(part.log_end_offset, part.log_start_offset, cap, f.epoch)
        return wanted

    def _bucket(self, part: Partition) -> TokenBucket | None:
        """The follower's replication quota for ``part`` (KIP-73), or None when it is not throttled."""
        if self._throttle is None:
            return None
        return self._throttle.follower_limit(part.topic, part.partition, self._broker_id in part.isr)

    async def _idle(self) -> None:
        """Nothing to fetch: wait for a partition to be added, or the earliest held-back one to be due."""
        self._changed.clear()
        due = [f.delayed_until for f in self._follows.values() if self._current(f)]
        timeout = max(0.0, min(due) - self._clock()) if due else None
        # asyncio.timeout, not wait_for: on 3.11 a wait_for whose event is set in the same step as the task is
        # cancelled (``remove`` then the manager's cancel) returns normally and the cancellation is lost
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    # ----------------------------------------------------------------------------------------- truncation

    async def _truncate_pending(self) -> None:
        now = self._clock()
        pending = {k: f for k in self._unsteady  # (an untruncated partition is unsteady until truncated)
                   if (f := self._follows.get(k)) is not None
                   and not f.truncated and f.delayed_until <= now and self._current(f)}
        if not pending:
            return
        # A fetch of the partition's previous state (another fetcher's, or this one's) may still be landing:
        # the log is judged with it.
        await asyncio.gather(*(f.part.settled() for f in pending.values()))
        asks: dict[TopicPartition, tuple[int, int]] = {}
        for key, f in pending.items():
            log_ = f.part.log
            if log_.log_end_offset == 0:
                f.truncated = True
            elif log_.epoch_cache.latest_epoch < 0:  # no epoch history: the pre-KIP-101 fallback
                await self._truncate(f, -1, -1)
            else:
                asks[key] = (f.epoch, log_.epoch_cache.latest_epoch)
        if not asks:
            return
        answers = await self.endpoint.epoch_end_offsets(asks, replica_id=self._broker_id)
        jobs = []
        for key in asks:
            f = self._follows.get(key)
            if f is None or f.truncated or not self._current(f):
                continue
            answer = answers.get(key)
            if answer is None or answer.error is not None:
                log.debug("%s-%d: epoch end offset from broker %d: %s", *key, self.leader_id,
                          answer.error if answer is not None else "not answered")
                f.delayed_until = self._clock() + self._backoff_s
                continue
            jobs.append(self._truncate(f, answer.leader_epoch, answer.end_offset))
        await asyncio.gather(*jobs)

    async def _truncate(self, f: _Follow, leader_epoch: int, leader_end: int) -> None:
        part = f.part
        target, leo = await part.truncate_diverged(leader_epoch, leader_end)
        if target < leo:
            log.info("%s-%d: truncated divergent tail [%d, %d) before following broker %d (epoch %d)",
                     part.topic, part.partition, target, leo, self.leader_id, f.epoch)
            self.stats.truncations += 1
        f.truncated = True

    # -------------------------------------------------------------------------------------------- fetching

    async def _fetch_round(self, ready: dict[TopicPartition, PartitionData]) -> None:
        request = self._session.build(ready)
        wanted = request.wanted  # this round's, whatever ``add`` and ``remove`` do meanwhile
        stats = self.stats
        stats.requests += 1
        started = time.perf_counter()
        try:
            answer = await self.endpoint.fetch(request, replica_id=self._broker_id,
                                               broker_epoch=self._broker_epoch() or -1, settings=self._settings)
        except BaseException as e:
            self._session.handle_error()
            if isinstance(e, Exception):  # a cancellation is the fetcher closing, not the leader failing
                stats.errors += 1
            raise
        stats.observe_round(time.perf_counter() - started)
        if self._failures:
            log.info("fetch from broker %d answered again after %d failed rounds", self.leader_id, self._failures)
            self._failures = 0
        result = self._session.handle_response(answer.error_code, answer.session_id, list(answer.partitions))
        self.rounds += 1
        if not result.ok:
            stats.errors += 1
            if result.unexpected:
                log.warning("broker %d answered partitions outside the fetch session: %s", self.leader_id,
                            list(result.unexpected))
            else:
                log.debug("broker %d refused the fetch (Kafka error %d); the next one is full", self.leader_id,
                          answer.error_code)
            return
        jobs = []
        unsteady = self._unsteady
        for key, fetched in answer.partitions.items():
            stats.bytes += len(fetched.records)
            f = self._follows.get(key)
            if f is None:
                continue
            if fetched.records or fetched.error is not None:
                unsteady.add(key)  # its log end moves (or it is held back): its request is rebuilt next round
            if not self._current(f) or f.part.log_end_offset != wanted[key].fetch_offset:
                unsteady.add(key)
                continue  # moved on, or truncated meanwhile: the next round asks again
            if fetched.error is None:
                job = self._apply(f, fetched)
                if job is not None:
                    jobs.append(job)
            elif isinstance(fetched.error, OffsetOutOfRangeError):
                jobs.append(self._out_of_range(key, f))
            else:
                log.debug("%s-%d: fetch from broker %d: %s", *key, self.leader_id, fetched.error)
                f.delayed_until = self._clock() + self._backoff_s
        if len(jobs) == 1:
            await jobs[0]
        elif jobs:
            await asyncio.gather(*jobs)

    def _apply(self, f: _Follow, fetched: FetchedPartition) -> Coroutine[Any, Any, None] | None:
        """One partition's answer appended, and what it says followed. None when that is done at once (the common
        case: a page-cache write on the loop, ``Partition.append_replicated_here``), else the coroutine that does
        the rest (the append through the partition's storage queue, or following the leader's log start): a
        round awaits those of its partitions together, and makes no task for the others."""
        part = f.part
        f.leader_hw = fetched.high_watermark
        leo = part.log_end_offset
        if part.append_replicated_here(fetched.records, fetched.high_watermark, f.epoch) is None:
            return self._apply_queued(f, fetched, leo)
        return self._applied(f, fetched, leo)

    async def _apply_queued(self, f: _Follow, fetched: FetchedPartition, leo: int) -> None:
        await f.part.append_replicated(fetched.records, fetched.high_watermark, f.epoch)
        rest = self._applied(f, fetched, leo)
        if rest is not None:
            await rest

    def _applied(self, f: _Follow, fetched: FetchedPartition, leo: int) -> Coroutine[Any, Any, None] | None:
        """After the append (log end ``leo`` before it): the counters, the throttle's debt, and the leader's log
        start to follow (returned as a coroutine when it moved)."""
        part = f.part
        self.stats.records += max(0, part.log_end_offset - leo)
        bucket = self._bucket(part) if fetched.records else None
        if bucket is not None:
            bucket.record(len(fetched.records))  # the debt holds throttled partitions back (``_ready``), no one else
        if fetched.log_start_offset > part.log_start_offset:
            self._unsteady.add((part.topic, part.partition))  # our log start, as the next request says it
            return part.follow_log_start(fetched.log_start_offset)  # the leader's DeleteRecords (or its retention)
        return None

    async def _out_of_range(self, key: TopicPartition, f: _Follow) -> None:
        """Our log end is outside the leader's log: cut back to its end, or start over at its start."""
        start, end = await self.endpoint.log_bounds(key, replica_id=self._broker_id)
        part = f.part
        if not self._current(f):
            return
        if part.log_end_offset > end:
            await part.truncate_to(end)
            self.stats.truncations += 1
        elif part.log_end_offset < start:
            await part.truncate_fully_and_start_at(start)
            self.stats.truncations += 1
