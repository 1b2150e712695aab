"""Producer state (KIP-98): duplicates answered with original offsets, gaps and fenced epochs refused,
rebuilt from snapshots and the log, cut back on truncation, expired when idle."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.log.log import Log
from broker.replication.producer_state import (
    DuplicateAppend,
    IdempotencyKeys,
    ProducerStateManager,
    follower_append,
    leader_append,
    list_snapshots,
    next_sequence,
)
from odradek.protocol.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from odradek.protocol.records import encode_batch, iter_batch_headers


def batch(pid: int, seq: int, n: int = 2, epoch: int = 0, ts: int | None = None) -> bytes:
    ts = time.time_ns() // 1_000_000 if ts is None else ts  # recent: loading expires idle producers
    return encode_batch([(b"k", b"v%d" % i, ts, ()) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)


def append(log_: Log, state: ProducerStateManager, data: bytes) -> object:
    return leader_append(log_, bytearray(data), 0, state, None, None)


@pytest.fixture
def log_(tmp_path: Path) -> Log:
    return Log.open(tmp_path / "t-0")


def test_in_order_batches_append_and_a_duplicate_gets_the_original_offsets(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    first = append(log_, state, batch(7, 0))
    second = append(log_, state, batch(7, 2, n=3))
    assert (first.first_offset, second.first_offset, second.last_offset) == (0, 2, 4)
    again = append(log_, state, batch(7, 0))
    assert isinstance(again, DuplicateAppend)
    assert (again.first_offset, again.last_offset) == (0, 1)
    assert log_.log_end_offset == 5  # nothing written twice


def test_a_gap_is_out_of_order_and_writes_nothing(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    append(log_, state, batch(7, 0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log_, state, batch(7, 5))
    assert log_.log_end_offset == 2


def test_an_older_epoch_is_fenced_and_a_new_epoch_must_start_at_zero(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    append(log_, state, batch(7, 0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        append(log_, state, batch(7, 2, epoch=0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log_, state, batch(7, 2, epoch=2))
    append(log_, state, batch(7, 0, epoch=2))
    assert state.producers[7].epoch == 2


def test_unknown_producer_with_a_nonzero_sequence(log_: Log) -> None:
    with pytest.raises(UnknownProducerIdError):
        append(log_, ProducerStateManager(log_.dir), batch(9, 4))


def test_only_the_last_five_batches_are_remembered(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    for i in range(6):
        append(log_, state, batch(7, 2 * i))
    assert isinstance(append(log_, state, batch(7, 2)), DuplicateAppend)  # the second batch: still remembered
    with pytest.raises(OutOfOrderSequenceNumberError):
        append(log_, state, batch(7, 0))  # the first one has been forgotten


def test_a_duplicate_prefix_with_new_batches_appends_only_the_new_ones(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    append(log_, state, batch(7, 0))
    append(log_, state, batch(8, 0, n=3))  # another producer in between: offsets are not contiguous
    result = append(log_, state, batch(7, 0) + batch(7, 2))
    assert isinstance(result, DuplicateAppend)
    assert result.batch_offsets == (0, 5)
    assert log_.log_end_offset == 7


def test_followers_learn_and_a_reopened_log_is_rebuilt_from_snapshot_and_tail(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader")
    lstate = ProducerStateManager(leader.dir)
    for i in range(3):
        append(leader, lstate, batch(7, 2 * i))
    follower = Log.open(tmp_path / "follower")
    fstate = ProducerStateManager(follower.dir)
    follower_append(follower, leader.read(0, 1 << 20).data, fstate)
    assert fstate.producers[7].last_seq == lstate.producers[7].last_seq == 5
    assert fstate.write_snapshot() == 6
    follower_append(follower, bytes(_stamped(batch(7, 6), 6)), fstate)
    follower.close()
    reopened = Log.open(tmp_path / "follower")
    state = ProducerStateManager(reopened.dir)
    state.load(reopened)
    assert state.producers[7].last_seq == 7 and state.map_end_offset == 8
    assert list_snapshots(reopened.dir) == [6]


def test_truncation_rebuilds_below_the_cut(log_: Log) -> None:
    state = ProducerStateManager(log_.dir)
    for i in range(3):
        append(log_, state, batch(7, 2 * i))
    state.write_snapshot()
    log_.truncate_to(2)
    state.truncate(log_)
    assert state.producers[7].last_seq == 1 and list_snapshots(log_.dir) == []
    append(log_, state, batch(7, 2))  # the producer's retry of the truncated batch is accepted again


def test_idle_producers_expire() -> None:
    state = ProducerStateManager(None, expiration_ms=1000, now_ms=lambda: 5000)
    for h in (h for _, h in iter_batch_headers(_stamped(batch(7, 0, ts=3000), 0) + _stamped(batch(8, 0, ts=4500), 2))):
        state.record_leader_append([h], h.base_offset)
    assert state.expire() == 1 and set(state.producers) == {8}


def test_idempotency_keys_answer_a_retry_then_expire(log_: Log) -> None:
    keys = IdempotencyKeys(max_keys=2, ttl_ms=60_000)
    plain = encode_batch([(None, b"x", 1, ())])
    first = leader_append(log_, bytearray(plain), 0, None, keys, "k1")
    again = leader_append(log_, bytearray(plain), 0, None, keys, "k1")
    assert (again.first_offset, log_.log_end_offset) == (first.first_offset, 1)
    keys.put("k2", 0, 0, 1, 0)
    keys.put("k3", 0, 0, 1, 0)
    assert keys.get("k1", 0) is None  # bounded: the oldest went first


def test_sequences_wrap() -> None:
    assert next_sequence(2**31 - 1) == 0 and next_sequence(2**31 - 2, 3) == 1


def _stamped(data: bytes, offset: int) -> bytearray:
    from odradek.protocol.records import set_base_offset
    buf = bytearray(data)
    set_base_offset(buf, 0, offset, 0)
    return buf
