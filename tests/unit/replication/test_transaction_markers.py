"""Transaction markers on a partition: each transaction's marker is written once, and no marker ends a later
transaction than its own (a retried or a deposed coordinator's late marker), on the leader, on followers and after
a reload. The coordinator epoch a marker carries is its transaction's (one more at each decision)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.replication.producer_state import (
    LEGACY_COORDINATOR_EPOCH,
    ProducerStateManager,
    follower_append,
    leader_append,
    marker_append,
)
from odradek.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from odradek.protocol.records import encode_batch, iter_batch_headers
from odradek.protocol.records.control import ABORT, COMMIT, encode_marker
from transaction_coordinator.markers import drop_aborted

PID = 7


def txn_batch(seq: int, epoch: int = 0) -> bytearray:
    ts = time.time_ns() // 1_000_000
    return bytearray(encode_batch([(b"k", b"v%d" % seq, ts, ())], producer_id=PID, producer_epoch=epoch,
                                  base_sequence=seq, is_transactional=True))


def marker(log_: Log, state: ProducerStateManager, commit: bool, coordinator_epoch: int, epoch: int = 0) -> object:
    batch = bytearray(encode_marker(PID, epoch, commit, coordinator_epoch, time.time_ns() // 1_000_000))
    return marker_append(log_, batch, 0, state, PID, epoch, COMMIT if commit else ABORT, coordinator_epoch)


def committed_read(log_: Log, state: ProducerStateManager) -> list[int]:
    """Offsets of the data batches a read_committed read of the whole log returns."""
    end = state.first_unstable() if state.first_unstable() is not None else log_.log_end_offset
    data = log_.read(0, 1 << 20, max_offset=end).data
    kept = drop_aborted(data, state.aborted_between(0, end))
    return [h.base_offset for _, h in iter_batch_headers(kept) if not h.is_control]


@pytest.fixture
def log_(tmp_path: Path) -> Log:
    return Log.open(tmp_path / "t-0")


def test_a_late_commit_marker_of_the_previous_transaction_does_not_end_the_next_one(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)  # transaction 1 (offset 0)
    assert marker(log_, state, True, 1) is not None  # its commit (offset 1), coordinator epoch 1
    leader_append(log_, txn_batch(1), 0, state, None, None)  # transaction 2 (offset 2)
    assert marker(log_, state, True, 1) is None  # transaction 1's commit again (a retry): not written
    assert state.ongoing == {PID: 2} and log_.log_end_offset == 3
    marker(log_, state, False, 2)  # transaction 2 aborts
    assert committed_read(log_, state) == [0]  # its batch is never read as committed (G1a)


def test_a_late_abort_marker_does_not_drop_the_next_transactions_committed_batches(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)
    marker(log_, state, False, 1)  # transaction 1 aborted
    leader_append(log_, txn_batch(1), 0, state, None, None)  # transaction 2
    assert marker(log_, state, False, 1) is None  # transaction 1's abort again
    marker(log_, state, True, 2)
    assert committed_read(log_, state) == [2]  # transaction 2 whole (no lost write), transaction 1 dropped


def test_an_older_transactions_marker_after_a_newer_one_is_fenced(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)
    marker(log_, state, True, 5)
    leader_append(log_, txn_batch(1), 0, state, None, None)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log_, state, False, 4)
    assert state.ongoing == {PID: 2} and log_.log_end_offset == 3
    with pytest.raises(InvalidProducerEpochError):  # the producer epoch is checked first, as before
        state.check_marker(PID, -1, 9)


def test_followers_and_a_reloaded_replica_know_the_last_markers_epoch(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader")
    lstate = ProducerStateManager(leader.dir)
    leader_append(leader, txn_batch(0), 0, lstate, None, None)
    marker(leader, lstate, True, 3)
    leader_append(leader, txn_batch(1), 0, lstate, None, None)
    follower = Log.open(tmp_path / "follower")
    fstate = ProducerStateManager(follower.dir)
    follower_append(follower, leader.read(0, 1 << 20).data, fstate)
    assert fstate.producers[PID].coordinator_epoch == 3
    assert not fstate.check_marker(PID, 0, 3)  # a new leader skips the same transaction's marker too
    fstate.write_snapshot()
    follower.close()
    reopened = Log.open(tmp_path / "follower")
    state = ProducerStateManager(reopened.dir)
    state.load(reopened)
    assert state.producers[PID].coordinator_epoch == 3 and state.ongoing == {PID: 2}
    with pytest.raises(TransactionCoordinatorFencedError):
        state.check_marker(PID, 0, 2)


def test_legacy_markers_capped_coordinator_epochs_neither_fence_nor_are_fenced(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)
    marker(log_, state, True, LEGACY_COORDINATOR_EPOCH)  # a broker epoch, capped: says nothing about order
    assert state.producers[PID].coordinator_epoch == -1
    leader_append(log_, txn_batch(1), 0, state, None, None)
    assert marker(log_, state, True, 1) is not None and state.ongoing == {}


# ---------------------------------------------------------------------------------- verification guards (KIP-890)


def test_a_batch_verified_before_a_marker_does_not_open_a_transaction_after_it(log_: Log) -> None:
    """The window between the coordinator's answer and the append: a marker for the producer in between
    drops its guard, and the batch is refused instead of opening a transaction nobody will end."""
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)  # transaction 1 open here
    guard = state.verification_guard(PID)  # a produce of transaction 1's next batch asks the coordinator...
    marker(log_, state, False, 1)  # ...while transaction 1 is aborted here
    with pytest.raises(InvalidTxnStateError):
        leader_append(log_, txn_batch(1), 0, state, None, None, {PID: guard})
    assert state.ongoing == {} and log_.log_end_offset == 2  # nothing written, nothing left open


def test_a_late_batch_of_an_ended_transaction_is_refused_even_without_a_question(log_: Log) -> None:
    """The produce saw the transaction open and asked nothing (no guard); it ended before the append."""
    state = ProducerStateManager(log_.dir)
    leader_append(log_, txn_batch(0), 0, state, None, None)
    marker(log_, state, True, 1)
    with pytest.raises(InvalidTxnStateError):
        leader_append(log_, txn_batch(1), 0, state, None, None, {})
    assert state.ongoing == {} and state.first_unstable() is None


def test_a_verified_guard_opens_the_transaction_and_a_concurrent_batch_joins_it(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    guard = state.verification_guard(PID)
    assert state.verification_guard(PID) is guard  # concurrent produces of the producer share it
    leader_append(log_, txn_batch(0), 0, state, None, None, {PID: guard})
    assert state.ongoing == {PID: 0} and PID not in state.guards  # used up: the transaction is open
    leader_append(log_, txn_batch(1), 0, state, None, None, {PID: guard})  # joins the open transaction
    leader_append(log_, txn_batch(1), 0, state, None, None, {})  # a retry: a duplicate, answered, not refused
    assert log_.log_end_offset == 2
