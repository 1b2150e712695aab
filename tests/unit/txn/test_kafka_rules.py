"""The state machine's rules that Kafka's clients lean on: KIP-360 re-initialization (which epochs an init may
name), KIP-890 verification (is a partition in the ongoing transaction), and group offsets whose generation is
not checked (-1) or kept once given."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    ProducerFencedError,
)
from transaction_coordinator import state as s


def test_an_init_may_name_the_current_epoch_or_retry_the_last_bump() -> None:
    st = s.TxnState(7, 3, s.COMPLETE_ABORT)
    assert s.check_init(st, 7, 3) is False  # the current producer recovering: bump
    bumped = s.bump(st, 1000, 10, last_epoch=3)
    assert (bumped.producer_epoch, bumped.last_epoch) == (4, 3)
    assert s.check_init(bumped, 7, 3) is True  # the same init retried: answer epoch 4 again
    for pid, epoch in ((7, 2), (8, 4), (7, 5)):
        with pytest.raises(ProducerFencedError):
            s.check_init(bumped, pid, epoch)
    fresh = s.bump(bumped, 1000, 11)  # a new instance (no epoch named) forgets the last one
    assert fresh.last_epoch == -1
    with pytest.raises(ProducerFencedError):
        s.check_init(fresh, 7, 3)
    assert s.fence_abort(s.add_partitions(bumped, 7, 4, [("t", 0)], 12), 13).last_epoch == -1
    assert s.TxnState.from_json(bumped.to_json()) == bumped


def test_verification_names_the_partitions_missing_from_the_ongoing_transaction() -> None:
    st = s.add_partitions(s.TxnState(7, 1), 7, 1, [("t", 0)], 10)
    assert s.verify_partitions(st, 7, 1, [("t", 0), ("t", 1)]) == [("t", 1)]
    assert s.verify_partitions(s.complete(s.end(st, 7, 1, True, 11)[0], 12), 7, 1, [("t", 0)]) == [("t", 0)]
    with pytest.raises(ConcurrentTransactionsError):
        s.verify_partitions(s.end(st, 7, 1, True, 11)[0], 7, 1, [("t", 0)])
    with pytest.raises(ProducerFencedError):
        s.verify_partitions(st, 7, 0, [("t", 0)])
    with pytest.raises(InvalidProducerIdMappingError):
        s.verify_partitions(st, 8, 1, [("t", 0)])
    with pytest.raises(InvalidProducerIdMappingError):
        s.verify_partitions(None, 7, 1, [("t", 0)])


def test_a_group_joins_without_a_generation_and_keeps_one_once_given() -> None:
    st = s.add_offsets(s.TxnState(7, 0), 7, 0, s.TxnOffsets("g", -1, ()), 10)  # AddOffsetsToTxn
    assert st.state == s.ONGOING and st.offsets == (s.TxnOffsets("g", -1, ()),)
    st = s.add_offsets(st, 7, 0, s.TxnOffsets("g", 5, (("t", 0, 9, ""),)), 11)  # TxnOffsetCommit
    st = s.add_offsets(st, 7, 0, s.TxnOffsets("g", -1, (("t", 1, 3, ""),)), 12)  # again without one
    assert st.offsets == (s.TxnOffsets("g", 5, (("t", 0, 9, ""), ("t", 1, 3, ""))),)
