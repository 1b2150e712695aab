"""The transaction state machine of one transactional id: pure, so every rule is unit-tested without a cluster.

States (Kafka's ``TransactionState``)::

    Empty --add partitions/offsets--> Ongoing --commit--> PrepareCommit --markers written--> CompleteCommit
                                      Ongoing --abort / timeout / fencing init--> PrepareAbort --> CompleteAbort
    Complete* --add partitions--> Ongoing (the next transaction)

The Prepare* write is the decision: once it is in ZooKeeper the transaction *will* end that way, whoever
coordinates next (a new coordinator finishes a Prepare* it finds). Before it, the transaction can only be
aborted. So a coordinator crash at any point ends in commit or abort of every partition, never half.

Fencing: every request names the producer id and epoch; an older epoch is PRODUCER_FENCED. init_transactions
bumps the epoch (after ending whatever the old epoch left open), which is what fences a zombie. An init that names
the producer id and epoch it had (KIP-360: a producer recovering from an error, or retrying an init whose answer was
lost) must name the current epoch, or the one before the last bump (``last_epoch``, then the bump already happened
and its result is answered again); any other is PRODUCER_FENCED.

Transaction numbers: a transaction's number is the coordinator epoch its decision carries (``number``). A client
that names the number it was told (the HTTP API's ``transaction`` field) binds its adds and its end to that one
transaction: a request that a broker held up while the client retried and went on to its next transaction (a late
forward) names an older number and is INVALID_TXN_STATE, instead of ending, or adding to, the transaction open now.
Without a number (Kafka's EndTxn before KIP-890's second part has none) the id's current transaction is meant.

Group offsets: a group joins a transaction (AddOffsetsToTxn) with generation -1; its offsets (TxnOffsetCommit)
carry the group generation they were read under, or -1 when there is none to check (an assign-mode consumer, a
client older than KIP-447), as Kafka's group coordinator checks a generation only when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from odradek.protocol.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
MAX_EPOCH = 32766  # int16, with room for one fencing bump
TP = tuple[str, int]
NEW_TXN = -1  # a client's transaction number before any add of the transaction was answered


@dataclass(frozen=True)
class TxnOffsets:
    """A consume-transform-produce transaction's group offsets, written to the group at commit."""

    group: str
    generation: int
    offsets: tuple[tuple[str, int, int, str], ...]  # topic, partition, next offset, metadata


@dataclass(frozen=True)
class TxnState:
    producer_id: int
    producer_epoch: int
    state: str = EMPTY
    partitions: tuple[TP, ...] = ()
    timeout_ms: int = 60_000
    start_ms: int = -1
    offsets: tuple[TxnOffsets, ...] = ()
    updated_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    last_epoch: int = -1  # the epoch before the last KIP-360 bump (-1: none): a retried init names it
    # The coordinator epoch this transaction's markers carry: one more at every decision (Prepare*), so each
    # transaction of the id has its own, growing. A partition leader refuses a marker below the last one it
    # wrote for the producer and skips one equal to it (that transaction's marker again: a retry, or a deposed
    # coordinator's late write), so no marker ends a later transaction than its own.
    coordinator_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "state": self.state, "partitions": [list(tp) for tp in self.partitions], "timeout_ms": self.timeout_ms,
            "start_ms": self.start_ms, "updated_ms": self.updated_ms, "last_producer_epoch": self.last_epoch,
            "coordinator_epoch": self.coordinator_epoch,
            "offsets": [{"group": o.group, "generation": o.generation, "offsets": [list(x) for x in o.offsets]}
                        for o in self.offsets],
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> TxnState:
        return TxnState(
            int(obj["producer_id"]), int(obj["producer_epoch"]), str(obj["state"]),
            tuple((str(t), int(p)) for t, p in obj.get("partitions", ())), int(obj.get("timeout_ms", 60_000)),
            int(obj.get("start_ms", -1)),
            tuple(TxnOffsets(str(o["group"]), int(o["generation"]),
                             tuple((str(t), int(p), int(off), str(m)) for t, p, off, m in o["offsets"]))
                  for o in obj.get("offsets", ())),
            int(obj.get("updated_ms", 0)), last_epoch=int(obj.get("last_producer_epoch", -1)),
            coordinator_epoch=int(obj.get("coordinator_epoch", 0)))


def check_producer(st: TxnState, producer_id: int, epoch: int) -> None:
    if producer_id != st.producer_id:
        raise InvalidProducerIdMappingError(
            f"producer id {producer_id} is not this transactional id's ({st.producer_id})")
    if epoch < st.producer_epoch:
        raise ProducerFencedError(
            f"producer epoch {epoch} is older than the transactional id's epoch {st.producer_epoch}: fenced")
    if epoch > st.producer_epoch:
        raise InvalidProducerIdMappingError(f"producer epoch {epoch} is newer than the coordinator's")


def number(st: TxnState) -> int:
    """The number of the id's current transaction (an Ongoing one's decision will carry one more coordinator
    epoch than the last), or of the last decided one when none is open."""
    return st.coordinator_epoch + 1 if st.state == ONGOING else st.coordinator_epoch


def _check_adding(st: TxnState, txn: int | None) -> None:
    """An add naming transaction ``txn`` goes to that transaction only while it is open (NEW_TXN or no number:
    to the open one, or it begins one)."""
    if txn is None or txn == NEW_TXN or (st.state == ONGOING and number(st) == txn):
        return
    raise InvalidTxnStateError(
        f"transaction {txn} of this producer is over (the transactional id is {st.state} at transaction "
        f"{number(st)}): abort it")


def check_end(st: TxnState, producer_id: int, epoch: int, commit: bool, txn: int | None) -> None:
    """Whether an EndTxn naming transaction ``txn`` may end the id's current transaction: a number that is not
    the current one is a late request of an earlier transaction; a commit that names none added (NEW_TXN) while a
    transaction is open would commit adds its producer never saw answered (abort then)."""
    check_producer(st, producer_id, epoch)
    if txn is None:
        return
    if txn == NEW_TXN:
        if commit and st.state == ONGOING:
            raise InvalidTxnStateError(
                f"transaction {number(st)} is open with partitions or offsets this producer was never told were "
                f"added: abort it")
        return
    if number(st) != txn:
        raise InvalidTxnStateError(
            f"cannot {'commit' if commit else 'abort'} transaction {txn}: this transactional id is {st.state} at "
            f"transaction {number(st)} (a late request of an earlier transaction)")


def _begin_if_idle(st: TxnState, now_ms: int) -> TxnState:
    if st.state in PREPARED:
        raise ConcurrentTransactionsError("the previous transaction is still being completed")
    if st.state in IDLE:
        return replace(st, state=ONGOING, partitions=(), offsets=(), start_ms=now_ms)
    return st


def add_partitions(st: TxnState, producer_id: int, epoch: int, partitions: list[TP], now_ms: int,
                   txn: int | None = None) -> TxnState:
    """AddPartitionsToTxn: the first send to a partition in a transaction registers it here first."""
    check_producer(st, producer_id, epoch)
    _check_adding(st, txn)
    st = _begin_if_idle(st, now_ms)
    merged = tuple(sorted(set(st.partitions) | {(t, int(p)) for t, p in partitions}))
    return replace(st, partitions=merged, updated_ms=now_ms)


def add_offsets(st: TxnState, producer_id: int, epoch: int, offsets: TxnOffsets, now_ms: int,
                txn: int | None = None) -> TxnState:
    """send_offsets_to_transaction: the group's offsets ride on the transaction (the latest per partition)."""
    check_producer(st, producer_id, epoch)
    _check_adding(st, txn)
    st = _begin_if_idle(st, now_ms)
    others = [o for o in st.offsets if o.group != offsets.group]
    previous = next((o for o in st.offsets if o.group == offsets.group), None)
    merged: dict[tuple[str, int], tuple[str, int, int, str]] = {}
    for entry in (previous.offsets if previous else ()) + offsets.offsets:
        merged[(entry[0], entry[1])] = entry
    # A generation once given stays checked: a later call without one (AddOffsetsToTxn) does not drop it.
    generation = offsets.generation if offsets.generation >= 0 or previous is None else previous.generation
    combined = TxnOffsets(offsets.group, generation, tuple(merged[k] for k in sorted(merged)))
    return replace(st, offsets=(*others, combined), updated_ms=now_ms)


def verify_partitions(st: TxnState | None, producer_id: int, epoch: int, partitions: list[TP]) -> list[TP]:
    """Which of ``partitions`` are *not* in ``producer_id``'s ongoing transaction at ``epoch`` (KIP-890's
    verification, asked by a partition leader before a transaction's first batch there). Raises as Kafka's
    coordinator answers a verification: INVALID_PRODUCER_ID_MAPPING for another producer id (or no state),
    PRODUCER_FENCED for another epoch, CONCURRENT_TRANSACTIONS while a transaction is being completed."""
    if st is None or producer_id != st.producer_id:
        raise InvalidProducerIdMappingError(f"producer id {producer_id} is not this transactional id's")
    if epoch != st.producer_epoch:
        raise ProducerFencedError(f"producer epoch {epoch} is not the transactional id's epoch {st.producer_epoch}")
    if st.state in PREPARED:
        raise ConcurrentTransactionsError("the transaction is being completed")
    if st.state != ONGOING:
        return list(partitions)
    added = set(st.partitions)
    return [tp for tp in partitions if tp not in added]


def check_init(st: TxnState, producer_id: int, epoch: int) -> bool:
    """KIP-360: an init naming ``producer_id`` and ``epoch``. True when it retries an init that already bumped
    the epoch (answer the current one again, bump nothing); False when it may bump; PRODUCER_FENCED when another
    instance has initialized since."""
    if producer_id == st.producer_id:
        if epoch == st.producer_epoch:
            return False
        if epoch == st.last_epoch and st.state in IDLE:
            return True
    raise ProducerFencedError(
        f"producer {producer_id} epoch {epoch} is not the current producer of this transactional id "
        f"({st.producer_id} epoch {st.producer_epoch}): another instance has initialized since")


def end(st: TxnState, producer_id: int, epoch: int, commit: bool, now_ms: int,
        txn: int | None = None) -> tuple[TxnState, bool]:
    """EndTxn: (the new state, whether it must be written and completed). A retry of a decided end is
    answered as it was; the opposite end is INVALID_TXN_STATE, and so is one naming another transaction
    (``check_end``)."""
    check_end(st, producer_id, epoch, commit, txn)
    want_prepare = PREPARE_COMMIT if commit else PREPARE_ABORT
    want_complete = COMPLETE_COMMIT if commit else COMPLETE_ABORT
    if st.state == ONGOING:
        return replace(st, state=want_prepare, updated_ms=now_ms, coordinator_epoch=st.coordinator_epoch + 1), True
    if st.state == want_prepare:
        return st, True  # a retry while (or after a coordinator died while) completing
    if st.state == want_complete or (st.state == EMPTY and not st.partitions):
        return st, False
    raise InvalidTxnStateError(f"cannot {'commit' if commit else 'abort'} a transaction in state {st.state}")


def complete(st: TxnState, now_ms: int) -> TxnState:
    """After every marker is written (and, for a commit, the offsets): the transaction is over."""
    done = COMPLETE_COMMIT if st.state == PREPARE_COMMIT else COMPLETE_ABORT
    return replace(st, state=done, partitions=(), offsets=(), updated_ms=now_ms)


def expired(st: TxnState, now_ms: int) -> bool:
    return st.state == ONGOING and st.start_ms >= 0 and now_ms - st.start_ms > st.timeout_ms


def fence_abort(st: TxnState, now_ms: int) -> TxnState:
    """Abort an Ongoing transaction with a bumped epoch (timeout, or a new instance's init): the markers carry
    the new epoch, so the old producer's next batch and its commit are both refused."""
    return replace(st, state=PREPARE_ABORT, producer_epoch=st.producer_epoch + 1, updated_ms=now_ms, last_epoch=-1,
                   coordinator_epoch=st.coordinator_epoch + 1)


def bump(st: TxnState, timeout_ms: int, now_ms: int, new_producer_id: int | None = None,
         last_epoch: int = -1) -> TxnState:
    """init_transactions on an idle state: the next epoch (a fresh producer id when the epoch runs out).
    ``last_epoch``: the epoch a KIP-360 init named, kept so that its retry is recognised (-1: a new instance)."""
    if st.state not in IDLE:
        raise ConcurrentTransactionsError(f"the transaction is {st.state}: finish it first")
    if st.producer_epoch >= MAX_EPOCH and new_producer_id is not None:
        return TxnState(new_producer_id, 0, EMPTY, timeout_ms=timeout_ms, updated_ms=now_ms)
    return replace(st, producer_epoch=st.producer_epoch + 1, state=EMPTY, partitions=(), offsets=(),
                   timeout_ms=timeout_ms, start_ms=-1, updated_ms=now_ms, last_epoch=last_epoch)
