"""The transaction coordinator (Kafka's ``TransactionCoordinator``, KIP-98) with its state in ZooKeeper.

Which broker coordinates transactional id T: the one holding the ephemeral ``/transactions/T/coordinator``
znode, claimed by the first broker asked while nobody holds it, exactly as consumer groups do
(docs/consumer-groups.md "Who coordinates a group"). Its state is ``/transactions/T``
(transaction_coordinator/state.py),
re-read at every request and written conditionally on its zkVersion: a coordinator that lost its znode (a
session expiry) and still acts can only fail its write, never overwrite its successor's decision.

Completing a transaction: write Prepare{Commit,Abort} (the decision), then one marker per partition of the
transaction on that partition's leader (acks=all), then (for a commit) the group offsets, then Complete*. A crash
anywhere leaves either Ongoing (nothing decided: the timeout or the next init aborts it) or Prepare* (decided:
whoever coordinates next writes the markers again). Markers carry the transaction's own coordinator epoch
(``TxnState.coordinator_epoch``, one more at each decision), so a partition leader writes a transaction's marker
once: a second one (a retry, a deposed coordinator still retrying) is skipped, and one older than the last it wrote
is TRANSACTION_COORDINATOR_FENCED, instead of ending the producer's next transaction there. The sweep (every
``sweep_interval_s``, on every broker) finishes Prepare* states and aborts Ongoing ones past
``transaction.timeout.ms``, claiming ids whose coordinator died.

Concurrency: asyncio, one lock per transactional id on this broker; ZooKeeper I/O in threads. A request's place
in line is its ticket (``ticket()``), taken when it reaches this broker's router, before the ZooKeeper reads that
locate the coordinator, whose retries can reorder two requests: a request that reaches the id's lock after one
that arrived later was served is CONCURRENT_TRANSACTIONS (retriable), so a client's retry that overtook its first
attempt is never followed by that attempt (which, arriving after the client went on to its next transaction,
would end or join that one: Kafka's EndTxn names no transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

from odradek.protocol.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    NotCoordinatorError,
    ProducerFencedError,
)
from transaction_coordinator import state as s
from transaction_coordinator.state import TxnOffsets, TxnState
from zk.client import ZkClient
from zk.groups import GroupStore
from zk.transactions import StaleTxnStateError, TxnStore

log = logging.getLogger(__name__)

MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
MarkerWriter = Callable[[str, int, int, int, bool, int], Awaitable[None]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TxnCoordinator:
    # A PLANTED BUG, off by default (BrokerConfig.unsafe_partial_commit_markers; docs/verify.md): a commit of
    # several partitions writes no marker on its last partition, so the transaction is torn (and that partition's
    # LSO stuck). Only the broker's hidden flag sets it, for `odradek verify`'s self-test.
    unsafe_partial_commit_markers = False

    def __init__(self, broker_id: int, zk: ZkClient, broker_epoch: Callable[[], int | None],
                 next_producer_id: Callable[[], int], write_marker: MarkerWriter,
                 sweep_interval_s: float = 1.0) -> None:
        self.broker_id = broker_id
        self.store = TxnStore(zk)
        self.groups = GroupStore(zk)
        self._broker_epoch = broker_epoch
        self._next_pid = next_producer_id
        self._write_marker = write_marker
        self._sweep_interval = sweep_interval_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._tickets = itertools.count(1)
        self._served: dict[str, int] = {}  # per id, the newest ticket let through its lock
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._sweeper())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # --------------------------------------------------------------------------------------------- locating

    async def locate(self, tid: str) -> int:
        """The broker id coordinating ``tid``, claiming it if nobody does."""
        holder = await asyncio.to_thread(self.store.get_coordinator, tid)
        if holder is None:
            epoch = self._broker_epoch()
            if epoch is None:
                raise CoordinatorNotAvailableError("this broker is not registered in ZooKeeper right now")
            holder = await asyncio.to_thread(self.store.claim_coordinator, tid, self.broker_id, epoch)
        if holder < 0:
            raise CoordinatorNotAvailableError(f"the coordinator of transactional id {tid!r} is changing: retry")
        return holder

    async def _owned(self, tid: str) -> None:
        if await asyncio.to_thread(self.store.get_coordinator, tid) != self.broker_id:
            raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate transactional id {tid!r}")

    def _lock(self, tid: str) -> asyncio.Lock:
        return self._locks.setdefault(tid, asyncio.Lock())

    def ticket(self) -> int:
        """A request's place in line, taken as it reaches this broker (see the module docstring)."""
        return next(self._tickets)

    def _in_line(self, tid: str, ticket: int | None) -> None:
        """Under ``tid``'s lock: refuse a request overtaken by a later one already let through."""
        if ticket is None:
            return
        served = self._served.get(tid, 0)
        if ticket < served:
            raise ConcurrentTransactionsError(
                f"a later request of transactional id {tid!r} was served before this one: retry")
        self._served[tid] = ticket

    async def _read(self, tid: str) -> tuple[TxnState | None, int]:
        raw, version = await asyncio.to_thread(self.store.get_state, tid)
        return (None if raw is None else TxnState.from_json(raw)), version

    async def _write(self, tid: str, st: TxnState, version: int) -> int:
        """Conditional on ``version``; a lost race is CONCURRENT_TRANSACTIONS (retriable) for the caller."""
        try:
            return await asyncio.to_thread(self.store.set_state, tid, st.to_json(), version)
        except StaleTxnStateError:
            raise ConcurrentTransactionsError(f"the state of {tid!r} changed meanwhile: retry") from None

    # --------------------------------------------------------------------------------------------- requests

    async def init_producer_id(self) -> tuple[int, int]:
        """InitProducerId without a transactional id (an idempotent producer): a fresh producer id at epoch 0.
        Any broker answers it, no coordinator owns it: ids come from blocks claimed in ZooKeeper, so no two
        producers ever share one."""
        return await asyncio.to_thread(self._next_pid), 0

    async def init(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None = None,
                   ticket: int | None = None) -> tuple[int, int]:
        """InitProducerId with a transactional id: end what the previous epoch left, then bump the epoch.

        ``expected`` (KIP-360): the producer id and epoch the caller holds, when it re-initializes to recover;
        PRODUCER_FENCED unless they are the current ones (or the retry of an init that already bumped them)."""
        if not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
            raise InvalidTransactionTimeoutError(f"transaction.timeout.ms must be 1 to {MAX_TIMEOUT_MS}")
        async with self._lock(tid):
            self._in_line(tid, ticket)
            await self._owned(tid)
            st, version = await self._read(tid)
            if st is None:  # a new id: whatever the caller held, it starts afresh (Kafka: no epoch to check)
                pid = await asyncio.to_thread(self._next_pid)
                st = TxnState(pid, 0, s.EMPTY, timeout_ms=timeout_ms, updated_ms=now_ms())
                await self._write(tid, st, version)
                return st.producer_id, st.producer_epoch
            if expected is not None and s.check_init(st, *expected):
                return st.producer_id, st.producer_epoch
            if st.state == s.ONGOING:  # a previous instance's open transaction: abort it, fencing that instance
                st = s.fence_abort(st, now_ms())
                version = await self._write(tid, st, version)
            if st.state in s.PREPARED:
                st, version = await self._complete(tid, st, version)
            new_pid = await asyncio.to_thread(self._next_pid) if st.producer_epoch >= s.MAX_EPOCH else None
            st = s.bump(st, timeout_ms, now_ms(), new_pid, -1 if expected is None else expected[1])
            await self._write(tid, st, version)
            return st.producer_id, st.producer_epoch

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                             txn: int | None = None, ticket: int | None = None) -> int:
        """AddPartitionsToTxn to transaction ``txn`` (``state.number``; None or NEW_TXN: the open one, or a new
        one); the number of the transaction they are in."""
        async with self._lock(tid):
            self._in_line(tid, ticket)
            await self._owned(tid)
            st, version = await self._need(tid)
            new = s.add_partitions(st, pid, epoch, partitions, now_ms(), txn)
            if new != st:
                await self._write(tid, new, version)
            return s.number(new)

    async def add_offsets(self, tid: str, pid: int, epoch: int, offsets: TxnOffsets, txn: int | None = None,
                          ticket: int | None = None) -> int:
        """send_offsets_to_transaction: checked against the group's generation now and again at commit (when the
        offsets name one: generation -1 is not checked, as Kafka's group coordinator does not); the number of the
        transaction they ride on (``txn`` as for ``add_partitions``)."""
        generation = None
        if offsets.generation >= 0:
            generation = await asyncio.to_thread(self.store.group_generation, offsets.group)
        if generation is not None and generation != offsets.generation:
            raise IllegalGenerationError(
                f"group {offsets.group!r} is at generation {generation}, not {offsets.generation}")
        async with self._lock(tid):
            self._in_line(tid, ticket)
            await self._owned(tid)
            st, version = await self._need(tid)
            new = s.add_offsets(st, pid, epoch, offsets, now_ms(), txn)
            await self._write(tid, new, version)
            return s.number(new)

    async def end(self, tid: str, pid: int, epoch: int, commit: bool, txn: int | None = None,
                  ticket: int | None = None) -> str:
        """EndTxn of transaction ``txn`` (``state.number``; None: the open one): decide (Prepare*), write the
        markers and offsets, complete; the final state's name."""
        async with self._lock(tid):
            self._in_line(tid, ticket)
            await self._owned(tid)
            st, version = await self._need(tid)
            s.check_end(st, pid, epoch, commit, txn)
            if commit and st.state == s.ONGOING and not await self._generations_hold(st):
                st = s.fence_abort(st, now_ms())
                version = await self._write(tid, st, version)
                await self._complete(tid, st, version)
                raise IllegalGenerationError("a group rebalanced during the transaction: it was aborted")
            new, work = s.end(st, pid, epoch, commit, now_ms(), txn)
            if not work:
                return new.state
            if new != st:
                version = await self._write(tid, new, version)
            done, _ = await self._complete(tid, new, version)
            return done.state

    async def describe(self, tid: str) -> dict[str, object]:
        st, _ = await self._read(tid)
        holder = await asyncio.to_thread(self.store.get_coordinator, tid)
        return {"transactional_id": tid, "coordinator": holder, **(st.to_json() if st else {"state": None})}

    async def state_of(self, tid: str) -> TxnState | None:
        """The id's state as ZooKeeper holds it (any broker may read it; None: no producer ever initialized)."""
        st, _ = await self._read(tid)
        return st

    async def verify(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """KIP-890's verification, for a partition leader about to append a transaction's first batch: which of
        ``partitions`` are not in the producer's ongoing transaction (raises as ``state.verify_partitions``).

        Any broker answers from ZooKeeper, no coordinator needed: AddPartitionsToTxn is answered only after its
        write, so a producer that was told a partition is in its transaction finds it there. A ZooKeeper server
        may lag behind the one the coordinator wrote through, so a negative answer is read again after a sync."""
        st, _ = await self._read(tid)
        try:
            if not s.verify_partitions(st, pid, epoch, partitions):
                return []
        except (InvalidProducerIdMappingError, ProducerFencedError):
            pass  # perhaps a lagging read of an init: decided on the fresh read below
        raw, _ = await asyncio.to_thread(self.store.get_state, tid, True)
        return s.verify_partitions(None if raw is None else TxnState.from_json(raw), pid, epoch, partitions)

    async def list_states(self, include_unclaimed: bool) -> list[tuple[str, TxnState]]:
        """The ids this broker coordinates, with their states (ListTransactions asks every broker and merges, as
        Kafka's admin client does); ``include_unclaimed`` adds the ids nobody coordinates right now (one broker
        lists them, so that each id is listed once)."""
        out = []
        for tid in await asyncio.to_thread(self.store.list_ids):
            holder = await asyncio.to_thread(self.store.get_coordinator, tid)
            if holder != self.broker_id and not (include_unclaimed and holder is None):
                continue
            st, _ = await self._read(tid)
            if st is not None:
                out.append((tid, st))
        return out

    async def _need(self, tid: str) -> tuple[TxnState, int]:
        st, version = await self._read(tid)
        if st is None:  # Kafka's answer for an id it has no metadata for
            raise InvalidProducerIdMappingError(f"transactional id {tid!r} has no producer: call init_transactions")
        return st, version

    async def _generations_hold(self, st: TxnState) -> bool:
        for o in st.offsets:
            if o.generation < 0:
                continue
            generation = await asyncio.to_thread(self.store.group_generation, o.group)
            if generation is not None and generation != o.generation:
                return False
        return True

    async def _complete(self, tid: str, st: TxnState, version: int) -> tuple[TxnState, int]:
        """Markers on every partition (in parallel), the group offsets of a commit, then Complete*."""
        commit = st.state == s.PREPARE_COMMIT
        coordinator_epoch = st.coordinator_epoch
        partitions = list(st.partitions)
        if commit and self.unsafe_partial_commit_markers and len(partitions) > 1:
            partitions = partitions[:-1]  # the planted bug: one partition never gets its COMMIT marker
        await asyncio.gather(*(self._write_marker(t, p, st.producer_id, st.producer_epoch, commit,
                                                  coordinator_epoch) for t, p in partitions))
        if commit and st.offsets:
            ts = now_ms()
            for o in st.offsets:
                await asyncio.to_thread(self.groups.commit_offsets, o.group,
                                        {(t, p): (off, meta, ts) for t, p, off, meta in o.offsets})
        done = s.complete(st, now_ms())
        return done, await self._write(tid, done, version)

    # ------------------------------------------------------------------------------------------------ sweep

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # ZooKeeper away, a leader moving: the next round tries again
                log.info("transaction sweep on broker %d: %s", self.broker_id, e)

    async def sweep(self) -> None:
        """Abort timed-out transactions and finish decided ones, for ids this broker coordinates or whose
        coordinator is gone (then this broker claims them)."""
        for tid in await asyncio.to_thread(self.store.list_ids):
            st, _ = await self._read(tid)
            if st is None or not (st.state in s.PREPARED or s.expired(st, now_ms())):
                continue
            holder = await asyncio.to_thread(self.store.get_coordinator, tid)
            if holder is None:
                holder = await self.locate(tid)
            if holder != self.broker_id:
                continue
            async with self._lock(tid):
                st, version = await self._read(tid)
                if st is None:
                    continue
                try:
                    if s.expired(st, now_ms()):
                        log.info("transaction of %r timed out after %d ms: aborting", tid, st.timeout_ms)
                        st = s.fence_abort(st, now_ms())
                        version = await self._write(tid, st, version)
                    if st.state in s.PREPARED:
                        await self._complete(tid, st, version)
                except ConcurrentTransactionsError:
                    continue
