"""The producer's batching rules (RecordAccumulator), driven with an explicit clock: no threads, no broker."""

from __future__ import annotations

import random
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.accumulator import (
    ABORTED,
    APPENDED,
    APPENDED_WAKE,
    ProducerBatch,
    RecordAccumulator,
    append_keyless,
    estimate_size,
)
from odradek.client.types import RecordMetadata, TopicPartition
from odradek.protocol.partitioner import DefaultPartitioner
from odradek.protocol.records import GZIP, HEADER_SIZE, NONE, decode_records

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
URL = "http://127.0.0.1:9092"


def leader(tp: TopicPartition) -> str | None:
    return URL


def add(acc: RecordAccumulator, tp: TopicPartition, value: bytes, now: float = 0.0, ts: int = 1000,
        key: bytes | None = None) -> tuple[int, Future[RecordMetadata]]:
    fut: Future[RecordMetadata] = Future()
    rec = (key, value, ts, ())
    return acc.append(tp, rec, fut, estimate_size(key, value), now), fut


def test_records_of_a_partition_pack_into_one_batch_until_batch_size() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=5)
    size = estimate_size(None, b"x" * 100)  # 121
    results = [add(acc, TP, b"x" * 100)[0] for _ in range(7)]  # 61 + 7 * 121 = 908 <= 1000
    assert results == [APPENDED_WAKE] + [APPENDED] * 6
    [batch] = acc.queued(TP)
    assert len(batch) == 7 and batch.size == HEADER_SIZE + 7 * size and not batch.closed
    assert add(acc, TP, b"x" * 100)[0] == APPENDED_WAKE  # 8th does not fit: new batch, old one closed
    first, second = acc.queued(TP)
    assert first.closed and len(first) == 7 and len(second) == 1 and not second.closed


def test_a_batch_that_reaches_batch_size_exactly_is_closed_at_once() -> None:
    acc = RecordAccumulator(batch_size=HEADER_SIZE + estimate_size(None, b"y" * 50))
    assert add(acc, TP, b"y" * 50)[0] == APPENDED_WAKE
    [batch] = acc.queued(TP)
    assert batch.closed
    out, _ = acc.drain(0.0, leader)  # full: sendable before the linger
    assert [b for _, _, bs in out for b in bs] == [batch]


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = RecordAccumulator(batch_size=200)
    add(acc, TP, b"a")
    add(acc, TP, b"b" * 500)
    add(acc, TP, b"c")
    sizes = [[r[1] for r in b.records] for b in acc.queued(TP)]
    assert sizes == [[b"a"], [b"b" * 500], [b"c"]]


def test_partitions_batch_independently() -> None:
    acc = RecordAccumulator(batch_size=10_000)
    for i in range(10):
        add(acc, TP if i % 2 else TP1, b"v")
    assert [len(b) for b in acc.queued(TP)] == [5] and [len(b) for b in acc.queued(TP1)] == [5]


def test_linger_holds_an_open_batch_then_releases_it() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=5)
    add(acc, TP, b"v", now=10.0)
    assert acc.drain(10.004, leader) == ([], False)
    assert acc.next_deadline(10.004) == pytest.approx(0.001)
    out, _ = acc.drain(10.005, leader)
    assert [(tp, url, len(bs)) for tp, url, bs in out] == [(TP, URL, 1)]
    assert acc.next_deadline(10.005) is None  # in flight; nothing queued


def test_flush_makes_open_batches_sendable_before_the_linger() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=60_000)
    add(acc, TP, b"v")
    pending = acc.begin_flush()
    assert len(pending) == 1 and acc.next_deadline(0.0) == 0.0
    out, _ = acc.drain(0.0, leader)
    assert len(out) == 1
    acc.end_flush()


def test_closing_makes_open_batches_sendable() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=60_000)
    add(acc, TP, b"v")
    acc.closing = True
    assert len(acc.drain(0.0, leader)[0]) == 1


def test_one_request_per_partition_at_a_time_keeps_order() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=0, max_request_size=10_000)
    for i in range(3):
        add(acc, TP, bytes([65 + i]) * 50)  # one record per batch (61 + 71 > 100)
    out, _ = acc.drain(0.0, leader)
    [(_, _, batches)] = out
    assert [b.records[0][1][:1] for b in batches] == [b"A", b"B", b"C"]  # all three in one request
    assert acc.is_muted(TP)
    add(acc, TP, b"D" * 50)
    assert acc.drain(1.0, leader) == ([], False)  # muted: the new batch waits for the answer
    acc.finish(TP, batches)
    out, _ = acc.drain(1.0, leader)
    assert [b.records[0][1][:1] for b in out[0][2]] == [b"D"]


def test_max_request_size_splits_a_partition_backlog_over_requests() -> None:
    acc = RecordAccumulator(batch_size=200, linger_ms=0, max_request_size=300)
    for _ in range(4):
        add(acc, TP, b"x" * 100)  # one 182-byte batch each
    out, _ = acc.drain(0.0, leader)
    assert len(out[0][2]) == 1  # a second batch would exceed 300 bytes
    acc.finish(TP, out[0][2])
    out, _ = acc.drain(0.0, leader)
    assert len(out[0][2]) == 1 and len(acc.queued(TP)) == 2


def test_an_idempotent_request_carries_at_most_the_leaders_window_of_batches_per_partition() -> None:
    """A request whose append succeeded but whose answer was lost is retried whole; the leader recognises it as
    duplicates only if all its batches are among the 5 it remembers per producer (else OUT_OF_ORDER_SEQUENCE)."""
    acc = RecordAccumulator(batch_size=100, linger_ms=0, max_request_size=1 << 20, max_batches_per_request=5)
    for i in range(8):
        add(acc, TP, bytes([65 + i]) * 50)  # one record per batch
    out, _ = acc.drain(0.0, leader)
    assert len(out[0][2]) == 5
    acc.requeue(TP, out[0][2], retry_at=0.0)  # an ambiguous failure: the same five go again, nothing more
    out, _ = acc.drain(0.0, leader)
    assert [b.records[0][1][:1] for b in out[0][2]] == [b"A", b"B", b"C", b"D", b"E"]


def test_a_retry_goes_back_in_front_in_order_and_waits_for_its_backoff() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=0)
    add(acc, TP, b"A" * 50)
    add(acc, TP, b"B" * 50)
    out, _ = acc.drain(0.0, leader)
    sent = out[0][2]
    add(acc, TP, b"C" * 50)  # queued behind the in-flight request
    acc.requeue(TP, sent, retry_at=0.1)
    assert [b.records[0][1][:1] for b in acc.queued(TP)] == [b"A", b"B", b"C"]
    assert all(b.attempts == 1 for b in sent)
    assert acc.drain(0.05, leader) == ([], False)
    assert acc.next_deadline(0.05) == pytest.approx(0.05)
    out, _ = acc.drain(0.1, leader)
    assert [b.records[0][1][:1] for b in out[0][2]][:2] == [b"A", b"B"]


def test_new_records_never_join_a_requeued_batch() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    add(acc, TP, b"A")
    out, _ = acc.drain(0.0, leader)
    acc.requeue(TP, out[0][2], retry_at=1.0)
    add(acc, TP, b"B")
    first, second = acc.queued(TP)
    assert [r[1] for r in first.records] == [b"A"] and [r[1] for r in second.records] == [b"B"]


def test_partition_without_a_leader_is_not_drained_and_is_reported() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    add(acc, TP, b"v")
    add(acc, TP1, b"w")
    out, leaderless = acc.drain(0.0, lambda tp: URL if tp == TP1 else None)
    assert [tp for tp, _, _ in out] == [TP1] and leaderless
    assert acc.next_deadline(0.0) == pytest.approx(120.0)  # only its expiry counts until metadata changes
    out, leaderless = acc.drain(0.2, leader)
    assert [tp for tp, _, _ in out] == [TP] and not leaderless


def test_batches_past_the_delivery_timeout_expire() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0, delivery_timeout_ms=1000)
    add(acc, TP, b"v", now=0.0)
    add(acc, TP1, b"w", now=0.5)
    assert acc.expire(0.999) == []
    expired = acc.expire(1.0)
    assert [b.tp for b in expired] == [TP] and acc.incomplete == 1


def test_flush_waits_only_for_batches_present_when_it_began() -> None:
    acc = RecordAccumulator()
    add(acc, TP, b"v")
    pending = acc.begin_flush()
    add(acc, TP1, b"w")
    assert len(pending) == 1 and acc.incomplete == 2
    acc.end_flush()


def test_keyless_records_stick_to_a_partition_until_its_batch_is_full() -> None:
    acc = RecordAccumulator(batch_size=HEADER_SIZE + 10 * estimate_size(None, b"x" * 10), linger_ms=1000)
    partitioner = DefaultPartitioner(random.Random(11))
    for _ in range(35):
        fut: Future[RecordMetadata] = Future()
        append_keyless(acc, partitioner, "t", 4, [0, 1, 2, 3], (None, b"x" * 10, 0, ()), fut, 31, 0.0)
    batches = [b for p in range(4) for b in acc.queued(TopicPartition("t", p))]
    assert sorted(len(b) for b in batches) == [5, 10, 10, 10]
    # Each full batch made the topic move on, and never to the partition it just left.
    assert all(b.closed for b in batches if len(b) == 10)


def test_append_can_refuse_to_open_a_batch() -> None:
    acc = RecordAccumulator(batch_size=10_000)
    fut: Future[RecordMetadata] = Future()
    assert acc.append(TP, (None, b"v", 0, ()), fut, 22, 0.0, abort_on_new_batch=True) == ABORTED
    assert acc.queued(TP) == [] and acc.incomplete == 0


def test_batch_encodes_once_and_resolves_futures_with_offsets() -> None:
    batch = ProducerBatch(TP, 0.0, 120.0)
    futs: list[Future[RecordMetadata]] = [Future() for _ in range(3)]
    for i, fut in enumerate(futs):
        batch.records.append((f"k{i}".encode(), None if i == 2 else f"v{i}".encode(), 1000 + i, (("h", b"1"),)))
        batch.futures.append(fut)
    futs[1].cancel()
    wire = batch.encode(GZIP)
    assert batch.encode(GZIP) is wire  # a retry resends the identical bytes
    records = decode_records(wire)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (0, b"k0", b"v0", 1000, (("h", b"1"),)),
        (1, b"k1", b"v1", 1001, (("h", b"1"),)),
        (2, b"k2", None, 1002, (("h", b"1"),)),
    ]
    batch.complete(41)
    assert futs[0].result() == RecordMetadata("t", 0, 41, 1000)
    assert futs[2].result() == RecordMetadata("t", 0, 43, 1002)
    assert futs[1].cancelled() and batch.done.is_set()


def test_acks_zero_gives_offset_minus_one_and_failures_reach_every_future() -> None:
    batch = ProducerBatch(TP, 0.0, 1.0)
    fut: Future[RecordMetadata] = Future()
    batch.records.append((None, b"v", 5, ()))
    batch.futures.append(fut)
    batch.complete(-1)
    assert fut.result().offset == -1
    failed = ProducerBatch(TP, 0.0, 1.0)
    futs: list[Future[RecordMetadata]] = [Future(), Future()]
    failed.futures.extend(futs)
    failed.fail(ValueError("boom"))
    assert all(isinstance(f.exception(), ValueError) for f in futs)


records_st = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=3000)),
        st.integers(min_value=0, max_value=1 << 45),
        st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(records_st)
def test_estimated_batch_size_never_undershoots_the_encoded_size(records: list) -> None:
    batch = ProducerBatch(TP, 0.0, 1.0)
    ts0 = min(r[2] for r in records)
    for key, value, ts, headers in records:
        # Timestamp deltas inside a batch stay small in practice; keep them within an int32 of the first.
        rec = (key, value, ts0 + (ts - ts0) % (1 << 31), tuple(headers))
        batch.records.append(rec)
        batch.size += estimate_size(key, value, rec[3])
    assert len(batch.encode(NONE)) <= batch.size
