"""The transaction state machine, the producer state's transaction tracking and the read_committed filter."""

from __future__ import annotations

import pytest

from broker.replication.producer_state import ProducerStateManager
from odradek.protocol.errors import InvalidTxnStateError, ProducerFencedError
from odradek.protocol.records import encode_batch, iter_batch_headers, set_base_offset
from odradek.protocol.records.control import ABORT, COMMIT, encode_marker, marker_type
from transaction_coordinator import state as s
from transaction_coordinator.markers import drop_aborted


def test_commit_path_and_fencing() -> None:
    st = s.TxnState(7, 0)
    st = s.add_partitions(st, 7, 0, [("t", 1), ("t", 0)], now_ms=10)
    assert st.state == s.ONGOING and st.partitions == (("t", 0), ("t", 1))
    with pytest.raises(ProducerFencedError):
        s.add_partitions(s.bump(s.complete(s.end(st, 7, 0, False, 11)[0], 12), 1000, 13), 7, 0, [("t", 2)], 14)
    prepared, work = s.end(st, 7, 0, True, 20)
    assert prepared.state == s.PREPARE_COMMIT and work
    assert s.end(prepared, 7, 0, True, 21) == (prepared, True)  # a retry completes again
    with pytest.raises(InvalidTxnStateError):
        s.end(prepared, 7, 0, False, 21)
    done = s.complete(prepared, 30)
    assert done.state == s.COMPLETE_COMMIT and done.partitions == ()
    assert s.TxnState.from_json(done.to_json()) == done


def test_timeout_aborts_with_a_bumped_epoch() -> None:
    st = s.add_partitions(s.TxnState(1, 3, timeout_ms=100), 1, 3, [("t", 0)], now_ms=0)
    assert not s.expired(st, 100) and s.expired(st, 101)
    aborted = s.fence_abort(st, 101)
    assert aborted.state == s.PREPARE_ABORT and aborted.producer_epoch == 4


def test_each_decision_gives_its_transactions_markers_a_newer_coordinator_epoch() -> None:
    """Markers carry the transaction's coordinator epoch: a retry of the same decision keeps it, every later
    decision (a commit, an abort, a fencing abort) has a greater one, and it survives ZooKeeper's JSON."""
    st = s.add_partitions(s.TxnState(7, 0), 7, 0, [("t", 0)], now_ms=1)
    first, _ = s.end(st, 7, 0, True, 2)
    assert first.coordinator_epoch == st.coordinator_epoch + 1
    assert s.end(first, 7, 0, True, 3)[0].coordinator_epoch == first.coordinator_epoch  # a retry: the same
    nxt = s.add_partitions(s.complete(first, 4), 7, 0, [("t", 0)], now_ms=5)
    second, _ = s.end(nxt, 7, 0, False, 6)
    assert second.coordinator_epoch == first.coordinator_epoch + 1
    fenced = s.fence_abort(s.add_partitions(s.complete(second, 7), 7, 0, [("t", 0)], now_ms=8), 9)
    assert fenced.coordinator_epoch == second.coordinator_epoch + 1
    assert s.TxnState.from_json(fenced.to_json()).coordinator_epoch == fenced.coordinator_epoch


def _stamp(batch: bytes, offset: int) -> bytes:
    buf = bytearray(batch)
    set_base_offset(buf, 0, offset, 0)
    return bytes(buf)


def test_producer_state_tracks_lso_and_aborted_transactions() -> None:
    state = ProducerStateManager()
    data = _stamp(encode_batch([(None, b"a", 1, ())], producer_id=5, producer_epoch=0, base_sequence=0,
                               is_transactional=True), 0)
    plain = _stamp(encode_batch([(None, b"p", 1, ())]), 1)
    marker = _stamp(encode_marker(5, 0, False, 0, 2), 2)
    state.apply(data + plain)
    assert state.first_unstable() == 0
    state.apply(marker)
    assert state.first_unstable() is None and state.aborted == [(5, 0, 2)]
    assert marker_type(marker, 0) == ABORT and marker_type(encode_marker(5, 0, True, 0, 2), 0) == COMMIT
    kept = drop_aborted(data + plain + marker, state.aborted_between(0, 3))
    assert [h.base_offset for _, h in iter_batch_headers(kept)] == [1, 2]
    restored = ProducerStateManager()
    restored.decode_into(state.encode())
    assert restored.aborted == state.aborted and restored.ongoing == {}


def test_a_late_end_or_add_naming_an_earlier_transaction_is_refused() -> None:
    """A client retried its commit of transaction n elsewhere, was answered, and began n+1: the first attempt,
    reaching the coordinator late, names n and can neither commit n+1 nor add to it; the client's own calls, which
    name n+1, still work, and a retry of n's end while n is the last decided one is answered as before."""
    st = s.add_partitions(s.TxnState(7, 0), 7, 0, [("t", 0)], now_ms=1, txn=s.NEW_TXN)
    n = s.number(st)
    committed = s.complete(s.end(st, 7, 0, True, 2, txn=n)[0], 3)
    assert s.number(committed) == n and s.end(committed, 7, 0, True, 4, txn=n) == (committed, False)
    nxt = s.add_partitions(committed, 7, 0, [("t", 1)], now_ms=5, txn=s.NEW_TXN)
    assert nxt.state == s.ONGOING and s.number(nxt) == n + 1
    with pytest.raises(InvalidTxnStateError, match=f"cannot commit transaction {n}"):
        s.end(nxt, 7, 0, True, 6, txn=n)
    with pytest.raises(InvalidTxnStateError, match=f"transaction {n} of this producer is over"):
        s.add_partitions(nxt, 7, 0, [("t", 2)], now_ms=6, txn=n)
    with pytest.raises(InvalidTxnStateError, match="over"):
        s.add_offsets(nxt, 7, 0, s.TxnOffsets("g", -1, (("t", 0, 5, ""),)), 6, txn=n)
    assert s.add_partitions(nxt, 7, 0, [("t", 2)], now_ms=7, txn=n + 1).partitions == (("t", 1), ("t", 2))
    assert s.end(nxt, 7, 0, True, 8, txn=n + 1)[0].state == s.PREPARE_COMMIT
    assert s.end(nxt, 7, 0, True, 8)[0].state == s.PREPARE_COMMIT  # no number (Kafka's EndTxn): the open one


def test_an_end_naming_no_answered_add_commits_nothing_it_did_not_see() -> None:
    """NEW_TXN: the producer was never answered an add. Its commit must not decide a transaction that is open
    (someone's late add began it); its abort ends it, and on an idle id both are no-ops."""
    idle = s.TxnState(7, 0)
    assert s.end(idle, 7, 0, True, 1, txn=s.NEW_TXN) == (idle, False)
    ongoing = s.add_partitions(idle, 7, 0, [("t", 0)], now_ms=1)
    with pytest.raises(InvalidTxnStateError, match="never told were added"):
        s.end(ongoing, 7, 0, True, 2, txn=s.NEW_TXN)
    assert s.end(ongoing, 7, 0, False, 2, txn=s.NEW_TXN)[0].state == s.PREPARE_ABORT
