"""One partition replica on this broker: a state machine of role and ISR, with its high watermark and waiters.

This is where the replication promise is kept (Kafka's ``cluster/Partition.scala``).

States::

    role:  OFFLINE --(state names us leader)--> LEADER --(newer epoch names another)--> FOLLOWER
           any --(session lost, a pause, a follower with a newer epoch, topic deleted)--> OFFLINE (fenced)
    ISR:   Committed(isr) --(a follower caught up)--> PendingExpand(isr, +r) --(written)--> Committed(isr + r)
           Committed(isr) --(followers lagged)------> PendingShrink(isr, -rs) --(written)--> Committed(isr - rs)
           Pending* --(version conflict)--> stays pending until the controller's state arrives (apply)
           any --(apply: a state read from ZooKeeper)--> Committed(that state's isr)

* The leader stamps its leader epoch on every batch it appends and records ``(epoch, log end)`` in the
  leader-epoch cache when it becomes leader, so followers can find where their history diverged (KIP-101/279).
* The high watermark is owned by the log (``Log.maybe_increment_high_watermark``: forward only, never past the
  log end); the leader moves it to the least log end offset over the *maximal* ISR: while an ISR change is in
  flight that is the larger of the two sets (Kafka's ``maximalIsr``), so neither an expand nor a shrink can let
  the high watermark or an acks=all answer run ahead of what ZooKeeper may end up holding.
* A follower's fetch offset is its acknowledgement. A follower that has not caught up to the leader's log end
  for ``replica.lag.time.max.ms`` leaves the ISR; one that reaches the high watermark (and the start of the
  current epoch) rejoins. Changes go through the ISR manager (a conditional write on the state znode's
  version) and are committed locally only once written, so a deposed leader (whose write fails) can never
  shrink the ISR to itself and acknowledge alone. The ISR is never empty.
* acks=all: refused before appending when the committed ISR is smaller than ``min.insync.replicas``
  (NOT_ENOUGH_REPLICAS); acknowledged once the high watermark passes the batch; NOT_ENOUGH_REPLICAS_AFTER_APPEND
  if the ISR shrank below the minimum meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile.
* A replica that is no longer leader (a newer leader epoch seen, or its ZooKeeper session lost) stops
  acknowledging at once: every waiting produce fails with NOT_LEADER_OR_FOLLOWER naming the new leader.

Concurrency notes: the state machine is owned by the broker's asyncio loop (no locks). Disk work (appends,
reads, truncations, the leader-epoch checkpoint) runs on the data directory's storage executor, queued under
this partition's key so it happens in the order the loop decided it, while the loop serves other requests. An
append that is only a page-cache write, while that queue is idle, is done on the loop instead (``run_here``,
``APPEND_HERE_MAX_BYTES``): the same order, without two thread wake-ups; so is a consumer's read whose bytes are
all in the page cache (``READ_HERE_MAX_BYTES``). The loop reads the log's offsets (plain attributes) and never
waits for the log's lock (an append or a read on the loop only tries it) or for the disk. Imports nothing of ``zk/``:
the ISR manager is handed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from broker.log.log import AppendResult, Log, ReadResult
from broker.log.reads import SliceResult
from broker.metadata.cache import PartitionInfo
from broker.replication import storage_jobs
from broker.replication.isr_manager import IsrChange, IsrResult
from broker.replication.producer_state import (
    IdempotencyKeys,
    ProducerStateManager,
    follower_append,
    leader_append,
    marker_append,
)
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from odradek.protocol.model import LeaderAndIsr
from transaction_coordinator.markers import drop_aborted

T = TypeVar("T")
LeaderUrl = Callable[[int], str | None]
UNKNOWN_OFFSET = 2**63 - 1  # an epoch start offset not known yet: no follower counts as caught up to it
APPEND_HERE_MAX_BYTES = 64 * 1024
"""An append up to this size (a leader's, a follower's) is done on the loop when its partition's storage queue is
idle and it is only a page-cache write (``Storage.run_here``): 10-50 µs of copying per 20 KB, against a storage
hop's two thread wake-ups of 100-200 µs of CPU on our VMs (bench/wakeup_bench.py). A larger one, up to
``APPEND_HERE_WITH_ROOM_MAX_BYTES``, is too unless the broker's work would saturate the loop's thread
(``Storage.loop_saturated``): then its copy goes to a storage thread, to run beside the loop (one broker fed
110 KB batches by wrk takes 19 % fewer records a second with them on a busy loop); with room on the loop the hop
is pure cost (broker/log/loop_load.py has the figures)."""
APPEND_HERE_WITH_ROOM_MAX_BYTES = 1 << 20
"""The largest append done on a loop with room: a producer's full batch (librdkafka's batch.size is 1,000,000) or
a follower's partition of a round, a copy of 0.1-5 ms as the guest's page-cache price goes; anything larger always
takes the hop."""
READ_HERE_MAX_BYTES = 1 << 20
"""A consumer's read of up to this many bytes is tried on the loop first (``Log.read_cached``: only when every
byte is in the page cache and the log's lock is free), and goes to a storage thread otherwise: copying 1 MiB
from the page cache takes less CPU than the hop, and a REST read's answer is rendered on the loop anyway
(docs/performance.md, 2026-12-04, third session: REST reads 0.32 -> 0.24 CPU-s per million records, medians
of 6 interleaved alternations)."""
POSSIBLY_APPENDED = "possibly_appended"  # NOT_LEADER_OR_FOLLOWER's detail after an append: see ``not_leader``


class Role(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


LEADER, FOLLOWER, OFFLINE = Role.LEADER, Role.FOLLOWER, Role.OFFLINE


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    isr: tuple[int, ...]

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr

    in_flight = False


@dataclass(frozen=True, slots=True)
class PendingExpandIsr:
    isr: tuple[int, ...]
    new_replica: int

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return (*self.isr, self.new_replica)

    in_flight = True


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr:
    isr: tuple[int, ...]
    out_of_sync: tuple[int, ...]

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr

    in_flight = True


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr


def _log_end(log: Log) -> int:
    return log.log_end_offset


class Storage(Protocol):
    """Where the log's disk work runs (``broker.log.executor.StorageExecutor``)."""

    async def run(self, key: Any, fn: Callable[..., T], *args: Any, then: Callable[[], None] | None = None,
                  discard: Callable[[T], None] | None = None) -> T:
        ...

    def start(self, key: Any, fn: Callable[..., T], *args: Any,
              then: Callable[[], None] | None = None) -> asyncio.Future[T]:
        ...

    def run_here(self, key: Any, fn: Callable[..., T], *args: Any) -> T | None:
        ...

    def loop_saturated(self) -> bool:
        ...


class IsrSubmitter(Protocol):
    def submit(self, change: IsrChange) -> bool: ...


class InlineStorage:
    """Runs the work at once on the loop's thread (standalone use and tests that want no threads)."""

    async def run(self, key: Any, fn: Callable[..., T], *args: Any, then: Callable[[], None] | None = None,
                  discard: Callable[[T], None] | None = None) -> T:
        try:
            return fn(*args)  # no await before the result: a cancellation cannot strand it (``discard`` unused)
        finally:
            if then is not None:
                then()

    def start(self, key: Any, fn: Callable[..., T], *args: Any,
              then: Callable[[], None] | None = None) -> asyncio.Future[T]:
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(fn(*args))
        except Exception as e:
            fut.set_exception(e)
        finally:
            if then is not None:
                then()
        return fut

    def run_here(self, key: Any, fn: Callable[..., T], *args: Any) -> T | None:
        return fn(*args)

    def loop_saturated(self) -> bool:
        return False


class QuietMark(Protocol):
    """A follower's fetch session's entry for a partition found quiet (broker/fetch/sessions.py): its follower
    leaves the partition out of its rounds until the partition clears the mark (``unquiet``) at its next change.
    While marked, the follower is caught up as of its session's last fetch (``fetched_ms_ago``)."""

    quiet: bool

    @property
    def replica_id(self) -> int: ...

    def fetched_ms_ago(self) -> float: ...

    def unquiet(self) -> None: ...


@dataclass
class FollowerProgress:
    """The leader's view of one follower (Kafka's ``Replica`` fetch state)."""

    log_end_offset: int = -1
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 10000


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, isr_manager: IsrSubmitter,
                 leader_url: LeaderUrl, now: Callable[[], float] = time.monotonic,
                 storage: Storage | None = None, *, unsafe_ack_before_isr: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self._isr_manager = isr_manager
        self._leader_url = leader_url
        self._now = now
        self._storage: Storage = storage or InlineStorage()
        # A PLANTED BUG, off by default (BrokerConfig.unsafe_ack_before_isr): acks=all is acknowledged after the
        # leader's own append, before the ISR has the write (and without min.insync.replicas). Only `odradek
        # verify`'s planted-bug run turns it on, to show that the checker catches lost acknowledged writes.
        self.unsafe_ack_before_isr = unsafe_ack_before_isr
        self._key = (topic, partition)
        self.role = OFFLINE
        self.info: PartitionInfo | None = None
        self.leader = -1
        self.leader_epoch = -1
        # Bumped each time this replica becomes leader from any other role: an acks=all wait fails only when its
        # leadership ended (a new epoch with this replica still leader, a controller's ISR shrink, keeps its log
        # and its waits, as Kafka's DelayedProduce does), not when the epoch moves.
        self._leader_term = 0
        self.isr_state: IsrState = CommittedIsr(())
        self.replicas: tuple[int, ...] = ()
        self.controller_epoch = -1
        self.zk_version = -1
        self.epoch_start_offset = 0
        self.config = ReplicationConfig()
        self.followers: dict[int, FollowerProgress] = {}
        self._hw_advanced = asyncio.Event()  # replaced on every advance: wakes consumers' long-polls
        # acks=all waiters (Kafka's produce purgatory): a heap of (offset to commit, seq, future), each resolved once
        # the high watermark reaches its offset, or on a role, epoch or ISR change (then it re-checks everything).
        # A waiter that timed out leaves its cancelled future behind, dropped when reached or when the heap holds
        # more than twice the waiters still waiting (``_live_waiters``).
        self._commit_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_seq = itertools.count()
        self._live_waiters = 0
        self._appended = asyncio.Event()  # replaced on every append: wakes follower long-polls
        # One future per replica fetch waiting on many partitions (``wake_on_append``), resolved with the event
        self._append_waiters: set[asyncio.Future[None]] = set()
        # Followers' sessions holding this partition quiet (``acknowledge_if_quiet``): cleared at any change.
        self._quiet_marks: list[QuietMark] = []
        # Idempotence (producer_state.py): touched only on this partition's storage queue.
        self.producer_state: ProducerStateManager | None = None
        self.idempotency_keys = IdempotencyKeys()

    # ------------------------------------------------------------------------------------------- offsets

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR (what ZooKeeper holds): what ``min.insync.replicas`` is checked against."""
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus a replica being added: whose log end offsets bound the high watermark."""
        return self.isr_state.maximal_isr

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction, or the high watermark (KIP-98)."""
        hw = self.log.high_watermark
        first = self.producer_state.first_unstable() if self.producer_state is not None else None
        return hw if first is None or first > hw else first

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run disk work on the storage executor after this partition's earlier disk work (one hop)."""
        return await self._storage.run(self._key, fn, *args)

    # -------------------------------------------------------------------------------------- role changes

    async def apply(self, info: PartitionInfo, config: ReplicationConfig) -> Role | None:
        """Apply a partition state read from ZooKeeper; returns the role change (leader, follower) if any.

        A state with an older leader epoch, or an older znode version of the same epoch, than one already
        applied is stale and ignored (watches and re-reads can deliver states out of order).
        """
        self._unquiet()  # whatever the state says, the followers look again
        self.config = config
        if self.info is not None and (info.leader_epoch, info.zk_version) < (self.leader_epoch, self.zk_version):
            return None
        new_epoch = info.leader_epoch != self.leader_epoch
        same_version = not new_epoch and info.zk_version == self.zk_version and self.info is not None
        self.info = info
        self.replicas = info.replicas
        self.controller_epoch = info.controller_epoch
        self.zk_version = info.zk_version
        if not same_version or info.isr != self.isr_state.isr:  # the same state again keeps a pending change
            self.isr_state = CommittedIsr(info.isr)
        old_role = self.role
        self.leader = info.leader
        self.leader_epoch = info.leader_epoch
        if info.leader == self.broker_id:
            self.role = LEADER
            if old_role != LEADER:
                self._leader_term += 1
            if new_epoch or old_role != LEADER:
                await self._become_leader(new_leader=old_role != LEADER)
                return LEADER
            self._maybe_increment_hw()
            return None
        self.role = FOLLOWER if self.broker_id in info.replicas and info.leader >= 0 else OFFLINE
        if new_epoch or old_role != self.role:
            self._wake_all()
            return self.role if self.role == FOLLOWER else None
        return None

    async def _become_leader(self, *, new_leader: bool) -> None:
        """A leader epoch starts here: ``new_leader`` when this replica was not leading before, else a new
        epoch of its own leadership (the controller took a dead follower out of the ISR)."""
        epoch = self.leader_epoch
        # With nothing of this partition's queued or running, the log end is final now (appends as leader queue
        # behind the epoch job below): the epoch's start is known before any read asks (Kafka's makeLeader sets
        # it at once), not only after a storage hop; else it is once the appends queued before have landed.
        known = self._storage.run_here(self._key, _log_end, self.log)
        self.epoch_start_offset = UNKNOWN_OFFSET if known is None else known
        now = self._now() * 1000
        # Those in the ISR count as caught up now, so they are not dropped before they had a chance to fetch
        # from us. A new leader knows no follower's position until it fetches; a leader re-elected keeps the
        # positions its followers fetched at (its log is the same one), so a smaller ISR moves the high
        # watermark at once (Kafka's Replica.resetReplicaState).
        kept = {} if new_leader else self.followers
        leo = self.log.log_end_offset
        followers = {}
        for r in self.replicas:
            if r == self.broker_id:
                continue
            in_sync = now if r in self.isr else 0.0
            old = kept.get(r)
            followers[r] = FollowerProgress(last_caught_up_ms=in_sync) if old is None else FollowerProgress(
                log_end_offset=old.log_end_offset, last_caught_up_ms=in_sync, last_fetch_ms=in_sync,
                last_fetch_leader_leo=leo)
        self.followers = followers
        self._wake_all()
        # Kafka's makeLeader raises the high watermark before any read sees the new leader: with the ISR this
        # replica alone, to its log end now (a read must not find the records it held as a follower hidden while
        # the epoch job below waits its turn). The log end only grows: appends queued before are this log's too.
        self._maybe_increment_hw()
        # After every replicated append queued before it: the epoch starts at the log end as it is then.
        start = await self._run(storage_jobs.assign_epoch, self.log, epoch, self.idempotency_keys)
        if self.leader_epoch == epoch and self.role == LEADER:
            self.epoch_start_offset = start
        self._maybe_increment_hw()

    def fence(self, reason: str = "") -> None:
        """Stop acting as leader now (session lost): waiting produces fail, new ones are refused."""
        if self.role == LEADER:
            self._unquiet()
            self.role = OFFLINE
            self.leader = -1
            self._wake_all()

    def _unquiet(self) -> None:
        """Something changed that a follower's session holding this partition quiet must see: each mark still
        held is cleared, after its follower's fetch times are brought up to its session's last fetch (it was
        at the log end then, and had been since the mark was set: Kafka's leader would have recorded each of
        those fetches as caught up)."""
        marks = self._quiet_marks
        if not marks:
            return
        self._quiet_marks = []
        now = self._now() * 1000
        for mark in marks:
            if not mark.quiet:
                continue  # the session asked anew or forgot the partition: its own look recorded the fetch
            progress = self.followers.get(mark.replica_id)
            if progress is not None:
                fetched = now - mark.fetched_ms_ago()
                progress.last_caught_up_ms = max(progress.last_caught_up_ms, fetched)
                progress.last_fetch_ms = max(progress.last_fetch_ms, fetched)
            mark.unquiet()

    def _wake_all(self) -> None:
        """A role or epoch change: every waiter re-checks whether it may still proceed."""
        self._wake_hw_waiters(everyone=True)
        self._wake_followers()

    def _wake_hw_waiters(self, *, everyone: bool = False) -> None:
        """Consumers' long-polls, and the acks=all waiters whose offsets the high watermark reached (``everyone``:
        all of them, to re-check the role, the epoch and the ISR size). A waiter not reached costs nothing here."""
        self._unquiet()
        self._hw_advanced.set()
        self._hw_advanced = asyncio.Event()
        waiters = self._commit_waiters
        if not waiters:
            return
        if everyone:
            self._commit_waiters = []
            for _, _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            return
        hw = self.log.high_watermark
        while waiters and waiters[0][0] <= hw:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)

    def _wake_followers(self) -> None:
        self._unquiet()
        self._appended.set()
        self._appended = asyncio.Event()
        if self._append_waiters:
            for waiter in self._append_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._append_waiters.clear()

    def wake_on_append(self, waiter: asyncio.Future[None]) -> None:
        """Resolve ``waiter`` at this partition's next append, or role or epoch change, as a follower's long-poll
        is woken: one waiter for every partition of a replica's fetch, instead of a long-poll each. The caller
        withdraws it (``withdraw_waiter``) when it stops waiting, woken or not."""
        self._append_waiters.add(waiter)

    def withdraw_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._append_waiters.discard(waiter)

    def not_leader(self, *, appended: bool = False) -> NotLeaderOrFollowerError:
        """``appended``: after our append (an acks=all wait lost leadership), so the batch may survive: marked
        ``POSSIBLY_APPENDED``, and the broker's produce routing never resends it (broker/produce/service.py)."""
        url = self._leader_url(self.leader) if self.leader >= 0 else None
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            + (f"; broker {self.leader} is" if self.leader >= 0 else "; it has no leader now")
            + ("; the batch was appended before leadership moved and may or may not survive" if appended else ""),
            leader=self.leader, leader_url=url, leader_epoch=self.leader_epoch,
            **({POSSIBLY_APPENDED: True} if appended else {}))

    # ----------------------------------------------------------------------------------------- produce

    async def append(self, batches: bytes | bytearray, acks: int, timeout_ms: int,
                     idempotency_key: str | None = None, txn_guards: dict[int, object] | None = None) -> AppendResult:
        """Append as leader and wait as ``acks`` asks (0 and 1: after the local append; -1: committed).

        Idempotent batches are checked against the producer state first; a duplicate is answered with its
        original offsets (and, for acks=all, once those are committed). ``txn_guards``: the verification guards
        of a produce that verified its transactional batches (``ProducerStateManager.check_guards``).
        """
        if self.unsafe_ack_before_isr:
            acks = 1  # the planted bug (see __init__)
        term = self._leader_term
        result = await self.begin_append(batches, acks, idempotency_key, txn_guards)
        if acks != -1:
            return result
        await self._wait_committed(result.last_offset + 1, term, timeout_ms)
        return result

    def begin_append(self, batches: bytes | bytearray, acks: int, idempotency_key: str | None = None,
                     txn_guards: dict[int, object] | None = None) -> asyncio.Future[AppendResult]:
        """The local append, started now: its result (or error) comes in the future; the checks that refuse it
        before anything is written raise at once. What ``append`` waits for with acks=all is the caller's.
        Followers are woken and the HW moved once the bytes are in, even if nobody awaits the future any more."""
        if self.role != LEADER:
            raise self.not_leader()
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the ISR of {self.topic}-{self.partition} is {list(self.isr)}, smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}; nothing was written"
            )
        if self._append_here(len(batches)):
            fut: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
            try:
                here = self._storage.run_here(self._key, leader_append, self.log, batches, self.leader_epoch,
                                              self.producer_state, self.idempotency_keys, idempotency_key,
                                              txn_guards, True)
            except Exception as e:  # refused by the checks (as from the storage queue: through the future)
                fut.set_exception(e)
                return fut
            if here is not None:
                self._after_local_append()
                fut.set_result(here)
                return fut
        return self._storage.start(self._key, leader_append, self.log, batches, self.leader_epoch,
                                   self.producer_state, self.idempotency_keys, idempotency_key, txn_guards,
                                   then=self._after_local_append)

    def _append_here(self, size: int) -> bool:
        """Whether an append of ``size`` bytes is tried on the loop (``APPEND_HERE_MAX_BYTES``)."""
        return size <= APPEND_HERE_MAX_BYTES or (size <= APPEND_HERE_WITH_ROOM_MAX_BYTES
                                                 and not self._storage.loop_saturated())

    def _after_local_append(self) -> None:
        self._wake_followers()
        self._maybe_increment_hw()

    async def _wait_committed(self, offset: int, term: int, timeout_ms: int) -> None:
        """Until the high watermark reaches ``offset`` while this replica stays leader (``term``: the
        ``_leader_term`` the append was made in). A new leader epoch with this replica still leader (a
        controller taking a dead follower out of the ISR) does not end the wait: the log the offset is in is the
        same, and the smaller ISR lets the high watermark move; failing the wait would make a producer without
        idempotence write the batch again."""
        loop = asyncio.get_running_loop()  # request timeouts run on the loop's clock; ``now`` is for ISR lag
        deadline = loop.time() + timeout_ms / 1000
        while True:
            if self.role != LEADER or self._leader_term != term:
                raise self.not_leader(appended=True)
            if self.high_watermark >= offset:
                if len(self.isr) < self.config.min_insync_replicas:
                    raise NotEnoughReplicasAfterAppendError(
                        f"the ISR of {self.topic}-{self.partition} shrank to {list(self.isr)} before the write "
                        "was replicated; it is in the log and may survive"
                    )
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.partition}: not replicated to the ISR {list(self.maximal_isr)} "
                    f"within {timeout_ms} ms"
                )
            waiter = loop.create_future()
            heapq.heappush(self._commit_waiters, (offset, next(self._waiter_seq), waiter))
            self._live_waiters += 1
            expiry = loop.call_at(deadline, resolve_waiter, waiter)  # then checked above, which raises the timeout
            try:
                await waiter
            finally:
                expiry.cancel()
                self._live_waiters -= 1
                if not waiter.done():  # cancelled: left in the heap, skipped when reached
                    waiter.cancel()
                waiters = self._commit_waiters
                if len(waiters) > 64 and len(waiters) > 2 * self._live_waiters:
                    self._commit_waiters = [w for w in waiters if not w[2].done()]
                    heapq.heapify(self._commit_waiters)

    # -------------------------------------------------------------------------------------------- fetch

    async def read_committed(self, offset: int, max_bytes: int, timeout_ms: int) -> ReadResult:
        """A read_committed read (transaction_coordinator/markers.py): below the LSO, aborted transactions'
        batches dropped.
        An answer whose batches were all aborted reads on (up to the LSO) rather than come back empty."""
        result = await self.read(offset, max_bytes, timeout_ms, stable=True)
        while result.data and self.producer_state is not None:
            aborted = self.producer_state.aborted_between(offset, result.next_offset)
            data = drop_aborted(result.data, aborted)
            if data or result.next_offset >= self.last_stable_offset:
                return result._replace(data=data)
            offset = result.next_offset
            result = await self.read(offset, max_bytes, 0, stable=True)
        return result

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """The aborted transactions with batches in ``[start, end)``, as ``(producer id, first offset, marker
        offset)``: what a read_committed read of that range dropped. Stable once read: the range of such a read
        ends at or below the LSO, and a transaction still open has its first offset at or above it."""
        return [] if self.producer_state is None else self.producer_state.aborted_between(start, end)

    async def append_marker(self, batch: bytes, producer_id: int, producer_epoch: int, kind: int,
                            timeout_ms: int, coordinator_epoch: int = -1) -> AppendResult:
        """The coordinator's COMMIT/ABORT marker, acknowledged once committed (acks=all). A marker of a
        transaction whose marker is here already is not written again: acknowledged once the log as it stands
        is committed (that marker with it), with offsets -1."""
        if self.role != LEADER or self.producer_state is None:
            raise self.not_leader()
        epoch, term = self.leader_epoch, self._leader_term
        result = await self._storage.run(self._key, marker_append, self.log, bytearray(batch), epoch,
                                         self.producer_state, producer_id, producer_epoch, kind, coordinator_epoch,
                                         then=self._after_local_append)
        if result is None:
            await self._wait_committed(self.log.log_end_offset, term, timeout_ms)
            return AppendResult(-1, -1, 0, -1, None, self.log.log_start_offset)
        await self._wait_committed(result.last_offset + 1, term, timeout_ms)
        return result

    async def read(self, offset: int, max_bytes: int, timeout_ms: int, stable: bool = False,
                   zero_copy: bool = False) -> ReadResult | SliceResult:
        """A consumer's read: below the high watermark (``stable``: the LSO), long-polling up to ``timeout_ms``
        at its end. OFFSET_OUT_OF_RANGE only outside the log (Kafka's rule): a new leader's HW lags the old one's,
        and calling a position above it out of range made consumers reset to earliest (a rewind to 0)."""
        if self.role != LEADER:
            raise self.not_leader()
        start, end = self.log.log_start_offset, self.log.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: the log holds {start} to {end}",
                log_start_offset=start, log_end_offset=end, high_watermark=self.high_watermark,
                leader_epoch=self.leader_epoch)
        limit = self.last_stable_offset if stable else self.high_watermark
        if offset >= limit and timeout_ms > 0:
            event = self._hw_advanced
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_ms / 1000)
            if self.role != LEADER:
                raise self.not_leader()
        hw = self.last_stable_offset if stable else self.high_watermark
        if offset >= hw:  # nothing to read (a long-poll that timed out): no hop to the storage executor
            return ReadResult(b"", offset, self.log.log_start_offset, self.log.log_end_offset)
        return await self._read_snapshot(offset, max_bytes, hw, zero_copy)

    async def _read_snapshot(self, offset: int, max_bytes: int, max_offset: int | None,
                             zero_copy: bool, *, tried_here: bool = False) -> ReadResult | SliceResult:
        """On the loop if nothing of it waits (``READ_HERE_MAX_BYTES``; ``tried_here``: the caller just tried),
        else on a storage thread: reads need no order (they read a snapshot), so any storage thread, not this
        partition's queue. The loop never waits on the disk or on the log's lock."""
        if max_bytes <= READ_HERE_MAX_BYTES and not tried_here:
            here = storage_jobs.read_here(self.log, offset, max_bytes, max_offset, zero_copy)
            if here is not None:
                return here
        if zero_copy:
            return await self._storage.run(None, storage_jobs.slices, self.log, offset, max_bytes, max_offset,
                                           discard=storage_jobs.release)
        return await self._storage.run(None, storage_jobs.read, self.log, offset, max_bytes, max_offset)

    async def read_for_follower(self, replica_id: int, offset: int, fetch_epoch: int, max_bytes: int,
                                timeout_ms: int, zero_copy: bool = False) -> ReadResult | SliceResult:
        """A follower's fetch: up to the log end; its offset is its acknowledgement of everything before.
        ``zero_copy``: the batches as file ranges (``Log.read_slices``) for the HTTP layer to sendfile."""
        self._check_follower_fetch(replica_id, fetch_epoch)
        if offset > self.log.log_end_offset:  # never acknowledge records that do not exist (the HW would pass them)
            raise OffsetOutOfRangeError(f"fetch offset {offset} > log end offset {self.log.log_end_offset}",
                                        log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset)
        progress = self.followers[replica_id]
        # Caught up at its previous look: what it reads now was appended since (page cache, one round's worth).
        fresh = 0 <= progress.last_fetch_leader_leo <= offset
        if self._record_follower_fetch(replica_id, offset):
            # The high watermark moved: the acks=all produces and consumer long-polls it released answer before
            # this fetch goes on (their answers are the latency a client sees; this fetch's, at most the records
            # appended since, waits one turn of the loop). Then, as after any wait, the leadership is checked.
            await asyncio.sleep(0)
            self._check_follower_fetch(replica_id, fetch_epoch)
        parked = offset == self.log.log_end_offset and timeout_ms > 0
        if parked:
            event = self._appended
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_ms / 1000)
            self._check_follower_fetch(replica_id, fetch_epoch)
        leo = self.log.log_end_offset
        if offset == leo:  # an idle follower's long-poll ended: nothing to read, no hop
            return ReadResult(b"", offset, self.log.log_start_offset, leo)
        if parked or fresh:  # bytes appended since the follower's last look (page cache): read here, no hop,
            here = storage_jobs.read_here(self.log, offset, max_bytes, None, zero_copy)  # unless that would wait
            if here is not None:
                return here
            return await self._read_snapshot(offset, max_bytes, None, zero_copy, tried_here=True)
        return await self._read_snapshot(offset, max_bytes, None, zero_copy)

    def acknowledge_if_quiet(self, replica_id: int, offset: int, fetch_epoch: int,
                             mark: QuietMark | None = None) -> bool:
        """A follower's fetch of a partition with nothing to say to it, acknowledged without a read: True when
        the whole fetch would be refreshing the follower's fetch times and answering no records, else False with
        nothing changed (the caller then fetches as usual, which raises whatever applies).

        Quiet means: this broker leads in the fetch's epoch; the offset is the log end and the follower had
        already acknowledged it at the log end then (so its offset, the high watermark and the ISR stay as they
        are); and the follower is in the ISR with no ISR change in flight (nothing to expand). Most partitions
        of a follower's session are quiet on most rounds: this is what keeps an idle partition from costing a
        round the whole read path (see ``FollowerFetchService.fetch_if_quiet``). Kafka's leader records the fetch
        of every partition of the session the same way: the follower is caught up as of this fetch.

        ``mark``: the follower's session entry for the partition; when quiet, it is marked and held until the
        partition's next change (``_unquiet``), and the follower's session leaves the partition out until then."""
        if (self.role != LEADER or fetch_epoch != self.leader_epoch or offset != self.log.log_end_offset
                or self.isr_state.in_flight or replica_id not in self.isr_state.isr):
            return False
        progress = self.followers.get(replica_id)
        if progress is None or progress.log_end_offset != offset or progress.last_fetch_leader_leo != offset:
            return False
        progress.last_caught_up_ms = progress.last_fetch_ms = self._now() * 1000
        if mark is not None and mark.replica_id == replica_id:
            mark.quiet = True
            self._quiet_marks.append(mark)
        return True

    async def acknowledge_at_log_end(self, replica_id: int, offset: int, fetch_epoch: int) -> bool:
        """A follower's fetch at the log end in this leader's epoch, acknowledged without the read path: its offset
        recorded as ``read_for_follower`` records it (which may move the ISR and the high watermark), nothing to
        read. False, with nothing changed, for any other fetch: the caller then fetches as usual, which applies
        every rule. This is the first look of most follower fetches under acks=all: the follower acknowledging
        what it just appended, then waiting for more.

        When the high watermark moved, the produces and long-polls it released answer first (one turn of the loop,
        as in ``read_for_follower``); False then if, meanwhile, records were appended or the leadership changed:
        the caller's read finds them, or its error (recording the same offset again changes nothing)."""
        if (self.role != LEADER or fetch_epoch != self.leader_epoch or offset != self.log.log_end_offset
                or replica_id not in self.followers):
            return False
        if self._record_follower_fetch(replica_id, offset):
            await asyncio.sleep(0)
            return self.role == LEADER and fetch_epoch == self.leader_epoch and offset == self.log.log_end_offset
        return True

    def acknowledge_follower(self, replica_id: int, offset: int, fetch_epoch: int) -> ReadResult:
        """A follower's fetch answered with no records (the leader's replication quota is spent, KIP-73): its
        offset still acknowledges everything before it, exactly as a read's would."""
        self._check_follower_fetch(replica_id, fetch_epoch)
        if offset > self.log.log_end_offset:
            raise OffsetOutOfRangeError(f"fetch offset {offset} > log end offset {self.log.log_end_offset}",
                                        log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset)
        self._record_follower_fetch(replica_id, offset)
        return ReadResult(b"", offset, self.log.log_start_offset, self.log.log_end_offset)

    def _check_follower_fetch(self, replica_id: int, fetch_epoch: int) -> None:
        if self.role != LEADER:
            raise self.not_leader()
        if fetch_epoch > self.leader_epoch:
            # Kafka's UNKNOWN_LEADER_EPOCH: no request demotes a leader; only ZooKeeper's state (re-read) does.
            raise UnknownLeaderEpochError(f"fetch epoch {fetch_epoch} > leader epoch {self.leader_epoch}",
                                          leader_epoch=self.leader_epoch)
        if fetch_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"fetch epoch {fetch_epoch} is older than the leader epoch {self.leader_epoch}",
                leader_epoch=self.leader_epoch,
            )
        if replica_id not in self.followers:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch; in memory (the epoch cache's lock is never held across its file writes)."""
        if self.role != LEADER:
            raise self.not_leader()
        return self.log.epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    # --------------------------------------------------------------------------------------------- ISR

    def _record_follower_fetch(self, replica_id: int, offset: int) -> bool:
        """The follower's fetch offset recorded as its log end (Kafka's ``updateFollowerFetchState``); whether
        the high watermark moved."""
        now = self._now() * 1000
        progress = self.followers[replica_id]
        leo = self.log.log_end_offset
        if offset >= leo:
            progress.last_caught_up_ms = now
        elif offset >= progress.last_fetch_leader_leo >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = offset
        progress.last_fetch_ms = now
        progress.last_fetch_leader_leo = leo
        self._maybe_expand_isr(replica_id, offset)
        return self._maybe_increment_hw()

    def _maybe_expand_isr(self, replica_id: int, offset: int) -> None:
        """Kafka's ``maybeExpandIsr``: a follower at the high watermark and in the current epoch rejoins."""
        state = self.isr_state
        if (self.role != LEADER or state.in_flight or replica_id in state.isr
                or offset < self.high_watermark or offset < self.epoch_start_offset):
            return
        self._submit_isr(PendingExpandIsr(state.isr, replica_id), (*state.isr, replica_id))

    def _maybe_increment_hw(self) -> bool:
        """Kafka's ``maybeIncrementLeaderHW``: the smallest log end in the maximal ISR; whether it moved (and
        its waiters were woken)."""
        if self.role != LEADER:
            return False
        hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r != self.broker_id:
                progress = self.followers.get(r)
                end = progress.log_end_offset if progress is not None else -1
                if end < hw:
                    hw = end
        if self.log.maybe_increment_high_watermark(hw):
            self._wake_hw_waiters()
            return True
        return False

    def out_of_sync_followers(self) -> list[int]:
        now = self._now() * 1000
        leo = self.log.log_end_offset
        lag = self.config.replica_lag_time_max_ms
        return [
            r for r in self.isr
            if r != self.broker_id
            and (p := self.followers.get(r)) is not None
            and p.log_end_offset != leo
            and now - p.last_caught_up_ms > lag
        ]

    def maybe_shrink_isr(self) -> None:
        """Kafka's ``maybeShrinkIsr``: drop followers that lagged for ``replica.lag.time.max.ms``."""
        state = self.isr_state
        if self.role != LEADER or state.in_flight:
            return
        lagging = self.out_of_sync_followers()
        if lagging:
            self._submit_isr(PendingShrinkIsr(state.isr, tuple(lagging)),
                             tuple(r for r in state.isr if r not in lagging))

    def _submit_isr(self, pending: PendingExpandIsr | PendingShrinkIsr, new_isr: tuple[int, ...]) -> None:
        if not new_isr or set(new_isr) == set(pending.isr):
            return
        epoch = self.leader_epoch
        # Kafka's ZK-mode leader keeps its leader epoch on an ISR change (LeaderAndIsr.new_isr); only the znode
        # version moves, and the conditional write fences a leader that lost the partition.
        current = LeaderAndIsr(self.broker_id, epoch, list(pending.isr), self.controller_epoch)
        state = current.new_isr(sorted(new_isr, key=self._replica_order))
        change = IsrChange(
            self.topic, self.partition, state, self.zk_version,
            callback=lambda result: self._on_isr_result(pending, result),
            still_wanted=lambda: self.isr_state is pending and self.role == LEADER and self.leader_epoch == epoch,
        )
        self.isr_state = pending
        self._maybe_increment_hw()
        if not self._isr_manager.submit(change):
            self.isr_state = CommittedIsr(pending.isr)  # an earlier change is still being written

    def _replica_order(self, r: int) -> int:
        return self.replicas.index(r) if r in self.replicas else len(self.replicas)

    def _on_isr_result(self, pending: PendingExpandIsr | PendingShrinkIsr, result: IsrResult) -> None:
        if self.isr_state is not pending or self.role != LEADER or self.leader_epoch != result.state.leader_epoch:
            return  # a newer state was applied meanwhile: it wins
        if result.ok:
            self.isr_state = CommittedIsr(tuple(result.state.isr))
            self.zk_version = result.zk_version
            self._maybe_increment_hw()
            self._wake_hw_waiters(everyone=True)  # a shrink can make acks=all waiters fail (or succeed)
        elif not result.conflict:
            self.isr_state = CommittedIsr(pending.isr)  # given up: try again at the next fetch or expiry check
        # On a version conflict the change stays pending (Kafka does too): a newer state exists and will reach
        # us through the watch (apply), and retrying against the stale version could only fail again.

    # ------------------------------------------------------------------------------------- DeleteRecords

    async def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords on the leader: move the log start offset up to ``offset`` (-1: the high
        watermark) and return the new log start. Followers follow from the log start each fetch answer names
        (``follow_log_start``).

        Raises:
            NotLeaderOrFollowerError: this replica does not lead the partition.
            OffsetOutOfRangeError: ``offset`` is negative (other than -1) or above the high watermark.
            PolicyViolationError: the topic's cleanup.policy does not include delete (Kafka's rule).
        """
        if self.role != LEADER:
            raise self.not_leader()
        hw = self.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(
                f"cannot delete the records of {self.topic}-{self.partition} before offset {offset}: the high "
                f"watermark is {hw}", log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset,
                high_watermark=hw)
        if not self.log.config.delete_enabled:
            raise PolicyViolationError(f"Records of partition {self.topic}-{self.partition} can not be deleted due "
                                       "to the configured policy")
        start = await self._run(self.log.delete_records_before, target)
        self._unquiet()  # the followers follow the new log start from their next answer
        return start

    async def follow_log_start(self, leader_log_start: int) -> None:
        """A follower's copy of the leader's DeleteRecords: its log start moves up to the leader's, never past
        its own high watermark (which the leader's bounds). After the appends and truncations queued before it,
        so the bound is the high watermark as it is then."""
        await self._run(_follow_log_start, self.log, leader_log_start)

    # -------------------------------------------------------------------------------------------- follower

    async def append_replicated(self, data: bytes, leader_hw: int, leader_epoch: int | None = None) -> bool:
        """A follower appends its leader's bytes and learns the leader's high watermark. ``leader_epoch``: the
        epoch the fetch was made in. The bytes go in only if this replica still follows that epoch when the
        storage queue reaches them: a fetch answered just before a new state must not land after that state's
        truncation (or after this replica became leader). False when dropped so."""
        done = self.append_replicated_here(data, leader_hw, leader_epoch)
        if done is not None:
            return done
        if not await self._run(self._append_if_following, data, leader_epoch):
            return False
        self.log.maybe_increment_high_watermark(leader_hw)
        return True

    def append_replicated_here(self, data: bytes, leader_hw: int, leader_epoch: int | None = None) -> bool | None:
        """``append_replicated`` when it is done at once, on the loop (nothing to append, or a page-cache write
        with no disk job of this partition queued): its answer; None, with nothing done, when the bytes must go
        through the storage queue (``append_replicated`` takes them there). A follower's round applies its
        answer's partitions so without a task each, in the common case."""
        if leader_epoch is not None and not self._follows(leader_epoch):
            return False
        if data and not (self._append_here(len(data))
                         and self._storage.run_here(self._key, self._append_to_page_cache, data)):
            return None
        self.log.maybe_increment_high_watermark(leader_hw)
        return True

    def _append_to_page_cache(self, data: bytes) -> bool:
        """On the loop, with no disk job of this partition queued or running (``Storage.run_here``): the append
        if it is only a page-cache write; False (nothing done) if it must go to the storage executor."""
        return follower_append(self.log, data, self.producer_state, page_cache_only=True)

    def _follows(self, leader_epoch: int) -> bool:
        return self.role == FOLLOWER and self.leader_epoch == leader_epoch

    def _append_if_following(self, data: bytes, leader_epoch: int | None) -> bool:
        """Storage job: the role and epoch are the loop's, read here after every earlier job of this partition
        (a new state's truncation or epoch assignment is queued after the state is applied)."""
        if leader_epoch is not None and not self._follows(leader_epoch):
            return False
        follower_append(self.log, data, self.producer_state)
        return True

    async def settled(self) -> None:
        """Once every disk job queued for this partition so far has run: a new state's fetcher reads its log end
        and epochs after this, so a late append of the previous state's fetch is judged, not missed."""
        await self._run(_nothing)

    async def truncate_to(self, offset: int) -> int:
        """A follower cuts its log back to ``offset`` (after every append queued before it)."""
        return await self._run(storage_jobs.truncate_to, self.log, offset, self.producer_state)

    async def truncate_diverged(self, leader_epoch: int, leader_end: int) -> tuple[int, int]:
        """A follower cuts its divergent tail given its leader's epoch answer (``storage_jobs.truncation_target``),
        judged on the storage queue, after every append queued before it; (offset cut to, log end before)."""
        return await self._run(storage_jobs.truncate_diverged, self.log, leader_epoch, leader_end,
                               self.producer_state)

    async def truncate_fully_and_start_at(self, offset: int) -> None:
        await self._run(storage_jobs.truncate_fully, self.log, offset, self.producer_state)

    async def snapshot_producer_state(self, expire: bool = False) -> None:
        """Expire idle producers (if asked) and write the producer-state snapshot, on this partition's queue
        (so the snapshot is consistent with the log end)."""
        if self.producer_state is not None:
            await self._run(storage_jobs.snapshot_state, self.producer_state, expire)


def resolve_waiter(waiter: asyncio.Future[None]) -> None:
    """A wait's deadline (``loop.call_at(deadline, resolve_waiter, waiter)``): the waiter resolved, for the waiting
    code to look again. One timer handle per wait, instead of ``asyncio.timeout``'s context manager and its
    cancellation of the waiting task, which cost twice as much on every acks=all produce and replica fetch."""
    if not waiter.done():
        waiter.set_result(None)


def _nothing() -> None:
    return None


def _follow_log_start(log: Log, leader_log_start: int) -> int:
    """Storage job: the follower's log start up to ``leader_log_start``, bounded by its high watermark."""
    target = min(leader_log_start, log.high_watermark)
    return log.delete_records_before(target) if target > log.log_start_offset else log.log_start_offset
